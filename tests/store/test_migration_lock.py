"""Tests for the migration lock in bot/store/engine.py: many processes starting at once on an empty database
all migrate it (or find it migrated), none fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import current_revision, database_url

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).parents[2]
NEWEST = ScriptDirectory(str(ROOT / "bot" / "store" / "migrations")).get_current_head()
PROCESSES = 20


async def test_twenty_processes_upgrading_an_empty_database_at_once_all_succeed(
    store_url: str, tmp_path: Path
) -> None:
    """20 `db upgrade` processes started together on a fresh database: all exit 0, the schema at the newest
    revision (without the lock, PostgreSQL fails them on duplicate tables, SQLite on "database is locked")."""
    config = tmp_path / "bot.toml"
    config.write_text(f'[storage]\nurl = "{store_url}"\n[servers.demo]\ncommand = "python"\n')
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [sys.executable, "-m", "tests.store._upgrade_many", str(config), str(PROCESSES)],
            cwd=ROOT,
            check=False,
        )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    assert json.loads(out.splitlines()[-1]) == [0] * PROCESSES, err
    assert out.count(f"at revision {NEWEST}") == PROCESSES
    engine = create_async_engine(database_url(store_url))
    try:
        assert await current_revision(engine) == NEWEST
    finally:
        await engine.dispose()

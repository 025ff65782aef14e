"""Tests for bot/store/engine.py and store.py: the database is created, migrated, and upgraded without loss."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import inspect

from bot.config import Secret, StorageConfig, load_config
from bot.store import AuditEvent, AuditLog, current_revision, database_url, open_engine, open_store, upgrade
from tests.inprocess import toolnexus
from tests.zygote import EXE, run_bot_text

pytestmark = pytest.mark.anyio

NEWEST = "0027"


async def test_a_fresh_database_is_migrated_to_the_newest_revision_on_open(store_url: str) -> None:
    """Opening an empty database creates every table and stamps the newest revision."""
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await current_revision(store.engine) == NEWEST
        async with store.engine.connect() as conn:
            tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
        assert {
            "audit",
            "rounds",
            "approvals",
            "approval_votes",
            "agent_tokens",
            "updates_seen",
            "telegram_budget",
            "alembic_version",
        } <= tables


async def test_a_database_at_the_first_revision_is_upgraded_and_keeps_its_rows(store_url: str) -> None:
    """An older database is upgraded in place: the audit row written at revision 0001 is still there and the
    chain still verifies."""
    engine = await open_engine(store_url, migrate=False)
    try:
        await upgrade(engine, "0001")
        assert await current_revision(engine) == "0001"
        written = await AuditLog(engine).append(
            AuditEvent.CALL_STARTED, user_id=7, server="demo", tool="deploy"
        )
    finally:
        await engine.dispose()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await current_revision(store.engine) == NEWEST
        assert await store.audit.rows() == [written]
        assert await store.audit.verify() == (1, None)


async def test_opening_twice_leaves_the_schema_and_rows_alone(store_url: str) -> None:
    """A restart runs the migrations again: nothing to do, nothing lost."""
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        await store.audit.append(AuditEvent.CALL_STARTED, user_id=1)
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert [row.user_id for row in await store.audit.rows()] == [1]


async def test_the_database_appears_beside_the_config_on_first_run(tmp_path: Path) -> None:
    """With no [storage] table the database is toolnexus.db in the config file's folder, created on open."""
    folder = tmp_path / "etc"
    folder.mkdir()
    path = folder / "bot.toml"
    path.write_text('[servers.demo]\ncommand = "python"\n')
    config = load_config(path, {})
    assert config.storage is not None
    assert config.storage.url.get() == f"sqlite:///{folder / 'toolnexus.db'}"
    async with open_store(config.storage):
        pass
    with sqlite3.connect(folder / "toolnexus.db") as db:
        assert db.execute("select version_num from alembic_version").fetchone() == (NEWEST,)


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:////var/lib/t.db", "sqlite+aiosqlite"),
        ("postgresql://bot:pw@db/toolnexus", "postgresql+asyncpg"),
        ("postgres://bot@db/toolnexus", "postgresql+asyncpg"),
    ],
)
def test_storage_urls_get_the_async_driver(url: str, driver: str) -> None:
    """sqlite runs on aiosqlite and postgresql on asyncpg, whatever the URL names."""
    assert database_url(url).drivername == driver


def test_db_upgrade_creates_the_database_beside_the_config_and_names_its_revision(tmp_path: Path) -> None:
    """`toolnexus-bot db upgrade --config PATH` as an operator runs it by hand (its main in process)."""
    config = tmp_path / "bot.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    done = toolnexus("db", "upgrade", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert f"at revision {NEWEST}" in done.stdout
    assert (tmp_path / "toolnexus.db").is_file()


def test_the_bot_exits_1_naming_a_database_it_cannot_reach_without_its_password(tmp_path: Path) -> None:
    """An unreachable PostgreSQL: one line naming the database (password masked), exit status 1."""
    config = tmp_path / "bot.toml"
    config.write_text(
        '[telegram]\ntoken = "1:x"\napi_base_url = "http://127.0.0.1:9/bot"\n'
        '[storage]\nurl = "postgresql://bot:hunter2@127.0.0.1:9/toolnexus"\n'
        '[servers.demo]\ncommand = "python"\n'
    )
    done = run_bot_text(
        [str(EXE), "--config", str(config)], input="", cwd=os.getcwd(), env=os.environ, timeout=60
    )
    assert done.returncode == 1
    assert "database postgresql://bot:***@127.0.0.1:9/toolnexus" in done.stderr
    assert "hunter2" not in done.stderr and "Traceback" not in done.stderr

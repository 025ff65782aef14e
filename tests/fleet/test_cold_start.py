"""A fleet's cold start (issue 32): 20 real bot processes started at the same moment on an empty PostgreSQL
database, in webhook mode against the fake Bot API. The migrations run under an advisory lock
(`bot.store.engine`): one process migrates, the others wait and find the schema current; every process then
runs, owns its share of the partitions and, sent SIGTERM, drains and exits 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store import current_revision, database_url
from tests.fakes.telegram import FakeTelegram
from tests.fleet.scene import ALICE, SECRET
from tests.ports import free_port
from tests.store.test_migration_lock import NEWEST, ROOT
from tests.zygote import server_toml

pytestmark = pytest.mark.anyio

INSTANCES = 20


async def test_twenty_instances_started_at_once_on_an_empty_database_all_run(
    tmp_path: Path, postgresql_url: str
) -> None:
    """20 `toolnexus-bot` processes of one fleet, started together on a database with no tables: each says it is
    running and exits 0 on SIGTERM; the schema is at the newest revision and nothing of theirs is left in the
    fleet's tables: no live instance, no partition held."""
    async with FakeTelegram() as fake:
        configs = []
        for i in range(INSTANCES):
            config = tmp_path / f"bot{i}.toml"
            config.write_text(
                "[telegram]\n"
                f'token = "{fake.token}"\n'
                f'api_base_url = "{fake.base_url}"\n'
                f"allowed_users = [{ALICE}]\n"
                f'mode = "webhook"\nwebhook_secret = "{SECRET}"\n'
                f'[web]\nlisten = "127.0.0.1"\nport = {free_port()}\npublic_url = "https://bot.example.com"\n'
                f'[storage]\nurl = "{postgresql_url}"\n'
                "[run]\ndrain_s = 1\n"
                "[servers.demo]\n" + server_toml("bot.demo_server")
            )
            configs.append(str(config))
        with anyio.fail_after(240):
            done = await anyio.run_process(
                [sys.executable, "-m", "tests.fleet._start_many", *configs],
                cwd=ROOT,
                check=False,
            )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    assert report["failed_logs"] == [], "\n-----\n".join(report["failed_logs"])
    assert report["statuses"] == [0] * INSTANCES
    assert report["running"] == [True] * INSTANCES
    engine = create_async_engine(database_url(postgresql_url))
    try:
        assert await current_revision(engine) == NEWEST
        async with engine.connect() as conn:
            live = (await conn.execute(text("SELECT count(*) FROM fleet_instances"))).scalar_one()
            held = (
                await conn.execute(text("SELECT count(*) FROM fleet_partitions WHERE owner IS NOT NULL"))
            ).scalar_one()
        assert (live, held) == (0, 0)
    finally:
        await engine.dispose()

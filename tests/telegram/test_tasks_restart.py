"""A tool call made as a task outlives the bot: SIGKILL or SIGTERM while the task runs, and the next process polls
it again; its result reaches the person once.

End to end with real parts only, as the other restart tests: the installed `toolnexus-bot` command against the
fake Bot API, a streamable HTTP MCP server in its own process that keeps its tasks across the bot's sessions
(`tests.fakes.servers.tasks_http`), and the database on SQLite.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from sqlalchemy import select

from bot.store import open_engine
from bot.store.tables import tool_tasks
from tests.fakes.telegram import FakeTelegram
from tests.telegram.harness import is_result, result_body
from tests.telegram.test_drain import bot_process, write_config
from tests.telegram.test_restart import ALICE, Durable, socket_server

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def tasks_server(tmp_path: Path) -> AsyncIterator[Durable]:
    """`tests.fakes.servers.tasks_http` in a process of its own, on a socket listening before it starts."""
    # Started cold, not through the tests' zygote: its passing of a listening socket fails once a PostgreSQL
    # server was started in the same session (test_restart.py's durable server shows it too).
    async with socket_server(tmp_path, "tests.fakes.servers.tasks_http", cold=True) as server:
        yield server


async def kept_tasks(url: str) -> int:
    engine = await open_engine(url, migrate=False)
    try:
        async with engine.connect() as conn:
            return len((await conn.execute(select(tool_tasks.c.id))).all())
    finally:
        await engine.dispose()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_a_task_running_when_the_bot_stops_is_polled_again_and_its_result_arrives_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """The bot is stopped (killed, or drained) while its task works; the next process polls the same task (not
    sent again, not cancelled), and once it completes its result reaches the person exactly once; the task is
    no longer kept."""
    async with FakeTelegram() as fake, tasks_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, protocol="legacy")
        store = "sqlite:///" + str(tmp_path / "bot.db")
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d brew what=tea")
            await fake.wait_for(lambda m: "waiting for the kettle" in m.text, timeout=30)
            assert await kept_tasks(store) == 1
            bot.process.send_signal(stop)
            with anyio.fail_after(30):
                await bot.process.wait()
        assert await kept_tasks(store) == 1  # left for the next process: not cancelled, not forgotten
        async with bot_process(config, fake) as bot:
            await bot.logged("tasks kept from before the restart: 1, 1 polled again")
            async with httpx.AsyncClient() as client:
                (await client.post(server.url.removesuffix("/mcp") + "/finish")).raise_for_status()
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
            assert "brewed tea" in result_body(result)
            assert await kept_tasks(store) == 0  # forgotten before the result was shown
        methods = [r["method"] for r in server.received()]
        assert methods.count("tools/call") == 1 and methods.count("tasks/result") == 1
        assert "tasks/cancel" not in methods
        assert [m for m in fake.messages(alice, from_bot=True) if is_result(m, call)] == [result]

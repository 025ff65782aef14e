"""An agent's task whose call was running (not waiting for approvers) in a bot process that ended: the next process
reports it failed, in both eras, instead of `working` until its time to live. The installed `toolnexus-bot` with
the gateway on, a SQLite file, the counting stdio server (a slow tool) gated by one approver; the process is SIGKILLed
or SIGTERMed while the approved call runs, and started again on the same database."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.store.gateway_tasks import ORPHANED, GatewayTask
from tests.fakes.telegram import FakeTelegram, FakeUser
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID
from tests.telegram.test_approvals_restart import BOB_ID, OPS
from tests.telegram.test_drain import bot_process
from tests.web.agents import agent as legacy_agent
from tests.web.agents import make_token
from tests.web.test_gateway_tasks import call_as_task, serving
from tests.web.test_gateway_tasks import polled as legacy_polled
from tests.web.test_gateway_tasks_2026 import CreatedTask, Tasks, agent, polled
from tests.zygote import server_toml

pytestmark = pytest.mark.anyio

COUNT = {"steps": 100_000, "delay_s": 0.05}
"""Long enough to be running whenever the process is stopped."""


RUNS = "an agent's task runs its call here"
"""What the bot logs once it has said in the store that a task's call runs in it."""


async def task_in(db: Path, task_id: str) -> GatewayTask | None:
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{db}"))) as store:
        return await store.tasks.get(task_id, None)


@asynccontextmanager
async def world(tmp_path: Path) -> AsyncIterator[tuple[FakeTelegram, FakeUser, Path, int, Path]]:
    """The fake Bot API with Alice and the approver Bob in OPS; Bob; the bot's config; its port; its database."""
    db, config, heard = tmp_path / "bot.db", tmp_path / "bot.toml", tmp_path / "heard"
    port = free_port()
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE_ID, first_name="Alice")
        bob = fake.user(id=BOB_ID, first_name="Bob")
        fake.group(OPS, title="On-call", members=[alice, bob])
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
            f"allowed_users = [{ALICE_ID}]\n"
            f'[storage]\nurl = "sqlite:///{db}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "https://bot.example.com"\n'
            "[gateway]\nenabled = true\n"
            "[servers.count]\n"
            + server_toml("tests.fakes.servers.counting", str(heard))
            + f'[[approvals]]\nservers = ["count"]\ntools = ["count"]\napprovers = [{BOB_ID}]\n'
            f'quorum = 1\nchat = {OPS}\ncallers = ["agent"]\n'
        )
        yield fake, bob, config, port, db


@pytest.mark.parametrize(
    ("era", "stop"),
    [("2025-11-25", signal.SIGKILL), ("2026-07-28", signal.SIGTERM)],
    ids=["2025-kill", "2026-term"],
)
async def test_an_agents_task_running_when_its_process_ends_is_reported_failed_by_the_next_process(
    tmp_path: Path, era: str, stop: signal.Signals
) -> None:
    """The agent's count (gated: Bob approves it) is a task; once Bob approved, the call runs; the bot process is
    stopped (SIGKILL: no shutdown at all; SIGTERM: a clean stop) and started again: the agent's poll of the new
    process finds the task failed, saying the process ended and that the call may or may not have run (2025-11-25:
    its status message; 2026-07-28: its inlined error)."""
    async with world(tmp_path) as (fake, bob, config, port, db):
        async with bot_process(config, fake) as first:
            await serving(first)
            token = await make_token(f"sqlite:///{db}", ALICE_ID, "ci-bot")
            if era == "2025-11-25":
                task_id = (await call_as_task(port, token, "count__count", COUNT)).task.task_id
            else:
                async with agent(port, token, Tasks()) as client:
                    created = await client.session.call_tool("count__count", COUNT, allow_claimed=True)
                assert isinstance(created, CreatedTask), created
                task_id = created.task_id
            card = await fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=30)
            await bob.press(card, "✅ Approve", timeout=30)
            await first.logged(RUNS)
            before = await task_in(db, task_id)
            first.process.send_signal(stop)
            await first.process.wait()

        async with bot_process(config, fake) as second:
            await serving(second)
            if era == "2025-11-25":
                async with legacy_agent(port, token, mode="legacy") as client:
                    legacy = await legacy_polled(client, task_id, within_s=60)
                status: str = legacy.status
                line = legacy.status_message
            else:
                async with agent(port, token, Tasks()) as client:
                    modern = await polled(client.session, task_id, within_s=60)
                status = modern.status
                line = (modern.error or {}).get("message")
                assert modern.result is None and (modern.error or {}).get("code") == -32603
            assert await second.terminate() == 0
    assert before is not None and before.state.value == "working" and before.alive is not None
    assert status == "failed" and line == ORPHANED

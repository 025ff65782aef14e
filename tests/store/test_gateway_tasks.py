"""The gateway's tasks in a real SQLite database: kept for their time to live from creation and gone after it,
read only by the token that made them, settled once."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.store.gateway_tasks import ORPHANED, STALE_S, GatewayTaskStore, TaskState

pytestmark = pytest.mark.anyio


async def test_a_task_is_kept_for_its_ttl_read_only_by_its_token_settled_once_and_gone_after_it(
    tmp_path: Path,
) -> None:
    now = [1000.0]
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp_path / 'bot.db'}"))) as store:
        tasks = GatewayTaskStore(store.engine, store.agents, clock=lambda: now[0])
        task = await tasks.create(7, 1001, "ci-bot", "prod__deploy", ttl_ms=60_000)
        assert await tasks.get(task.id, 8) is None
        assert [t.id for t in await tasks.of_token(7)] == [task.id] and await tasks.of_token(8) == []

        now[0] += 59.9
        assert await tasks.finish(task.id, TaskState.COMPLETED, {"content": []})
        assert not await tasks.finish(task.id, TaskState.CANCELLED, message="too late")
        kept = await tasks.get(task.id, 7)
        assert kept is not None and kept.state is TaskState.COMPLETED and kept.result == {"content": []}

        now[0] += 0.2
        assert await tasks.get(task.id, 7) is None and await tasks.of_token(7) == []


async def test_a_running_task_its_process_stopped_saying_it_runs_is_failed_when_read_and_a_waiting_one_never(
    tmp_path: Path,
) -> None:
    """A task whose process said it runs the call, then went quiet for `STALE_S`, is failed (`ORPHANED`) by the next
    read, by id or by token, and stays failed (a late beat does not bring it back); a task waiting for approvers
    (not running: `alive` None) stays `working` however long."""
    now = [1000.0]
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp_path / 'bot.db'}"))) as store:
        tasks = GatewayTaskStore(store.engine, store.agents, clock=lambda: now[0])
        running = await tasks.create(7, 1001, "ci-bot", "prod__count", ttl_ms=3_600_000)
        listed = await tasks.create(7, 1001, "ci-bot", "prod__count", ttl_ms=3_600_000)
        waiting = await tasks.create(7, 1001, "ci-bot", "prod__deploy", ttl_ms=3_600_000)
        for task in (running, listed):
            await tasks.alive(task.id, running=True)
        await tasks.alive(waiting.id, running=False)

        now[0] += STALE_S - 0.1
        fresh = await tasks.get(running.id, 7)
        now[0] += 0.2
        lost = await tasks.get(running.id, 7)
        by_token = {t.id: t for t in await tasks.of_token(7)}
        await tasks.alive(running.id, running=True)
        still = await tasks.get(running.id, 7)
        now[0] += 3000
        asleep = await tasks.get(waiting.id, 7)
    assert fresh is not None and fresh.state is TaskState.WORKING
    assert lost is not None and lost.state is TaskState.FAILED and lost.message == ORPHANED
    assert by_token[listed.id].state is TaskState.FAILED
    assert still is not None and still.state is TaskState.FAILED
    assert asleep is not None and asleep.state is TaskState.WORKING

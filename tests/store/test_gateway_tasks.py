"""The gateway's tasks in a real SQLite database: kept for their time to live from creation and gone after it,
read only by the token that made them, settled once."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.store.gateway_tasks import GatewayTaskStore, TaskState

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

"""A call made as a task by a process that lost its person to another instance of a fleet (it was stalled and woke
with the call's clock due, before it heard it lost them): it leaves the task to the person's new owner, as the
outbox and kept questions do. No `tasks/cancel` to the server, and the kept row stays (docs/tasks.md).

Real parts: the hub, its calls and the store (SQLite) are the real ones, the server is
`tests.fakes.servers.tasks_http` in a process of its own; the fleet is `Stale`, an `Ownership` as a stalled
instance's partitions see it on waking: in memory still its own, and its check says it lost them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.core import CallStatus, PromptRegistry
from bot.servers.hub import Hub
from bot.store import open_engine
from bot.store.tasks import TaskStore
from tests.fakes.surface import ALICE, RecordingSurface, make_config
from tests.telegram.test_tasks_restart import tasks_server

pytestmark = pytest.mark.anyio


class Stale:
    """A stalled instance's hold on its people as it wakes: `owns` (memory) has not heard yet; `acts_for` (the
    check before a side effect) has: another instance took them over."""

    def owns(self, user_id: int) -> bool:
        return True

    async def acts_for(self, user_id: int) -> bool:
        return False


async def test_a_task_whose_person_another_instance_took_over_is_neither_cancelled_nor_forgotten(
    tmp_path: Path,
) -> None:
    """The call's clock ends it while its task works: the server hears no `tasks/cancel`, and the task stays kept
    for the person's new owner to poll."""
    (tmp_path / "tasks").mkdir()
    engine = await open_engine("sqlite:///" + str(tmp_path / "bot.db"))
    try:
        book = TaskStore(engine)
        async with tasks_server(tmp_path / "tasks") as server:
            servers = {"t": {"url": server.url, "protocol": "legacy", "call_timeout_s": 3}}
            prompts = PromptRegistry(RecordingSurface(), 60, fence=Stale())
            async with Hub(make_config(servers), prompts, tasks=book) as hub:
                outcome = await hub.call_tool("t", "brew", {"what": "tea"}, ALICE)
            assert outcome.status is CallStatus.TIMED_OUT, outcome
            methods = [r["method"] for r in server.received()]
            assert "tools/call" in methods and "tasks/cancel" not in methods, methods
            assert [t.origin for t in await book.open_tasks()] == [ALICE]
    finally:
        await engine.dispose()

"""This instance's part in a fleet (docs/fleet.md): the partitions it owns, and what it takes over with them. Does
I/O (store, Bot API).

At start an instance restores only the kept questions of the users it owns (never another live instance's).
Whenever it takes more partitions later (another instance died, stalled or gave them back), it runs the restart
path for those users only: kept cards placed again from their saved progress, 2026-07-28 rounds resumed, legacy
ones ended with Run again; and the approval service adopts their waits. Takes are handled one after the other, in
order, by one task, so a take during the start's own restore waits for it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bot.core import KeptQuestion, Observer, PromptRegistry, RoundBook
from bot.store.fleet import Partitions, partition_of
from bot.telegram.restore import restore_kept
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner

__all__ = ["Takeovers"]

logger = logging.getLogger(__name__)


class Takeovers:
    """Runs the restart path for the partitions `partitions` takes (`run` in the host's task group)."""

    def __init__(
        self,
        partitions: Partitions,
        book: RoundBook,
        surface: TelegramSurface,
        runner: ToolRunner,
        prompts: PromptRegistry,
        observer: Observer | None,
        servers: set[str],
        adopt: Callable[[Callable[[int], bool]], Awaitable[None]] | None = None,
    ) -> None:
        self._partitions = partitions
        self._book = book
        self._surface = surface
        self._runner = runner
        self._prompts = prompts
        self._observer = observer
        self._servers = servers
        self._adopt = adopt
        self._taken: set[int] = set()
        self._poked = anyio.Event()
        self.restored = 0
        """Rounds taken back up by takeovers (after the start's)."""
        partitions.on_acquired(self._acquired)

    def _acquired(self, epochs: Mapping[int, int]) -> None:
        self._taken.update(epochs)
        self._poked.set()

    async def restore(self, tg: TaskGroup) -> int:
        """The start's restore: the kept questions of the users owned now (resumed rounds run in `tg`). Returns
        how many rounds were taken back up."""
        self._taken.update(self._partitions.owned)
        return await self._take(tg)

    async def run(self, tg: TaskGroup, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Take up the partitions taken later, until cancelled (resumed rounds run in `tg`)."""
        task_status.started()
        while True:
            await self._poked.wait()
            self.restored += await self._take(tg)

    async def _take(self, tg: TaskGroup) -> int:
        self._poked = anyio.Event()
        taken, self._taken = self._taken, set()
        taken = {p for p in taken if self._partitions.owns_partition(p)}
        if not taken:
            return 0

        def ours(user_id: int) -> bool:
            return partition_of(user_id) in taken

        def takes(question: KeptQuestion) -> bool:
            # A card this process still shows (its partition came back after a lost lock session) stays as it is.
            return ours(question.origin.user_id) and self._prompts.get(question.token) is None

        resumed = await restore_kept(
            self._book, self._surface, self._runner, self._observer, tg, servers=self._servers, owns=takes
        )
        if self._adopt is not None:
            try:
                await self._adopt(ours)
            except Exception:
                logger.exception("could not adopt the approvals of %d partition(s) taken", len(taken))
        return resumed

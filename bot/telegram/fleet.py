"""This process's part in the bot's processes, as the Telegram host runs it (docs/fleet.md): alone, or an instance
of a fleet with the partitions it owns and what it takes over with them. Does I/O (store, Bot API).

The composition (`bot.compose.telegram`) builds the one that fits the process's `Fleet`: `InFleet` for an instance
of a fleet on PostgreSQL, `AloneRestore` for a process on its own.

At start an instance restores only the kept questions and tasks of the users it owns (never another live
instance's). Whenever it takes more partitions later (another instance died, stalled or gave them back), it runs
the restart path for those users only: kept cards placed again from their saved progress, 2026-07-28 rounds
resumed, legacy ones ended with Run again; the messages other processes kept for them and did not send
(`bot.telegram.outbox`); their calls made as tasks polled again (`restore_tasks`: the instance that left them did
not cancel them); and the approval service adopts their waits. Takes are handled one after the other, in order,
by one task, so a take during the start's own restore waits for it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bot.core import KeptQuestion, Observer, PromptRegistry, RoundBook, TaskBook
from bot.servers.hub import Hub
from bot.store import Store
from bot.store.fleet import Partitions, partition_of
from bot.store.outbox import OutboxStore
from bot.store.postgres_fleet import PostgresFleet
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.outbox import resend
from bot.telegram.restore import restore_kept, restore_tasks
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner

__all__ = ["AloneRestore", "FleetPart", "InFleet", "Takeovers"]

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
        outbox: OutboxStore | None = None,
        tasks: TaskBook | None = None,
    ) -> None:
        self._partitions = partitions
        self._outbox = outbox
        self._tasks = tasks
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

        # The kept questions first, then what was on its way to them (results, settling edits: sent in `tg`, each
        # person's in order), then their tasks polled again (in `tg`: a status line, then the result, after what
        # was kept before them); only then are their waiting updates handed over (`taken_up`): a tap on a card
        # not yet placed again would be answered "expired", a /cancel would miss the task's call.
        try:
            resumed = await restore_kept(
                self._book, self._surface, self._runner, self._observer, tg, servers=self._servers, owns=takes
            )
            if self._outbox is not None:
                await resend(self._outbox, self._surface.bot, tg, taken)
            if self._tasks is not None:
                await restore_tasks(
                    self._tasks,
                    self._runner,
                    tg,
                    servers=self._servers,
                    owns=lambda task: ours(task.origin.user_id),
                )
        finally:
            self._partitions.taken_up(taken)
        if self._adopt is not None:
            try:
                await self._adopt(ours)
            except Exception:
                logger.exception("could not adopt the approvals of %d partition(s) taken", len(taken))
        return resumed


class FleetPart(Protocol):
    """This process's part, as the host runs it."""

    async def start(self, tg: TaskGroup, done: anyio.Event) -> None:
        """Before updates: the kept questions taken back up (alone: all of them; in a fleet: those of the
        partitions owned, the partitions first), and what keeps the fleet's view fresh started in `tg` until
        `done` is set."""
        ...


class AloneRestore:
    """A process on its own: at start, what the process before left in the outbox sent, and every kept question
    taken back up."""

    def __init__(self, store: Store | None, surface: TelegramSurface, runner: ToolRunner, hub: Hub) -> None:
        self._store = store
        self._surface = surface
        self._runner = runner
        self._hub = hub

    async def start(self, tg: TaskGroup, done: anyio.Event) -> None:
        if self._store is not None:
            if self._store.outbox is not None:  # what a kill left unsent: results, settling edits
                await resend(self._store.outbox, self._surface.bot, tg)
            servers = set(self._hub.server_names())
            await restore_kept(
                self._store.rounds, self._surface, self._runner, self._store.observer, tg, servers=servers
            )
            if self._store.tool_tasks is not None:
                await restore_tasks(self._store.tool_tasks, self._runner, tg, servers=servers)


class InFleet:
    """An instance of a fleet: its partitions' heartbeats, the takeovers, the bus."""

    def __init__(
        self,
        fleet: PostgresFleet,
        store: Store,
        prompts: PromptRegistry,
        runner: ToolRunner,
        surface: TelegramSurface,
        hub: Hub,
        approvals: TelegramApprovals | None,
    ) -> None:
        self._fleet = fleet
        partitions = fleet.partitions

        def busy(partition: int) -> bool:
            """Something live in the partition: an open question or a running call (never given back)."""
            return any(partition_of(p.origin.user_id) == partition for p in prompts.pending()) or any(
                partition_of(user) == partition for user in runner.users_running()
            )

        def lost(partitions_lost: frozenset[int]) -> None:
            """Drop, here, everything held for the people of partitions taken over or given back (given back ones
            hold nothing: `busy`); their questions stay kept for the new owner."""

            def theirs(user_id: int) -> bool:
                return partition_of(user_id) in partitions_lost

            runs, cards = runner.leave(theirs), surface.drop(theirs)
            if runs or cards:
                logger.warning(
                    "partitions: %d lost; dropped %d call(s) and %d card(s) of their people here",
                    len(partitions_lost),
                    runs,
                    cards,
                )

        partitions.keep_busy(busy)
        partitions.on_lost(lost)
        self._takeovers = Takeovers(
            partitions,
            store.rounds,
            surface,
            runner,
            prompts,
            store.observer,
            set(hub.server_names()),
            None if approvals is None else approvals.service.adopt,
            store.outbox,
            store.tool_tasks,
        )

    async def start(self, tg: TaskGroup, done: anyio.Event) -> None:
        await tg.start(_until, done, self._fleet.run)
        await self._takeovers.restore(tg)
        await tg.start(_until, done, functools.partial(self._takeovers.run, tg))
        await tg.start(_until, done, self._fleet.listen)


async def _until(
    done: anyio.Event, run: Callable[..., Any], *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """`run` (a service with `task_status`) started, and cancelled once `done` is set."""
    async with anyio.create_task_group() as inner:
        await inner.start(run)
        task_status.started()
        await done.wait()
        inner.cancel_scope.cancel()

"""Group commit: writes that arrive while one is being committed go together in the next transaction.

The store's one writer (`bot.store.writer`): the audit log's rows and the kept questions' writes. One caller at a time is the writer: it takes every write
queued so far and commits them in one call of `write`; the callers whose writes were in that batch are woken
together (one event each, all set at once), and the first caller still waiting becomes the next writer. A
lock held in turn would wake the waiters one by one instead, each in its own pass of the event loop: under a
flood, with hundreds of sessions busy in that loop, the last of a hundred waiters heard of its committed
write seconds later. Does no I/O itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["GroupCommit"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False, slots=True)
class _Entry(Generic[T, R]):
    item: T
    waiting: anyio.Event | None = None
    """Made when its caller waits (another caller is writing): set when the write is done, or when this caller
    is to write the queue next (`done` tells which). A caller that writes at once never needs one."""
    woken: bool = False
    """Whether `waiting` was set (or would have been, had the caller been waiting)."""
    done: bool = False
    result: R | None = None
    error: BaseException | None = None
    abandoned: bool = False
    """Its caller was cancelled while waiting: the write still goes, with the next batch; the caller is
    never asked to write."""


class GroupCommit(Generic[T, R]):
    """Commits items through `write`, which takes a batch and returns one outcome per item, in order: its
    result, or the exception that item alone fails with. An exception `write` raises fails the whole batch.

    A writer's commit is shielded from cancellation: the batch holds other callers' writes too.
    """

    def __init__(self, write: Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]]) -> None:
        self._write = write
        self._queue: list[_Entry[T, R]] = []
        self._writing = False

    async def submit(self, item: T) -> R:
        """Commit `item` (with whatever else is queued) and return its result.

        Raises:
            BaseException: what `write` gave or raised for this item.
        """
        entry: _Entry[T, R] = _Entry(item)
        self._queue.append(entry)
        if self._writing:
            entry.waiting = anyio.Event()
            try:
                await entry.waiting.wait()
            except BaseException:
                if entry.done:
                    raise
                if not entry.woken:
                    entry.abandoned = True  # its write goes with the next batch all the same
                    raise
                with anyio.CancelScope(shield=True):  # cancelled just as its turn to write came: write first
                    await self._write_queued()
                raise
        if not entry.done:
            await self._write_queued()
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]  # done without an error: `write` gave a result

    async def _write_queued(self) -> None:
        """Write every queued item, then wake their callers and hand the queue to the next one waiting."""
        self._writing = True
        try:
            with anyio.CancelScope(shield=True):
                # One pass of the event loop first: the writes started at the same time as this one (a
                # question's audit row and its kept copy) join its batch instead of waiting for the next.
                # (A plain checkpoint: the scope around it is shielded already.)
                await anyio.lowlevel.checkpoint()
                while True:
                    batch, self._queue = self._queue, []
                    await self._write_batch(batch)
                    if not self._queue or any(not e.abandoned for e in self._queue):
                        break  # nothing left, or someone waiting to write it
        finally:
            waiting = next((e for e in self._queue if not e.abandoned), None)
            if waiting is None:
                self._writing = False
            else:
                _wake(waiting)

    async def _write_batch(self, batch: list[_Entry[T, R]]) -> None:
        try:
            outcomes = await self._write([e.item for e in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{len(outcomes)} outcomes for a batch of {len(batch)}")
        except BaseException as exc:
            for e in batch:
                e.error = exc
        else:
            for e, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    e.error = outcome
                else:
                    e.result = outcome
        for e in batch:
            e.done = True
            _wake(e)


def _wake(entry: _Entry[T, R]) -> None:
    entry.woken = True
    if entry.waiting is not None:
        entry.waiting.set()

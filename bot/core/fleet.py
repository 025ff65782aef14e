"""The fleet as one interface: who owns a person, how a topic is relayed, what fences a write; and the process
that runs alone, in memory. No I/O.

A bot process is one of a fleet or alone, and the rest of the bot does not ask which: it holds a `Fleet`.
- `owns` / `acts_for` (`Ownership`): whom this process acts for. Alone: everyone, always.
- `bus`: wake-ups between processes, published inside the transaction that changed the rows they point at.
  Alone there is nobody else to wake (`shared` is False): the process that commits a change acts on it itself.
- `fence`: which of a batch of writes to kept questions this process may no longer make (another instance took
  their people). Alone: none.
- `run`: what keeps the fleet's view fresh (heartbeats) for the process's life; alone, nothing to do.

The PostgreSQL fleet is `bot.store.postgres_fleet.PostgresFleet`; `ALONE` is the process on its own. What the
processes relay to each other over the bus (Mini App answers, sign-in returns) goes through one shape,
`bot.core.relay.Relay`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskStatus

from bot.core.ownership import Ownership

__all__ = ["ALONE", "Bus", "Fence", "Fleet"]


class Bus(Protocol):
    """Relay a topic: "look again" wake-ups between the processes of a fleet. The rows hold the truth."""

    @property
    def shared(self) -> bool:
        """Whether other processes publish on it (a fleet's): a waiter of a change may live in another process."""
        ...

    def subscribe(
        self, topic: str, on_message: Callable[[str], None], on_connect: Callable[[], None] | None = None
    ) -> None:
        """`on_message(payload)` for each notification of `topic`, `on_connect()` after every (re)connect (what
        was published meanwhile may have been missed). Both run on the event loop and must not block."""
        ...

    async def publish(self, conn: Any, topic: str, payload: str) -> None:
        """Notify `topic` with `payload` once `conn` (the store's open transaction) commits."""
        ...


class Fence(Protocol):
    """The fence of a write: what this process may no longer write for people another instance took over."""

    def refused(self, conn: Any, writes: Sequence[tuple[str, ...]]) -> set[int]:
        """The places in `writes` (each the kept questions one write changes; empty for a new question, never
        fenced) that are refused, checked in `conn` (the store's open transaction) and held until it ends."""
        ...


class Fleet(Ownership, Protocol):
    """This process's part in the bot's processes: a fleet's (`PostgresFleet`) or alone (`ALONE`)."""

    @property
    def bus(self) -> Bus: ...

    @property
    def fence(self) -> Fence: ...

    def owned_count(self) -> int | None:
        """How many of the people's partitions this process owns; None alone (it has no partitions)."""
        ...

    @property
    def takeovers(self) -> int:
        """Partitions taken from another instance that still named itself their owner."""
        ...

    def drain(self) -> None:
        """A drain began: take nothing more (what is held is given back at the end of `run`)."""
        ...

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None:
        """Keep this process's view of the fleet fresh until cancelled (started once it has a first view)."""
        ...

    async def listen(self, *, task_status: TaskStatus[None] = ...) -> None:
        """Hear the bus until cancelled (started once it listens): subscribe everything before."""
        ...


class _Nobody:
    """The bus of a process alone: nobody else publishes, nobody else is woken."""

    shared: Final = False

    def subscribe(
        self, topic: str, on_message: Callable[[str], None], on_connect: Callable[[], None] | None = None
    ) -> None:
        """Nothing will come: this process acts on its own changes as it makes them."""

    async def publish(self, conn: Any, topic: str, payload: str) -> None:
        """Nobody to wake."""


class _Unfenced:
    def refused(self, conn: Any, writes: Sequence[tuple[str, ...]]) -> set[int]:
        return set()


class _Alone:
    """One process on its own: it owns everyone, wakes nobody, and every write of it stands."""

    bus: Final[Bus] = _Nobody()
    fence: Final[Fence] = _Unfenced()
    takeovers: Final = 0

    def owns(self, user_id: int) -> bool:
        return True

    async def acts_for(self, user_id: int) -> bool:
        return True

    def owned_count(self) -> int | None:
        return None

    def drain(self) -> None:
        """Nothing is held for others."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await anyio.sleep_forever()

    async def listen(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await anyio.sleep_forever()


ALONE: Final[Fleet] = _Alone()
"""The fleet of a process that runs alone (SQLite, polling, or no database)."""

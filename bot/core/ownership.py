"""Whom this process acts for: the people it owns, checked before each side effect for one of them. No I/O.

In a fleet each person belongs to one instance at a time (`bot.store.fleet.Partitions`). An instance that was
stalled (a GC pause, SIGSTOP, a cut network) may wake with timers due for people another instance took over
meanwhile: before it edits a card, answers a server or writes an audit row for a person, it asks `acts_for`.
One process on its own owns everyone (`EVERYONE`): its check is a constant.
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["EVERYONE", "Ownership"]


class Ownership(Protocol):
    """The people this process acts for."""

    def owns(self, user_id: int) -> bool:
        """Whether the person is this process's as far as it knows now (in memory, no I/O): False once it has
        learnt that it lost them."""
        ...

    async def acts_for(self, user_id: int) -> bool:
        """Whether this process may still act for the person now. Without I/O while its hold on them is fresh;
        otherwise it waits to learn whether it still holds them (a fleet's next heartbeat), and False when it
        does not (what it held for them has then been dropped: a call of theirs is cancelled under the caller)."""
        ...


class _Everyone:
    """One process on its own: everyone is its own, always."""

    def owns(self, user_id: int) -> bool:
        return True

    async def acts_for(self, user_id: int) -> bool:
        return True


EVERYONE: Final[Ownership] = _Everyone()
"""The ownership of a process that runs alone."""

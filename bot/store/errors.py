"""The store's own errors: callers above the store catch `StoreUnavailable`, never the ORM's errors. Pure.

Each is a `bot.errors.StoreError` (the whole tree is drawn in `bot.errors`); `StoreUnavailable` itself is
defined there, so layers beside the store can name it, and is the store's to raise:

StoreError (bot.errors)
 ├── StoreUnavailable (bot.errors)  the database cannot be opened, migrated, read or written
 │    └── AuditUnsealed             the audit chain has rows but no seal: a keyed start will not write on it
 ├── SecondInstance                 another live bot holds the place this one would need on the database
 └── Fenced                         a write refused: its user's partition was taken by another instance
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from bot.errors import StoreError, StoreUnavailable
from bot.store.engine import failure_reason

__all__ = ["AuditUnsealed", "Fenced", "SecondInstance", "StoreUnavailable", "unavailable", "unavailable_as"]

P = ParamSpec("P")
T = TypeVar("T")


class AuditUnsealed(StoreUnavailable):
    """The store opened with the audit key on a chain that has rows but no seal; the message (one line) says
    what it is and names `audit reseal`. Never re-sealed by a start (`bot.store.audit_seal`)."""

    def __init__(self, rows: int, trace: str | None) -> None:
        self.rows = rows
        self.trace = trace
        """What says the chain was keyed before (a row, a checkpoint): then it is tampered, not legacy."""
        if trace is not None:
            message = (
                f"audit log tampered: the chain was sealed with a key before ({trace}) and has lost its seal, "
                "so someone wrote the database; `toolnexus-bot audit --verify` shows what holds; restore a "
                "backup (`audit reseal` seals only a chain that was never keyed)"
            )
        else:
            message = (
                f"audit log: {rows} rows were written without the audit key; run `toolnexus-bot audit reseal` "
                "once to seal them under [storage] secret_key (it prints their old head), then start again"
            )
        super().__init__(message, file=True)


class Fenced(StoreError):
    """A kept question's write refused: its user's partition has another epoch now (another instance of the fleet
    took it over), so this process's view of the question is stale and must not reach the database."""


class SecondInstance(StoreError):
    """Another live bot holds the place this one needs on the database (the same SQLite file; polling for the
    same bot); the message (one line) says what to do instead."""


@contextmanager
def unavailable(what: str) -> Iterator[None]:
    """Turn the ORM's errors inside the block into `StoreUnavailable("<what>: <the driver's reason>")`.

    Raises:
        StoreUnavailable: the block raised `SQLAlchemyError`.
    """
    try:
        yield
    except SQLAlchemyError as exc:
        raise StoreUnavailable(f"{what}: {failure_reason(exc)}") from exc


def unavailable_as(what: str) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Coroutine[Any, Any, T]]]:
    """The coroutine function raises `StoreUnavailable` for the ORM's errors (`unavailable(what)` around it)."""

    def wrap(function: Callable[P, Awaitable[T]]) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(function)
        async def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
            with unavailable(what):
                return await function(*args, **kwargs)

        return guarded

    return wrap

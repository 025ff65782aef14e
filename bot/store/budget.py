"""One Telegram budget for a fleet (`telegram_budget` table): the overall rate and the group buckets, shared by
every bot process on one PostgreSQL database. Does I/O.

Telegram counts a bot's messages, not a process's: two instances each keeping 28 a second send 56, and a 429
on one says nothing to the other. So in a fleet each bucket is a row, kept as the generic cell rate algorithm
keeps it (the "theoretical arrival time" `tat`: when the bucket would be empty again), and a booking is one
statement that moves it on and returns how long to wait for the place it got. The database's clock decides, so
instances on hosts whose clocks differ still agree; the booking instance only waits out the returned duration.
A 429 seen by any instance stores "paused until" in the overall row, and every booking after it respects that.

A place is booked before the send it is for, which may then reach Telegram late (its process held up, the
network, Telegram itself). The places are spaced for sends that arrive on time or nearly (what the fleet
guarantees about a second, and why that margin: `bot.telegram.flood.FLEET_LATE_S`), and a booking also carries
what its instance learnt from Telegram's answers since its last one: how far the places are to move back for a
send that arrived later than that (`late_s`, a duration, so no clock is compared across hosts). The bucket's
`tat` moves on by that much once, so the places booked after it, by any instance, keep their interval from
where that send really landed. The row counts what it moved in all (`moved`), and each instance sends the count
it saw at its last booking: a delay every instance saw (Telegram reading nothing for a moment) moves the places
by the most any of them asks, not by the sum.

One short statement on a pooled connection in autocommit (no BEGIN/COMMIT round trips), one booking at a time
per process; the row lock is held for that statement only. Measured on loopback under load: about 1 ms from
asking to the answer, 0.35-0.4 ms of the bot's CPU (SQLAlchemy and asyncpg), per booking; carrying `late_s`
and returning `moved` changed neither (0.35-0.40 ms before and after, measured side by side, load 4). When the database cannot be reached, a booking returns None (the caller then keeps to
its own buckets: sends go on, at most the fleet's size times the rate), the first failure is logged once as a
warning, and the database is tried again `RETRY_AFTER_S` later, not on every send meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import anyio
from sqlalchemy import TextClause, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Config, TelegramMode
from bot.store.engine import failure_reason

__all__ = [
    "ALONE_BUDGET",
    "BOOK_TIMEOUT_S",
    "OVERALL",
    "RETRY_AFTER_S",
    "OwnBudget",
    "TelegramBudget",
    "fleet_budget",
]

logger = logging.getLogger(__name__)

OVERALL: Final = "overall"
"""The overall bucket's row; a group's is `g:<chat id or @name>`."""
BOOK_TIMEOUT_S: Final = 2.0
"""How long a booking may take before the database counts as unreachable (a connect to a host that is gone
would otherwise hang a send for the driver's whole timeout)."""
RETRY_AFTER_S: Final = 5.0
"""After a failed booking, how long the local buckets alone decide before the database is tried again."""

_BOOK: Final = text(
    """
    INSERT INTO telegram_budget AS b (bot_id, bucket, tat, paused_until, moved)
    VALUES (:bot_id, :bucket, extract(epoch FROM statement_timestamp())::float8 + :interval, 0, 0)
    ON CONFLICT (bot_id, bucket) DO UPDATE
    SET tat = greatest(
            b.tat + greatest(:late - (b.moved - :seen), 0),
            b.paused_until,
            extract(epoch FROM statement_timestamp())::float8
        ) + :interval,
        moved = b.moved + greatest(:late - (b.moved - :seen), 0)
    RETURNING greatest(b.tat - :period, b.paused_until) - extract(epoch FROM clock_timestamp())::float8, b.moved
    """
)
"""Book the next place in one bucket: its `tat` moves on by one interval from itself or from now (or from the
end of a pause), whichever is later; the place is `period` (the bucket's whole refill time) before the new
`tat`, or the end of the pause. With `late` (how much later than their places allowed the booking instance's
sends went), `tat` is first moved back by that much, less what any instance moved it back by since this one's
last booking (`seen`: `moved` then), so that a delay every instance saw moves the places once. Returns the
seconds from now to the place (negative or 0: go now) and `moved`."""

_PAUSE: Final = text(
    """
    INSERT INTO telegram_budget AS b (bot_id, bucket, tat, paused_until)
    VALUES (:bot_id, :bucket, 0, extract(epoch FROM statement_timestamp())::float8 + :pause)
    ON CONFLICT (bot_id, bucket) DO UPDATE
    SET paused_until = greatest(b.paused_until, excluded.paused_until)
    """
)
"""Pause the overall bucket for `pause` seconds from now (a longer pause already stored stays)."""


class TelegramBudget:
    """The fleet's shared buckets of one bot (rows keyed by the bot's id) on one PostgreSQL database.

    `book` and `pause` never raise for the database: None from `book` means "not available now, keep to your
    own buckets" (see the module's docstring)."""

    def __init__(
        self, engine: AsyncEngine, bot_id: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._engine = engine.execution_options(isolation_level="AUTOCOMMIT")
        self._bot_id = bot_id
        self._clock = clock
        self._down_until: float | None = None
        """While the database is taken for unreachable: when to try it again (by `clock`)."""
        self._moved: dict[str, float] = {}
        """Each bucket's `moved` at this instance's latest booking in it."""
        self._one_at_a_time = anyio.Lock()
        """Bookings go one after another (each about a millisecond): a burst of group messages takes one pooled
        connection, not the pool, and waiting for the pool never counts as the database being down."""

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        """Book the next place in a group's bucket (its chat id or @name), or the overall one (None): a
        request every `interval_s`, a burst of `period_s / interval_s`; `late_s`: how much later than their
        places allowed this instance's sends went since its last booking (the bucket moves on by that much
        first). The seconds to wait for the place (0: go now), or None when the database is unreachable."""
        bucket = OVERALL if group is None else f"g:{group}"
        params = {
            "bot_id": self._bot_id,
            "bucket": bucket,
            "interval": interval_s,
            "period": period_s,
            "late": late_s,
            "seen": self._moved.get(bucket, 0.0),
        }
        booked = await self._run(_BOOK, params, "booking a Telegram send")
        if booked is None:
            return None
        wait, self._moved[bucket] = booked
        return max(0.0, wait)

    async def pause(self, seconds: float) -> None:
        """Pause every instance's sending for `seconds` from now (Telegram answered 429 with that retry_after)."""
        await self._run(
            _PAUSE, {"bot_id": self._bot_id, "bucket": OVERALL, "pause": seconds}, "storing a 429"
        )

    async def _run(
        self, statement: TextClause, params: dict[str, object], what: str
    ) -> tuple[float, float] | None:
        async with self._one_at_a_time:
            return await self._run_now(statement, params, what)

    async def _run_now(
        self, statement: TextClause, params: dict[str, object], what: str
    ) -> tuple[float, float] | None:
        if self._down_until is not None and self._clock() < self._down_until:
            return None
        try:
            with anyio.fail_after(BOOK_TIMEOUT_S):
                async with self._engine.connect() as conn:
                    result = await conn.execute(statement, params)
                    row = result.one() if result.returns_rows else (0.0, 0.0)
                    value = (float(row[0]), float(row[1]))
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            if self._down_until is None:
                reason = "no answer in time" if isinstance(exc, TimeoutError) else failure_reason(exc)
                logger.warning(
                    "%s on the database failed (%s): each instance keeps to its own Telegram budget until it is "
                    "back (tried again every %.0f s)",
                    what,
                    reason,
                    RETRY_AFTER_S,
                )
            self._down_until = self._clock() + RETRY_AFTER_S
            return None
        if self._down_until is not None:
            logger.info("the database is back: the fleet's Telegram budget is shared again")
            self._down_until = None
        return value


class OwnBudget:
    """The budget of a process alone: nothing is shared, so nothing is booked (`book` says None: the process's
    own buckets decide, as they do when a fleet's database is out of reach), and a 429 pauses only this process
    (its own limiter already does). No I/O: a send costs no database round trip."""

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        return None

    async def pause(self, seconds: float) -> None:
        """Nobody else to pause."""


ALONE_BUDGET: Final = OwnBudget()
"""The Telegram budget of a process alone."""


def fleet_budget(config: Config, engine: AsyncEngine | None) -> TelegramBudget | OwnBudget:
    """The shared budget when this bot is part of a fleet (PostgreSQL and webhook mode); otherwise a single
    instance's (`ALONE_BUDGET`: its own buckets decide, with no database round trip per send)."""
    if engine is None or engine.dialect.name != "postgresql":
        return ALONE_BUDGET
    if config.telegram.mode is not TelegramMode.WEBHOOK:
        return ALONE_BUDGET
    return TelegramBudget(engine, config.bot_id())

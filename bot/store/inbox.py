"""The webhook's inbox (`updates_seen` table): which updates this bot was delivered, so each is handled once. Does I/O.

Telegram delivers an update again when it did not get a 200 in time (a timeout, a restart between the answer and
its arrival), maybe to another process. The webhook records the update's id here, committed, before it answers
200 and hands the update to PTB; a second delivery finds the row and is answered 200 without being handled. The
insert is `ON CONFLICT DO NOTHING`, so of two deliveries racing (two processes) exactly one inserts.

Telegram keeps an undelivered update for 24 hours, so a row older than `KEEP` can no longer meet its update again:
one record in `PRUNE_EVERY` also deletes up to `PRUNE_BATCH` such rows (by the index on `received`), so the table
stays a day of updates without a scheduler. Times are UTC, ISO 8601 with microseconds, from an injectable clock.

In a fleet (docs/fleet.md) each update is handled by the instance that owns its user's partition
(`bot.store.fleet`). An update delivered to another instance is recorded with its body, its partition and
`handled` false (`Waiting`), and the owner is woken in the same transaction (the fleet bus, topic "inbox"); the
owner `claim`s the waiting rows of its partitions (`FOR UPDATE SKIP LOCKED`, marked handled in the same
transaction: two claimers never get the same update). A row recorded without `Waiting` is handled by whoever
recorded it (`handled` null, as rows of the version before are).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

from sqlalchemy import delete, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.store.errors import StoreUnavailable, unavailable_as
from bot.store.tables import updates_seen

__all__ = ["KEEP", "PRUNE_BATCH", "PRUNE_EVERY", "Claimed", "InboxStore", "Waiting"]

logger = logging.getLogger(__name__)

KEEP: Final = dt.timedelta(hours=24)
"""How long Telegram keeps an update it could not deliver: after that no redelivery can come."""
PRUNE_EVERY: Final = 100
"""One record in this many also prunes (cheap: the table holds about a day of updates)."""
PRUNE_BATCH: Final = 1000
"""Rows deleted at most by one prune, so it never holds the table long."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """An update this instance does not handle: it waits in the inbox for the owner of `partition`."""

    partition: int
    payload: str
    """The update's JSON, as delivered."""
    wake: Callable[[AsyncConnection, int], Awaitable[None]]
    """Wakes the owner (the fleet bus's publish), inside the transaction that records the update."""


@dataclass(frozen=True, slots=True)
class Claimed:
    """A waiting update, now this instance's to handle."""

    update_id: int
    payload: str
    received: dt.datetime
    partition: int


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class InboxStore:
    """The `updates_seen` rows of one database, for any number of bots (keyed by bot id and update id)."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], dt.datetime] = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        """What "now" is (an aware datetime): pruning judges age by it (tests give a virtual one)."""
        self._records = 0

    @unavailable_as("recording a Telegram update")
    async def first(self, bot_id: int, update_id: int, waiting: Waiting | None = None) -> bool:
        """Record the update, committed; True when this is its first delivery, False when it was recorded before.
        With `waiting`, it is kept for its partition's owner, who is woken when it commits.

        Raises:
            StoreUnavailable: the database cannot be written (the update is not recorded).
        """
        row: dict[str, object] = {"bot_id": bot_id, "update_id": update_id, "received": _iso(self.clock())}
        if waiting is not None:
            row.update(payload=waiting.payload, partition=waiting.partition, handled=False)
        statement = (
            postgresql.insert(updates_seen)
            if self.engine.dialect.name == "postgresql"
            else sqlite.insert(updates_seen)
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(statement.values(row).on_conflict_do_nothing())
            if waiting is not None and result.rowcount:
                await waiting.wake(conn, waiting.partition)
        self._records += 1
        if self._records % PRUNE_EVERY == 0:
            try:
                await self.prune()
            except StoreUnavailable:  # the update is recorded; the old rows wait for the next prune
                logger.warning("could not prune the webhook's inbox", exc_info=True)
        return bool(result.rowcount)

    @unavailable_as("claiming waiting Telegram updates")
    async def claim(self, bot_id: int, partitions: Collection[int], limit: int = 100) -> list[Claimed]:
        """Take up to `limit` updates waiting for `partitions`, oldest first, marked handled when this returns
        (PostgreSQL: rows another claimer has locked are skipped, not waited for)."""
        if not partitions:
            return []
        waiting = (
            select(
                updates_seen.c.update_id,
                updates_seen.c.payload,
                updates_seen.c.received,
                updates_seen.c.partition,
            )
            .where(
                updates_seen.c.bot_id == bot_id,
                updates_seen.c.partition.in_(sorted(partitions)),
                updates_seen.c.handled.is_(False),
            )
            .order_by(updates_seen.c.update_id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        async with self.engine.begin() as conn:
            rows = (await conn.execute(waiting)).all()
            if rows:
                await conn.execute(
                    update(updates_seen)
                    .where(
                        updates_seen.c.bot_id == bot_id,
                        updates_seen.c.update_id.in_([row.update_id for row in rows]),
                    )
                    .values(handled=True, payload=None)
                )
        return [
            Claimed(row.update_id, row.payload, dt.datetime.fromisoformat(row.received), row.partition)
            for row in rows
        ]

    @unavailable_as("pruning the webhook's inbox")
    async def prune(self) -> int:
        """Delete up to `PRUNE_BATCH` rows older than `KEEP` (any bot's); returns how many."""
        cutoff = _iso(self.clock() - KEEP)
        old = (
            select(updates_seen.c.update_id)
            .where(updates_seen.c.received < cutoff)
            .order_by(updates_seen.c.received)
            .limit(PRUNE_BATCH)
        )
        async with self.engine.begin() as conn:
            # The age is checked again on the row itself, so the subquery only bounds the batch.
            result = await conn.execute(
                delete(updates_seen).where(
                    updates_seen.c.received < cutoff, updates_seen.c.update_id.in_(old)
                )
            )
        return int(result.rowcount)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")

"""The outbox (`outbox` table): the messages that must reach their person, kept until Telegram answered. Does I/O.

A call's result, the edit that settles a card, an approval's outcome: each such Bot API request is written here
(its method, its parameters, its person) before it waits for its turn under Telegram's limits
(`bot.telegram.flood.kept_for`), and deleted once Telegram answered it (or refused it for good, or it became
moot). What is left in the table when a process dies was not sent, or was sent in the moment between
Telegram's answer and the delete: the process that owns the person next (a fleet's instance taking their
partition over; a bot alone started again) sends those messages, in order (`waiting`), and a message of that
second kind is seen twice by its person. Never lost: the row is committed before the request may go.

Writes go through the store's one writer (`bot.store.writer`), group-committed with the audit rows and the kept
questions. Deletes are not waited for: they ride along with the writer's next transaction, whatever it writes
(a flood's audit rows and kept questions come every few milliseconds), or, when none comes within
`MARK_WITHIN_S`, go in one of their own: a delete costs no transaction of its own under load, and the moment in
which a sent message is still in the table is at most that long (and one commit). A transaction that fails takes
its deletes with it: those messages stay in the table, and would be sent again after a kill (twice, not never).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, and_, bindparam, delete, insert, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.ownership import Ownership
from bot.store.errors import unavailable_as
from bot.store.fleet import PARTITIONS
from bot.store.tables import outbox
from bot.store.writer import Prepared, StoreWriter

__all__ = ["Key", "OutboxStore", "Waiting"]

logger = logging.getLogger(__name__)

Key = tuple[str, int]
"""A kept request's row: the process that wrote it and its order there."""
MARK_WITHIN_S: Final = 0.1
"""How long a sent message's delete waits for another write's transaction to ride along with (bench a: a
transaction of its own per message cost about 0.2 M instructions)."""
RETRY_S: Final = 5.0
"""After the database refused a write, how long requests go unkept before it is tried again."""

_INSERT: Final = Prepared(insert(outbox))
_DELETE: Final = Prepared(
    delete(outbox).where(
        and_(outbox.c.instance == bindparam("b_instance"), outbox.c.seq == bindparam("b_seq"))
    )
)


@dataclass(frozen=True, slots=True)
class Waiting:
    """A kept request nobody marked sent: to be sent by its person's owner."""

    key: Key
    user_id: int
    method: str
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Forget:
    keys: tuple[Key, ...]


class OutboxStore:
    """The outbox of one bot (`bot_id`) on one database, written by this process as `instance` (a uuid4 of its
    own: what it reads back at a takeover is what other processes wrote). `fleet` says whom it acts for."""

    def __init__(self, engine: AsyncEngine, writer: StoreWriter, *, bot_id: int, fleet: Ownership) -> None:
        self.engine = engine
        self.writer = writer
        self.bot_id = bot_id
        self.instance = str(uuid.uuid4())
        self._fleet = fleet
        self._seq = itertools.count(1)
        self._marks: list[Key] = []
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        self._down_until = 0.0
        self.kept = 0
        """Requests written down so far (read by tests and bench)."""
        writer.carry(self)

    async def acts_for(self, user_id: int) -> bool:
        """Whether this process may send for `user_id` now (the fleet's fence; alone, always)."""
        return await self._fleet.acts_for(user_id)

    async def keep(self, user_id: int, method: str, params: str) -> Key | None:
        """Write a request down (`params`: its parameters as JSON) and commit it; its key, or None when the
        database refused (it goes unkept then, and so do the others for `RETRY_S`: a send is not held up)."""
        if time.monotonic() < self._down_until:
            return None
        key = (self.instance, next(self._seq))
        row = {
            "instance": key[0],
            "seq": key[1],
            "bot_id": self.bot_id,
            "user_id": user_id,
            "partition": user_id % PARTITIONS,
            "method": method,
            "params": params,
            "written": time.time(),
        }
        try:
            await self.writer.submit(self, row)
        except SQLAlchemyError as exc:
            self._down_until = time.monotonic() + RETRY_S
            logger.warning("outbox: a message goes unkept (the database refused it): %s", exc)
            return None
        self.kept += 1
        return key

    def sent(self, key: Key) -> None:
        """The request was answered (or will never go): its row is deleted with the writer's next transaction,
        or within `MARK_WITHIN_S` in one of its own."""
        self._marks.append(key)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(MARK_WITHIN_S, self._mark_alone)

    def riding(self) -> Sequence[Any]:
        """The deletes waiting, to go with the writer's transaction now (`bot.store.writer.Rider`)."""
        if not self._marks:
            return ()
        keys, self._marks = tuple(self._marks), []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return (_Forget(keys),)

    def _mark_alone(self) -> None:
        self._timer = None
        if self._marks and self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while self._marks:
                try:
                    await self.writer.submit(self, _Forget(()))  # the deletes ride along (`riding`)
                except SQLAlchemyError as exc:
                    # Left in the table: a takeover or a restart would send them again (seen twice, not lost).
                    logger.warning("outbox: sent messages could not be marked: %s", exc)
                    return
        finally:
            self._flushing = None

    async def settle(self) -> None:
        """Mark every sent request so far (the process is stopping)."""
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        if self._marks:
            self._mark_alone()
        if self._flushing is not None:
            await asyncio.shield(self._flushing)

    @unavailable_as("reading the outbox")
    async def waiting(self, partitions: Collection[int] | None = None) -> list[Waiting]:
        """The requests other processes of this bot kept and did not mark sent, for the people of `partitions`
        (None: everyone), in the order they were written.

        Raises:
            StoreUnavailable: the database could not be read.
        """
        query = select(outbox).where(outbox.c.bot_id == self.bot_id, outbox.c.instance != self.instance)
        if partitions is not None:
            query = query.where(outbox.c.partition.in_(sorted(partitions)))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query.order_by(outbox.c.written, outbox.c.seq))).all()
        return [
            Waiting((row.instance, row.seq), row.user_id, row.method, json.loads(row.params)) for row in rows
        ]

    def stage(self, conn: Connection, items: Sequence[Any], attempt: int) -> Callable[[], Sequence[None]]:
        """`items` (rows to insert, `_Forget`s) in the writer's open transaction (`bot.store.writer.Part`)."""
        rows = [item for item in items if not isinstance(item, _Forget)]
        if rows:
            _INSERT.executemany(conn, rows)
        gone = [{"b_instance": k[0], "b_seq": k[1]} for i in items if isinstance(i, _Forget) for k in i.keys]
        if gone:
            _DELETE.executemany(conn, gone)
        return lambda: [None] * len(items)

    def rolled_back(self, exc: SQLAlchemyError, attempt: int) -> bool:
        return False

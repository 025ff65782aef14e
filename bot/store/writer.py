"""The store's one writer: the audit log's rows and the kept questions' writes, group-committed together. Does I/O.

Every write the audit log (`bot.store.audit`) and the kept questions (`bot.store.rounds`) make goes through one
`GroupCommit` (`bot.store.group`): the writes queued while a batch is being committed go in the next
transaction, whichever table they are for, so a question's audit row and its kept copy share one commit. A
batch is one synchronous function over SQLAlchemy Core (one `executemany` per kind of row), run as a whole:

- on a SQLite file, on a plain `sqlite3` connection (SQLAlchemy's pysqlite dialect), on the event loop
  itself when the database's write lock is free: a batch of a few rows commits there in well under a
  millisecond (write-ahead log, `synchronous=NORMAL`: no sync to the disk per commit), and the hop to a thread
  and back cost more than the SQL (about 1 M instructions per question at one batch at a time, bench a). That
  connection never waits for the lock (`busy_timeout` 0): when another connection holds it (the approvals'
  writes through aiosqlite, another process), the batch is rolled back at once and committed again in a
  thread of the writer's own, which waits for the lock as usual, so the event loop is never held up by a
  lock (nor by the aiosqlite thread that would need the loop to let it go). A batch that makes SQLite
  checkpoint its log (every 1,000 pages written) syncs on the loop: a few milliseconds, a few times an hour
  under a flood;
- elsewhere (PostgreSQL on asyncpg, SQLite in memory), through the async engine's `AsyncConnection.run_sync`.

A part (the audit log, the kept questions) stages its rows in the open transaction and learns afterwards
whether they were committed (`Part`). A part with writes nobody waits for (the outbox's deletes of sent
messages) rides along with whatever transaction comes next (`Rider`, `carry`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from sqlalchemy import Connection, Dialect, Engine, create_engine, event
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.sql.dml import UpdateBase

from bot.store.engine import sqlite_pragmas
from bot.store.group import GroupCommit

__all__ = ["Part", "Prepared", "Rider", "StoreWriter"]

_ATTEMPTS: Final = 10
_SQLITE_BUSY: Final = frozenset({5, 6})
"""SQLITE_BUSY and SQLITE_LOCKED (primary result codes): another connection holds what the write needs."""
T = TypeVar("T")


class Part(Protocol):
    """One table's writes within the store's transactions."""

    def stage(self, conn: Connection, items: Sequence[Any], attempt: int) -> Callable[[], Sequence[Any]]:
        """Write `items` in the open transaction (synchronous, in the writer's thread); returns what gives their
        results once the transaction committed (called on the event loop). `attempt` counts retries."""
        ...

    def rolled_back(self, exc: SQLAlchemyError, attempt: int) -> bool:
        """The transaction that held this part's rows failed with `exc`: whether the same batch may succeed
        when tried again (another process took the audit's places in the chain)."""
        ...


class Rider(Part, Protocol):
    """A part with writes nobody waits for: they go with whichever transaction the writer commits next."""

    def riding(self) -> Sequence[Any]:
        """The items to write with this transaction (taken: the part holds them no more)."""
        ...


class Prepared:
    """One Core statement of the writer's, compiled once per dialect and run as the driver's SQL
    (`Connection.exec_driver_sql`) with each row's values in the compiled order: no cache key, compilation or
    per-row parameter processing per execution, which cost more than SQLite's own work for a row.

    Used where the types need no bind processing (text, integers, floats), which is checked when compiling; a
    statement that would need it runs through `Connection.execute` instead."""

    def __init__(self, statement: UpdateBase) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, str], tuple[str, tuple[str, ...], bool] | None] = {}

    def executemany(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row of `rows` (one `executemany` for them all)."""
        dialect = conn.dialect
        key = (dialect.name, dialect.driver)
        if key in self._compiled:
            compiled = self._compiled[key]
        else:
            compiled = self._compiled[key] = self._compile(dialect)
        if compiled is None:
            conn.execute(self.statement, list(rows))
            return
        sql, names, positional = compiled
        if positional:
            conn.exec_driver_sql(sql, [tuple([row[n] for n in names]) for row in rows])
        else:
            conn.exec_driver_sql(sql, [{n: row[n] for n in names} for row in rows])

    def _compile(self, dialect: Dialect) -> tuple[str, tuple[str, ...], bool] | None:
        compiled = self.statement.compile(dialect=dialect)
        binds = compiled.binds
        if any(b.type.dialect_impl(dialect).bind_processor(dialect) is not None for b in binds.values()):
            return None
        if compiled.positional and compiled.positiontup is not None:
            return compiled.string, tuple(compiled.positiontup), True
        return compiled.string, tuple(binds), False


@dataclass(frozen=True, slots=True)
class _Job:
    part: Part
    item: Any


class StoreWriter:
    """The one writer of a store's audit rows and kept questions."""

    def __init__(self, engine: AsyncEngine, *, thread: bool = True) -> None:
        """`thread` False: every batch through the async engine, even on a SQLite file (nothing to close)."""
        self.engine = engine
        self._sync: Engine | None = None
        self._thread: ThreadPoolExecutor | None = None
        self._conn: Connection | None = None
        """The writer thread's connection, kept open between batches (no pool checkout and reset per batch)."""
        self._loop_conn: Connection | None = None
        """The connection the event loop commits on while the lock is free (`busy_timeout` 0), kept open too."""
        database = engine.url.database
        if thread and engine.dialect.name == "sqlite" and database not in (None, "", ":memory:"):
            self._sync = create_engine(engine.url.set(drivername="sqlite+pysqlite"))
            event.listen(self._sync, "connect", sqlite_pragmas)
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-writer")
        self._commits: GroupCommit[_Job, Any] = GroupCommit(self._write)
        self._riders: list[Rider] = []
        self.transactions = 0
        """Transactions committed so far (read by bench and tests)."""

    @property
    def sync_engine(self) -> Engine:
        """The engine whose connections run the writes (for SQLAlchemy's events)."""
        return self.engine.sync_engine if self._sync is None else self._sync

    def carry(self, rider: Rider) -> None:
        """Let `rider`'s pending writes go with every transaction from now on (`Rider.riding`)."""
        self._riders.append(rider)

    async def submit(self, part: Part, item: Any) -> Any:
        """Commit `item` of `part` with whatever else is queued; its result.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused this write.
        """
        return await self._commits.submit(_Job(part, item))

    def close(self) -> None:
        """Let the writer's thread end and close its connection (after the last write)."""
        if self._thread is not None and self._sync is not None:
            self._drop_loop_conn()
            # Closed in the thread that opened it: sqlite3 refuses a connection used from another thread.
            self._thread.submit(self._disconnect).result()
            self._thread.submit(self._sync.dispose).result()
            self._thread.shutdown(wait=True)

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _drop_loop_conn(self) -> None:
        """Close the event loop's connection for good (its `busy_timeout` 0 must not go back to the pool)."""
        if self._loop_conn is not None:
            self._loop_conn.invalidate()
            self._loop_conn.close()
            self._loop_conn = None

    async def _write(self, batch: Sequence[_Job]) -> list[Any]:
        """`batch` in one transaction; when the database refuses it, each write again on its own, so that one
        refused write fails alone."""
        try:
            return await self._transaction(batch)
        except SQLAlchemyError:
            if len(batch) == 1:
                raise
        outcomes: list[Any] = []
        for job in batch:
            try:
                outcomes.extend(await self._transaction([job]))
            except SQLAlchemyError as exc:
                outcomes.append(exc)
        return outcomes

    async def _transaction(self, batch: Sequence[_Job]) -> list[Any]:
        parts: dict[Part, list[Any]] = {}
        for job in batch:
            parts.setdefault(job.part, []).append(job.item)
        for rider in self._riders:  # after the jobs: a part's results for its jobs come first
            for item in rider.riding():
                parts.setdefault(rider, []).append(item)
        for attempt in range(_ATTEMPTS):

            def stage(conn: Connection, attempt: int = attempt) -> list[Callable[[], Sequence[Any]]]:
                return [part.stage(conn, items, attempt) for part, items in parts.items()]

            try:
                finishing = await self._run(stage)
            except SQLAlchemyError as exc:
                again = [part.rolled_back(exc, attempt) for part in parts]
                if all(again) and attempt < _ATTEMPTS - 1:
                    continue
                raise
            self.transactions += 1
            results = {part: iter(finish()) for part, finish in zip(parts, finishing, strict=True)}
            return [next(results[job.part]) for job in batch]
        raise AssertionError("unreachable")

    async def _run(self, work: Callable[[Connection], T]) -> T:
        """`work` in one transaction, committed when it returns."""
        if self._sync is None or self._thread is None:
            async with self.engine.begin() as conn:
                return await conn.run_sync(work)
        sync = self._sync
        if self._loop_conn is None:
            self._loop_conn = sync.connect()
            # Straight on the driver's connection: not a statement of the writer's (SQLAlchemy's events).
            self._loop_conn.connection.dbapi_connection.execute("PRAGMA busy_timeout = 0")  # type: ignore[union-attr]
        try:
            with self._loop_conn.begin():
                return work(self._loop_conn)
        except OperationalError as exc:
            if not _busy(exc):
                self._drop_loop_conn()
                raise
        except BaseException:
            self._drop_loop_conn()  # a fresh connection for the next batch, whatever state this one is in
            raise

        def transaction() -> T:
            if self._conn is None:
                self._conn = sync.connect()
            conn = self._conn
            try:
                with conn.begin():
                    return work(conn)
            except BaseException:
                self._disconnect()  # a fresh connection for the next batch, whatever state this one is in
                raise

        return await asyncio.get_running_loop().run_in_executor(self._thread, transaction)


def _busy(exc: OperationalError) -> bool:
    """Whether SQLite refused for want of a lock another connection holds (nothing was written)."""
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _SQLITE_BUSY

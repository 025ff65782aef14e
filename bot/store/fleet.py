"""Which instance of a fleet owns which users: partitions held through PostgreSQL advisory locks. Does I/O.

Users are split into `PARTITIONS` partitions (`partition_of`). An instance owns a partition while its lock
session holds the partition's session advisory lock (`pg_try_advisory_lock`) and its row in `fleet_partitions`
names it. The lock ends with the session, so a killed process (SIGKILL included) frees its partitions at once
and another instance takes them at its next heartbeat. A paused process (SIGSTOP) keeps its session: once its
heartbeat is older than `takeover_s`, another instance ends that session (`pg_terminate_backend`, the pid from
`pg_locks`) and takes the partitions.

Every take bumps the row's `epoch` (a compare-and-set under `FOR UPDATE`). The owner remembers the epoch it took
a partition with, and its kept-question writes carry it (`bot.store.rounds`: the row is read `FOR SHARE` in the
write's transaction), so a zombie's late write after a takeover finds another epoch and is refused.

Each instance takes free partitions up to a fair share (ceil of `PARTITIONS` over the live instances: an
instance row with a fresh heartbeat and a live lock session), and one over its share gives back partitions with
nothing live in them (`busy`), never one with a question, an approval wait or a call running, nor one whose
waiting updates are being read from the inbox (`held`) or that had an update in the last `QUIET_S`. A drain gives back
everything at its end. Heartbeats and takes use the database's clock, so the machines' clocks need not agree.

An instance acts for a person (`acts_for`, before each side effect: a card, an answer to a server, an audit row)
only while its hold is fresh: less than `takeover_s` since the start of its last heartbeat that went through, by
its own monotonic clock. Until then no other instance can have found the heartbeat stale, so the check needs no
database. Past it (the process was stalled, or the database is slow or cut off) the check waits for the next
heartbeat, which renews the hold or finds it lost; a heartbeat is bounded by `takeover_s` too. Whoever subscribed
`on_lost` drops what it held for the people of a lost partition before any waiting check returns.

The lock session is one asyncpg connection used by one operation at a time (`_lock`). A session the server ended
under it (a takeover's `pg_terminate_backend`, a restart) may still look open for a moment: asyncpg has read the
server's last words but not yet the close, and refuses the next statement with `InternalClientError`. That, a
timeout and every other failure of the session count as its loss: the connection is dropped and made again.

Only for a fleet (PostgreSQL, webhook mode): a single instance owns every user and builds none of this.
"""

from __future__ import annotations

import logging
import math
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

import anyio
import anyio.lowlevel
import asyncpg
from anyio.abc import TaskStatus
from sqlalchemy import and_, select

from bot.store.engine import database_url, display_url, failure_reason
from bot.store.locks import advisory_key
from bot.store.tables import fleet_partitions, rounds

__all__ = ["PARTITIONS", "Partitions", "partition_of"]

SESSION_FAILED: Final = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
"""How the lock session fails: the network, a timeout, the server, or asyncpg refusing a connection the server
ended (its close not read yet)."""

logger = logging.getLogger(__name__)

PARTITIONS: Final = 64
"""Partitions of users: enough to spread over a few instances, few enough to heartbeat in one statement."""
HEARTBEAT_S: Final = 1.0
TAKEOVER_S: Final = 5.0
"""A partition whose heartbeat is older than this is taken from its holder, even if its session lives on."""
QUIET_S: Final = 30.0
"""A partition an update of which was handed to this instance this recently is not given back to even out the
shares: the update's work (a question, a call) may not have started yet."""
_NOW: Final = "extract(epoch from clock_timestamp())"


def partition_of(user_id: int) -> int:
    """The partition of a user (for an update: the user it is from, else its chat)."""
    return user_id % PARTITIONS


class Partitions:
    """This process's partitions of the bot `bot_id` on the PostgreSQL database at `url`.

    `run` (in a task group) for the process's life; `owns`/`epoch` read the in-memory view, which callbacks
    (`on_acquired`, `on_lost`) report the changes of. Tests drive it by hand: `connect`, then `tick`.
    """

    def __init__(
        self,
        url: str,
        bot_id: int,
        *,
        instance: str | None = None,
        heartbeat_s: float = HEARTBEAT_S,
        takeover_s: float = TAKEOVER_S,
        retry_s: float = 1.0,
        busy: Callable[[int], bool] = lambda partition: False,
    ) -> None:
        self._dsn = database_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._shown = display_url(url)
        self.bot_id = bot_id
        self.instance = instance or str(uuid.uuid4())
        self.heartbeat_s = heartbeat_s
        self.takeover_s = takeover_s
        self.retry_s = retry_s
        self._busy = [busy]
        """Whether a partition holds something live (a question, an approval wait, a running call): never given
        back to even out the shares (`keep_busy`)."""
        self._keys = [advisory_key(f"partition {bot_id} {n}") for n in range(PARTITIONS)]
        self._owned: dict[int, int] = {}
        self._touched: dict[int, float] = {}
        """Partition -> when (monotonic) an update of it was last handed to this instance's handlers."""
        self._held: Counter[int] = Counter()
        """Partitions whose waiting updates are being read from the inbox (`held`)."""
        self._conn: asyncpg.Connection | None = None
        self._lock = anyio.Lock()
        """One operation at a time on the lock session (asyncpg refuses a second one, or worse)."""
        self._fresh_until = -math.inf
        """Monotonic: until when no other instance can have taken what this one owns (`acts_for`)."""
        self._beat = anyio.Event()
        """Set (and replaced) as each heartbeat ends, whether it went through or not."""
        self._poke = anyio.Event()
        """Set to start the next heartbeat now (a check waits for it)."""
        self._acquired: list[Callable[[Mapping[int, int]], None]] = []
        self._taken_up: list[Callable[[Collection[int]], None]] = []
        self._coming_up: set[int] = set()
        """Partitions taken whose kept questions are not yet placed again (`taken_up` ends that)."""
        self._lost: list[Callable[[frozenset[int]], None]] = []
        self._draining = False
        """Set at the start of a drain (`drain`): nothing more is taken (what is held is given back at its end)."""
        self.takeovers = 0
        """Partitions taken from another instance that still named itself their owner (`/metrics`)."""
        self.pid: int | None = None
        """The backend of the lock session while it is up (tests end it to see a loss)."""

    # The in-memory view.

    def owns(self, user_id: int) -> bool:
        return partition_of(user_id) in self._owned

    def owns_partition(self, partition: int) -> bool:
        return partition in self._owned

    def handles(self, partition: int) -> bool:
        """Whether this instance's handlers may take `partition`'s updates now: it owns it, and what was kept for its
        people was taken back up (`taken_up`) since it took it. Until then an update waits in the inbox: a tap on a
        card not yet placed again would be answered "expired"."""
        return partition in self._owned and partition not in self._coming_up

    async def acts_for(self, user_id: int) -> bool:
        """Whether this instance may act for the person now (`bot.core.Ownership`): it owns them and its hold is
        fresh (no I/O), or the next heartbeat renewed it. False once it learnt it lost them (the `on_lost`
        subscribers have dropped what it held for them by then)."""
        partition = partition_of(user_id)
        while partition in self._owned:
            # Fresh only while the lock session lives: once the server has ended it (a restart, an operator),
            # another instance may take the partitions at its next tick, whatever the clock says.
            if time.monotonic() < self._fresh_until and self._conn is not None and not self._conn.is_closed():
                return True
            beat = self._beat
            self._poke.set()
            await beat.wait()
        logger.warning("partitions: user %s is no longer this instance's; nothing is done for them", user_id)
        await anyio.lowlevel.checkpoint()  # a call of theirs was cancelled under the caller: it ends here
        return False

    def touch(self, partition: int) -> None:
        """An update of `partition` goes to this instance's handlers now: the partition is not given back for
        `QUIET_S` (the update may not have made a question or a call yet, which `busy` would see)."""
        self._touched[partition] = time.monotonic()

    @contextmanager
    def held(self, partitions: Iterable[int]) -> Iterator[None]:
        """While inside, `partitions` are not given back: their waiting updates are being read from the inbox, to be
        handed to this instance's handlers (given back meanwhile, such an update would be handled by a process that
        no longer owns its person, its question kept under an epoch about to be taken and asked again)."""
        held = Counter(partitions)
        self._held += held
        try:
            yield
        finally:
            self._held -= held  # a Counter drops what falls to 0

    def _quiet(self, partition: int) -> bool:
        touched = self._touched.get(partition)
        return touched is None or time.monotonic() - touched >= QUIET_S

    def epoch(self, partition: int) -> int | None:
        """The epoch this instance took `partition` with; None when it does not own it."""
        return self._owned.get(partition)

    @property
    def owned(self) -> Mapping[int, int]:
        """Partition -> epoch, of what this instance owns now."""
        return dict(self._owned)

    def owned_count(self) -> int:
        return len(self._owned)

    def on_acquired(self, callback: Callable[[Mapping[int, int]], None]) -> None:
        """Call `callback(partition -> epoch)` with the partitions each heartbeat takes (runs on the event loop;
        must not block: start a task for the work)."""
        self._acquired.append(callback)

    def on_taken_up(self, callback: Callable[[Collection[int]], None]) -> None:
        """Call `callback(partitions)` once what the people of partitions taken was kept for them has been taken
        back up here (`taken_up`): their questions placed again. Runs on the event loop; must not block."""
        self._taken_up.append(callback)

    def taken_up(self, partitions: Collection[int]) -> None:
        """Say that the kept questions of `partitions` (taken at a heartbeat, or owned at the start) are taken back
        up: their people's waiting updates may now be handled (a tap before its card is placed again would find
        it expired)."""
        self._coming_up.difference_update(partitions)
        for callback in self._taken_up:
            callback(partitions)

    def keep_busy(self, busy: Callable[[int], bool]) -> None:
        """Never give back a partition `busy(partition)` says holds something live (besides the others said)."""
        self._busy.append(busy)

    def _busy_now(self, partition: int) -> bool:
        return any(busy(partition) for busy in self._busy)

    def drain(self) -> None:
        """A drain began: take nothing more (what is held is given back at the end of `run`)."""
        self._draining = True

    @property
    def draining(self) -> bool:
        return self._draining

    def refused(self, conn: Any, writes: Sequence[tuple[str, ...]]) -> set[int]:
        """The fence of kept-question writes (`bot.core.fleet.Fence`): the places in `writes` that change a kept
        question whose user's partition has another epoch than this instance took it with. The partitions' rows
        are locked `FOR SHARE` until `conn`'s transaction ends (a takeover, which bumps the epoch under `FOR
        UPDATE`, waits for the write or comes first). A new question (no ids) is not fenced: it is asked by
        whichever instance runs the call (an agent's call may land on any)."""
        ids = [i for question_ids in writes for i in question_ids]
        if not ids:
            return set()
        epochs: dict[int, int] = {}
        partition_of_question: dict[str, int] = {}
        found = conn.execute(
            select(rounds.c.id, fleet_partitions.c.partition, fleet_partitions.c.epoch)
            .join_from(
                rounds,
                fleet_partitions,
                and_(
                    fleet_partitions.c.bot_id == self.bot_id,
                    fleet_partitions.c.partition == rounds.c.user_id % PARTITIONS,
                ),
            )
            .where(rounds.c.id.in_(ids))
            .with_for_update(read=True, of=fleet_partitions)
        ).all()
        for question, partition, epoch in found:
            partition_of_question[question] = partition
            epochs[partition] = epoch

        def stale(partition: int | None) -> bool:
            return partition is not None and self.epoch(partition) != epochs.get(partition)

        return {
            place
            for place, question_ids in enumerate(writes)
            if any(stale(partition_of_question.get(i)) for i in question_ids)
        }

    def on_lost(self, callback: Callable[[frozenset[int]], None]) -> None:
        """Call `callback(partitions)` when partitions are given back or lost (the lock session died: all)."""
        self._lost.append(callback)

    # The lock session.

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Heartbeat until cancelled, connecting again after a loss. Started (`task_status`) after the first
        heartbeat (or the first failed attempt: the bot runs on owning nothing, and tries again)."""
        started = False
        logger.info("partitions: this is instance %s of the fleet", self.instance)
        try:
            while True:
                try:
                    if self._conn is None:
                        with anyio.fail_after(self.takeover_s):
                            await self.connect()
                    await self.tick()
                except SESSION_FAILED as exc:
                    logger.warning(
                        "partitions: the lock session on %s failed: %s", self._shown, failure_reason(exc)
                    )
                    self._heartbeat_over()
                if not started:
                    task_status.started()
                    started = True
                self._poke = anyio.Event()
                with anyio.move_on_after(self.heartbeat_s if self._conn is not None else self.retry_s):
                    await self._poke.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.release_all()

    async def connect(self) -> None:
        """Open the lock session and make sure every partition has its row."""
        conn = await asyncpg.connect(self._dsn, timeout=self.takeover_s)
        try:
            await conn.execute(
                "INSERT INTO fleet_partitions (bot_id, partition, owner, epoch, heartbeat) "
                "SELECT $1, n, NULL, 0, NULL FROM generate_series(0, $2 - 1) AS n ON CONFLICT DO NOTHING",
                self.bot_id,
                PARTITIONS,
            )
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(lambda _conn: self._lose_all())
        self._conn = conn
        self.pid = conn.get_server_pid()

    async def tick(self) -> None:
        """One heartbeat: tell the fleet this instance and its partitions live, learn what it lost, then take
        free partitions up to its share or give back what is over it.

        Bounded by `takeover_s`: a heartbeat that takes longer has lost everything anyway (another instance may
        have found it stale).

        Raises:
            OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError: the
                lock session failed (every partition is lost with it; `connect` again).
        """
        started = time.monotonic()
        try:
            async with self._lock:
                with anyio.fail_after(self.takeover_s):
                    await self._tick(self._require())
        except SESSION_FAILED:
            self._lose_all()
            raise
        self._fresh_until = started + self.takeover_s
        self._heartbeat_over()

    def _heartbeat_over(self) -> None:
        """Wake the checks waiting for a heartbeat (`acts_for`): they look again."""
        beat, self._beat = self._beat, anyio.Event()
        beat.set()

    async def _tick(self, conn: asyncpg.Connection) -> None:
        beaten = await conn.fetch(
            f"UPDATE fleet_partitions SET heartbeat = {_NOW} WHERE bot_id = $1 AND owner = $2 "
            "RETURNING partition, epoch",
            self.bot_id,
            self.instance,
        )
        held = {row["partition"]: row["epoch"] for row in beaten}
        gone = frozenset(p for p, e in self._owned.items() if held.get(p) != e)
        if gone:  # taken meanwhile (cannot happen while the session holds the locks; said if it does)
            logger.warning("partitions: %d taken by another instance", len(gone))
            await self._unlock(conn, gone)
            self._forget(gone)
        await conn.execute(
            "INSERT INTO fleet_instances (bot_id, instance, pid, heartbeat) "
            f"VALUES ($1, $2, pg_backend_pid(), {_NOW}) "
            "ON CONFLICT (bot_id, instance) DO UPDATE SET pid = excluded.pid, heartbeat = excluded.heartbeat",
            self.bot_id,
            self.instance,
        )
        if self._draining:
            return
        share = math.ceil(PARTITIONS / max(1, await self._live(conn)))
        if len(self._owned) > share:
            await self._give_back(conn, len(self._owned) - share)
        elif len(self._owned) < share:
            await self._take(conn, share - len(self._owned))

    async def release_all(self) -> None:
        """Give back every partition (the end of a drain, or of the process) and close the lock session."""
        async with self._lock:
            conn, self._conn = self._conn, None
            if conn is None:
                return
            try:
                with anyio.fail_after(self.takeover_s):
                    if self._owned and not conn.is_closed():
                        await self._release(conn, frozenset(self._owned))
                    await conn.execute(
                        "DELETE FROM fleet_instances WHERE bot_id = $1 AND instance = $2",
                        self.bot_id,
                        self.instance,
                    )
                    await conn.close(timeout=2)
            except SESSION_FAILED:
                conn.terminate()
            self._lose_all()

    # The steps.

    async def _live(self, conn: asyncpg.Connection) -> int:
        """Instances alive: a fresh heartbeat and a lock session still there (a killed one's ended at once)."""
        count = await conn.fetchval(
            "SELECT count(*) FROM fleet_instances AS i WHERE i.bot_id = $1 "
            f"AND (i.instance = $2 OR (i.heartbeat > {_NOW} - $3 "
            "AND EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = i.pid)))",
            self.bot_id,
            self.instance,
            self.takeover_s,
        )
        return int(count)

    async def _take(self, conn: asyncpg.Connection, wanted: int) -> None:
        rows = await conn.fetch(
            f"SELECT partition, owner, heartbeat < {_NOW} - $2 AS stale FROM fleet_partitions WHERE bot_id = $1",
            self.bot_id,
            self.takeover_s,
        )
        locked = await self._locked(conn)
        candidates = [r for r in rows if r["partition"] not in self._owned]
        start = random.randrange(PARTITIONS)  # instances starting together try different partitions first
        candidates.sort(key=lambda r: (r["partition"] - start) % PARTITIONS)
        taken: dict[int, int] = {}
        for row in candidates:
            if len(taken) >= wanted:
                break
            partition, key = row["partition"], self._keys[row["partition"]]
            holder = locked.get(key)
            if holder is not None:
                if holder == self.pid or not (row["owner"] is not None and row["stale"]):
                    continue  # held by a live owner (or being taken right now)
                # The holder is paused: its heartbeat stopped but its session lives. End the session.
                logger.warning("partitions: ending the session of a stalled owner of partition %d", partition)
                await conn.fetchval("SELECT pg_terminate_backend($1, 2000)", holder)
            if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
                continue
            epoch = await self._claim(conn, partition)
            taken[partition] = epoch
            if row["owner"] is not None and row["owner"] != self.instance:
                self.takeovers += 1
        if taken:
            self._owned.update(taken)
            self._coming_up.update(taken)
            logger.info("partitions: took %d (%d owned)", len(taken), len(self._owned))
            for callback in self._acquired:
                callback(dict(taken))

    async def _claim(self, conn: asyncpg.Connection, partition: int) -> int:
        """Name this instance the owner, bumping the epoch (compare-and-set under `FOR UPDATE`, so a fenced write
        of the old owner in flight finishes first or sees the new epoch)."""
        async with conn.transaction():
            before = await conn.fetchval(
                "SELECT epoch FROM fleet_partitions WHERE bot_id = $1 AND partition = $2 FOR UPDATE",
                self.bot_id,
                partition,
            )
            epoch = await conn.fetchval(
                f"UPDATE fleet_partitions SET epoch = epoch + 1, owner = $3, heartbeat = {_NOW} "
                "WHERE bot_id = $1 AND partition = $2 AND epoch = $4 RETURNING epoch",
                self.bot_id,
                partition,
                self.instance,
                before,
            )
        assert epoch is not None  # the row is locked: nobody changed it between the two statements
        return int(epoch)

    async def _locked(self, conn: asyncpg.Connection) -> dict[int, int]:
        """The advisory locks held in this database: key -> the holder's backend pid."""
        rows = await conn.fetch(
            "SELECT classid, objid, pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        held: dict[int, int] = {}
        for row in rows:
            # A bigint key is kept as two oids: its high 32 bits in classid, its low 32 bits in objid.
            unsigned = (int(row["classid"]) << 32) | int(row["objid"])
            held[unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned] = int(row["pid"])
        return held

    async def _give_back(self, conn: asyncpg.Connection, extra: int) -> None:
        idle = [
            p for p in sorted(self._owned) if self._quiet(p) and not self._held[p] and not self._busy_now(p)
        ]
        idle = idle[:extra]
        if idle:
            await self._release(conn, frozenset(idle))
            logger.info("partitions: gave back %d (%d owned)", len(idle), len(self._owned))

    async def _release(self, conn: asyncpg.Connection, partitions: frozenset[int]) -> None:
        # Not ours in memory first: an update arriving while the database is told waits in the inbox for the next
        # owner, instead of being handled here and its question written under an epoch about to be taken.
        self._forget(partitions)
        await conn.execute(
            "UPDATE fleet_partitions SET owner = NULL WHERE bot_id = $1 AND owner = $2 AND partition = ANY($3)",
            self.bot_id,
            self.instance,
            sorted(partitions),
        )
        await self._unlock(conn, partitions)

    async def _unlock(self, conn: asyncpg.Connection, partitions: Iterable[int]) -> None:
        for partition in partitions:
            await conn.fetchval("SELECT pg_advisory_unlock($1)", self._keys[partition])

    def _forget(self, partitions: frozenset[int]) -> None:
        for partition in partitions:
            self._owned.pop(partition, None)
        self._coming_up.difference_update(partitions)
        if partitions:
            for callback in self._lost:
                callback(partitions)

    def _lose_all(self) -> None:
        """The lock session ended (or failed): every lock went with it."""
        conn, self._conn, self.pid = self._conn, None, None
        self._fresh_until = -math.inf
        if conn is not None and not conn.is_closed():
            conn.terminate()
        if self._owned:
            logger.warning(
                "partitions: lost the lock session; %d partition(s) no longer owned", len(self._owned)
            )
        self._forget(frozenset(self._owned))
        self._heartbeat_over()  # checks waiting for a heartbeat have their answer: nothing is owned

    def _require(self) -> asyncpg.Connection:
        if self._conn is None:
            raise asyncpg.InterfaceError("the lock session is not open")
        return self._conn

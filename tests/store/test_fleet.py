"""The fleet's partitions on a real PostgreSQL, two instances in one test (two lock sessions, two engines): the
users are split, a killed holder's partitions are taken at once, a stalled one's after its heartbeat is stale (its
session ended), and the stalled one's late writes are refused by the epoch. Heartbeats are driven by hand
(`tick`), so nothing waits on time."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import anyio
import asyncpg
import pytest
from pytest_postgresql.executors.proc import PostgreSQLExecutor
from sqlalchemy import make_url, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.engine import open_engine
from bot.store.errors import Fenced
from bot.store.fleet import PARTITIONS, Partitions, partition_of
from bot.store.rounds import RoundStore
from bot.store.tables import fleet_instances, fleet_partitions, rounds
from tests.conftest import PG_CTL
from tests.fakes.tcp_proxy import TcpProxy, tcp_proxy
from tests.store.pg_waits import until_counted
from tests.store.test_rounds import question

pytestmark = pytest.mark.anyio

BOT = 4242


@pytest.fixture
async def engine(postgresql_url: str) -> AsyncIterator[AsyncEngine]:
    engine = await open_engine(postgresql_url)  # migrated
    yield engine
    await engine.dispose()


@pytest.fixture
async def fleet(postgresql_url: str, engine: AsyncEngine) -> AsyncIterator[list[Partitions]]:
    """Instances made by the test (closed at its end)."""
    made: list[Partitions] = []
    yield made
    for instance in made:
        await instance.release_all()


async def joined(fleet: list[Partitions], url: str, **options: object) -> Partitions:
    instance = Partitions(url, BOT, **options)  # type: ignore[arg-type]
    fleet.append(instance)
    await instance.connect()
    await instance.tick()
    return instance


class Seen:
    """What an instance's callbacks were told."""

    def __init__(self, instance: Partitions) -> None:
        self.acquired: dict[int, int] = {}
        self.lost: set[int] = set()
        instance.on_acquired(self.took)
        instance.on_lost(self.lost.update)

    def took(self, epochs: Mapping[int, int]) -> None:
        self.acquired.update(epochs)


async def epochs(engine: AsyncEngine) -> dict[int, tuple[str | None, int]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(fleet_partitions.c.partition, fleet_partitions.c.owner, fleet_partitions.c.epoch).where(
                fleet_partitions.c.bot_id == BOT
            )
        )
        return {partition: (owner, epoch) for partition, owner, epoch in rows}


async def test_two_instances_split_the_users(
    postgresql_url: str, engine: AsyncEngine, fleet: list[Partitions]
) -> None:
    a = await joined(fleet, postgresql_url)
    assert len(a.owned) == PARTITIONS and a.owns(1001)  # alone: everything
    b = await joined(fleet, postgresql_url)
    assert b.owned == {}  # every partition is held by a live owner: nothing is taken from it
    await a.tick()  # now over its share of two: gives back half
    await b.tick()
    assert len(a.owned) == len(b.owned) == PARTITIONS // 2
    assert set(a.owned).isdisjoint(b.owned) and set(a.owned) | set(b.owned) == set(range(PARTITIONS))
    assert all(a.owns(user) != b.owns(user) for user in range(1000, 1200))
    rows = await epochs(engine)
    assert {p: e for p, e in b.owned.items()} == {p: rows[p][1] for p in b.owned}
    assert all(rows[p][0] == b.instance for p in b.owned) and all(rows[p][0] == a.instance for p in a.owned)
    assert a.takeovers == b.takeovers == 0  # given back, not taken over


async def test_partitions_with_live_state_are_not_given_back(
    postgresql_url: str, fleet: list[Partitions]
) -> None:
    a = await joined(fleet, postgresql_url, busy=lambda partition: partition % 2 == 0)
    b = await joined(fleet, postgresql_url)
    await a.tick()
    await b.tick()
    # Over its share, A gives back only partitions with nothing live: the odd ones (32 of them, its whole excess).
    assert set(b.owned) == {p for p in range(PARTITIONS) if p % 2}
    a.keep_busy(lambda partition: True)
    c = await joined(
        fleet, postgresql_url
    )  # a share of 22 now: A is over it, but everything it holds is busy
    await a.tick()
    await c.tick()
    assert set(a.owned) == {p for p in range(PARTITIONS) if p % 2 == 0} and len(c.owned) == 0


async def test_a_partition_whose_update_was_just_handed_on_is_not_given_back(
    postgresql_url: str, fleet: list[Partitions]
) -> None:
    """An update handed to the handlers has made no question or call yet (`busy` cannot see it): its partition
    stays until it has been quiet for `QUIET_S`, so its work is not done by an instance that no longer owns it."""
    a = await joined(fleet, postgresql_url)
    for partition in range(0, PARTITIONS, 2):
        a.touch(partition)
    b = await joined(fleet, postgresql_url)
    await a.tick()
    await b.tick()
    assert set(a.owned) == {p for p in range(PARTITIONS) if p % 2 == 0}


async def test_a_killed_holder_frees_its_partitions_at_once(
    postgresql_url: str, engine: AsyncEngine, fleet: list[Partitions]
) -> None:
    a = await joined(fleet, postgresql_url)
    b = await joined(fleet, postgresql_url)
    await a.tick()
    await b.tick()
    seen, before = Seen(b), await epochs(engine)
    lost = dict(a.owned)
    async with engine.begin() as conn:  # as SIGKILL does: A's session ends, and its locks with it
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": a.pid})
    await b.tick()  # no wait for A's heartbeat to go stale: its session is gone
    assert len(b.owned) == PARTITIONS and b.takeovers == len(lost)
    assert seen.acquired == {p: before[p][1] + 1 for p in lost}  # each take bumped the epoch once


async def test_a_stalled_holder_is_ended_and_its_late_writes_are_refused(
    postgresql_url: str, engine: AsyncEngine, fleet: list[Partitions]
) -> None:
    a = await joined(fleet, postgresql_url)
    zombie_seen = Seen(a)
    zombie_book = RoundStore(engine, fence=a)
    kept = question(1)  # user 1001
    await zombie_book.keep(kept)
    await zombie_book.progress(kept.id, {"version": 1})  # the owner writes
    b = await joined(fleet, postgresql_url)
    book = RoundStore(engine, fence=b)
    with pytest.raises(Fenced):  # not B's partition (yet): B cannot write it either
        await book.progress(kept.id, {"version": 99})
    assert b.owned == {}  # A's heartbeat is fresh: nothing is taken from it

    # A stalls (SIGSTOP): its session lives on, its heartbeats stop. Seen from B, they are older than takeover_s.
    async with engine.begin() as conn:
        await conn.execute(update(fleet_partitions).values(heartbeat=fleet_partitions.c.heartbeat - 10))
        await conn.execute(update(fleet_instances).values(heartbeat=fleet_instances.c.heartbeat - 10))
    paused_pid = a.pid
    await b.tick()
    assert len(b.owned) == PARTITIONS and b.takeovers == PARTITIONS
    async with engine.connect() as conn:
        alive = await conn.execute(
            text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": paused_pid}
        )
        assert alive.scalar_one() == 0  # B ended the stalled session

    # A wakes up (SIGCONT) believing it owns the partition: its late write is refused, B's goes through.
    with pytest.raises(Fenced):
        await zombie_book.progress(kept.id, {"version": 2})
    with pytest.raises(Fenced):
        await zombie_book.close(kept.id)
    await book.progress(kept.id, {"version": 3})
    async with engine.connect() as conn:
        progress = (await conn.execute(select(rounds.c.progress).where(rounds.c.id == kept.id))).scalar_one()
    assert progress == '{"version":3}'
    # And its next heartbeat learns it lost everything.
    with pytest.raises((OSError, asyncpg.PostgresError, asyncpg.InterfaceError)):
        await a.tick()
    assert a.owned == {} and zombie_seen.lost == set(range(PARTITIONS))
    assert partition_of(kept.origin.user_id) in b.owned


async def test_a_drained_instance_gives_everything_back_and_takes_nothing_meanwhile(
    postgresql_url: str, engine: AsyncEngine, fleet: list[Partitions]
) -> None:
    a = await joined(fleet, postgresql_url)
    a.drain()  # SIGTERM: from now on it takes nothing
    b = await joined(fleet, postgresql_url)
    await a.release_all()  # the drain's end
    assert a.owned == {} and all(owner is None for owner, _ in (await epochs(engine)).values())
    await b.tick()
    assert len(b.owned) == PARTITIONS and b.takeovers == 0  # given back, not taken over
    c = await joined(fleet, postgresql_url)
    c.drain()
    await b.tick()  # B is over its share of two and gives back half...
    await c.tick()  # ...which the draining C does not take
    assert c.owned == {}


async def waiting_on_a_row_lock(engine: AsyncEngine, pid: int, statement: str) -> None:
    """Return once session `pid` waits for a row lock in a statement starting with `statement`."""
    with anyio.fail_after(30):
        await until_counted(
            engine,
            "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND wait_event_type = 'Lock' "
            "AND query LIKE :statement",
            pid=pid,
            statement=statement + "%",
        )


async def test_a_partition_given_back_is_no_longer_owned_here_before_the_database_is_told(
    postgresql_url: str, engine: AsyncEngine, fleet: list[Partitions]
) -> None:
    """While A's statement giving partitions back waits (here: for row locks the test holds), those partitions
    are already not A's in memory, though the database still says they are: an update for their people arriving
    meanwhile waits in the inbox for the next owner instead of being handled by A under an epoch about to be
    taken. (Forgotten after the statement, such an update's question was fenced once B took the partition.)"""
    a = await joined(fleet, postgresql_url)
    seen = Seen(a)
    await joined(fleet, postgresql_url)
    assert a.pid is not None
    async with engine.connect() as gate, engine.connect() as rows:
        # A's heartbeat must pass before the rows are locked: hold A at its next statement (its own row) first.
        gate_tx = await gate.begin()
        await gate.execute(
            select(fleet_instances).where(fleet_instances.c.instance == a.instance).with_for_update()
        )
        async with anyio.create_task_group() as tg:
            tg.start_soon(a.tick)
            await waiting_on_a_row_lock(engine, a.pid, "INSERT INTO fleet_instances")
            rows_tx = await rows.begin()
            await rows.execute(
                select(fleet_partitions).where(fleet_partitions.c.bot_id == BOT).with_for_update()
            )
            await gate_tx.rollback()
            await waiting_on_a_row_lock(engine, a.pid, "UPDATE fleet_partitions SET owner = NULL")
            given_back = set(range(PARTITIONS)) - set(a.owned)
            assert len(given_back) == PARTITIONS // 2 and seen.lost == given_back
            before = await epochs(engine)
            assert all(before[p][0] == a.instance for p in given_back)  # the database is not told yet
            await rows_tx.rollback()
    after = await epochs(engine)
    assert all(after[p][0] is None for p in given_back)


async def test_partitions_held_while_their_waiting_updates_are_read_are_not_given_back(
    postgresql_url: str, fleet: list[Partitions]
) -> None:
    """A heartbeat while the inbox is read for partitions 0-31 (`held`, by the webhook's routing) gives back
    others: an update about to be handed to this instance's handlers stays with the owner that handles it. Once
    the read is over, they may go."""
    a = await joined(fleet, postgresql_url)
    b = await joined(fleet, postgresql_url)
    with a.held(range(32)):
        await a.tick()  # over its share of two: gives back 32 partitions, none of the held ones
    assert set(a.owned) == set(range(32))
    await b.tick()
    assert set(b.owned) == set(range(32, PARTITIONS))
    c = await joined(fleet, postgresql_url)
    await a.tick()  # a share of 22 now: 10 of A's go back, held no more
    await c.tick()
    assert len(a.owned) == 22 and set(c.owned) <= set(range(32))


# -- the lock session on a network that fails: a real PostgreSQL behind a TCP proxy the test steers -----------

CUT_S = 60
"""How long the network is cut: a minute, as an outage that outlasts every heartbeat and timeout."""


class Running:
    """An instance whose heartbeat runs on its own (`run`, a short `heartbeat_s`), and what it was told."""

    def __init__(self, instance: Partitions) -> None:
        self.instance = instance
        self.losses = 0
        self.takes = 0
        self._changed = anyio.Event()
        instance.on_lost(self._lost)
        instance.on_acquired(self._took)

    def _lost(self, partitions: frozenset[int]) -> None:
        self.losses += 1
        self._changed.set()
        self._changed = anyio.Event()

    def _took(self, epochs: Mapping[int, int]) -> None:
        self.takes += 1
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, condition: Callable[[], bool], timeout: float = 30) -> None:  # noqa: ASYNC109 - like FakeTelegram.wait_for
        with anyio.fail_after(timeout):
            while not condition():
                await self._changed.wait()


def through(postgresql_url: str, proxy: TcpProxy) -> str:
    return str(make_url(postgresql_url).set(host="127.0.0.1", port=proxy.port))


async def terminate(engine: AsyncEngine, pid: int | None) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})


async def test_a_lock_session_ended_while_its_process_slept_is_lost_and_opened_again_not_a_crash(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    """The server ends the lock session (another instance's takeover) while its process is stopped; the process
    wakes with the server's last words to read and the close not yet, and its heartbeat is due at once. asyncpg
    then refuses the statement (`InternalClientError`, which crashed the bot): the session is lost, every
    partition with it, and opened again."""
    url = make_url(postgresql_url)
    assert url.host is not None and url.port is not None
    async with tcp_proxy(url.host, url.port) as proxy, anyio.create_task_group() as tg:
        instance = Partitions(through(postgresql_url, proxy), BOT, heartbeat_s=0.05, retry_s=0.05)
        running = Running(instance)
        await tg.start(instance.run)
        assert instance.owned_count() == PARTITIONS
        ended = instance.pid
        proxy.hold_closes()
        await terminate(engine, ended)
        await proxy.wait(lambda: proxy.closed_by_server == 1)
        await running.until(lambda: running.losses == 1)
        assert instance.owned_count() == 0
        proxy.release_closes()
        await running.until(lambda: instance.owned_count() == PARTITIONS)
        assert instance.pid not in (None, ended)
        tg.cancel_scope.cancel()


async def test_a_lock_session_survives_a_postgresql_restart(
    postgresql_url: str, postgresql_server: PostgreSQLExecutor, engine: AsyncEngine
) -> None:
    """PostgreSQL restarts under a running heartbeat (its close reaching the process a moment after its last
    words, as on a busy machine): the partitions are lost with the session, and taken again once the server is
    back; the heartbeat never fails."""
    url = make_url(postgresql_url)
    assert url.host is not None and url.port is not None
    async with tcp_proxy(url.host, url.port) as proxy, anyio.create_task_group() as tg:
        instance = Partitions(through(postgresql_url, proxy), BOT, heartbeat_s=0.05, retry_s=0.05)
        running = Running(instance)
        await tg.start(instance.run)
        assert instance.owned_count() == PARTITIONS
        proxy.hold_closes()
        await engine.dispose()  # the test's own connections would only be ended too
        base = Path(postgresql_server.datadir)
        restart = [
            str(PG_CTL),
            "restart",
            "-D",
            str(base),
            "-m",
            "fast",
            "-w",
            "-l",
            str(base.parent / "log"),
        ]
        # Not read: the server started again holds what it inherits from pg_ctl.
        await anyio.run_process(restart, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # At least the lock session: a new one tried while the server starts up is closed by it too, and two
        # closes may come before this looks.
        await proxy.wait(lambda: proxy.closed_by_server >= 1)
        await running.until(lambda: running.losses >= 1)
        proxy.release_closes()
        await running.until(lambda: instance.owned_count() == PARTITIONS)
        tg.cancel_scope.cancel()


async def test_a_lock_session_cut_off_for_a_minute_loses_its_partitions_and_takes_them_again(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    """The network to PostgreSQL is cut for a minute (nothing closed, nothing arrives): a heartbeat in flight
    cannot end, so within `takeover_s` the instance counts its partitions lost and acts for nobody (another
    instance may have them); it tries again meanwhile without failing, and once the network is back it owns them
    again."""
    url = make_url(postgresql_url)
    assert url.host is not None and url.port is not None
    async with tcp_proxy(url.host, url.port) as proxy, anyio.create_task_group() as tg:
        instance = Partitions(
            through(postgresql_url, proxy), BOT, heartbeat_s=0.05, takeover_s=1.0, retry_s=0.2
        )
        running = Running(instance)
        await tg.start(instance.run)
        assert instance.owned_count() == PARTITIONS
        proxy.cut()
        mended_at = anyio.current_time() + CUT_S
        await running.until(lambda: running.losses == 1, timeout=10)
        assert instance.owned_count() == 0
        assert not await instance.acts_for(1001)
        await anyio.sleep_until(mended_at)  # a minute without a network
        proxy.mend()
        await running.until(lambda: instance.owned_count() == PARTITIONS)
        assert await instance.acts_for(1001)
        tg.cancel_scope.cancel()


async def heartbeat(engine: AsyncEngine, instance: Partitions) -> float:
    async with engine.connect() as conn:
        found = await conn.scalar(
            select(fleet_instances.c.heartbeat).where(fleet_instances.c.instance == instance.instance)
        )
    assert found is not None
    return float(found)


async def test_an_instance_whose_hold_is_older_than_the_takeover_time_has_it_renewed_before_it_acts(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    """Within `takeover_s` of its last heartbeat an instance acts for its people on its word alone; past it (as
    after a stall), the check has the next heartbeat run first, and says yes once it went through."""
    async with anyio.create_task_group() as tg:
        instance = Partitions(postgresql_url, BOT, heartbeat_s=3600)  # takeover_s: 5 s
        running = Running(instance)
        await tg.start(instance.run)
        first = await heartbeat(engine, instance)
        assert await instance.acts_for(1001)
        assert await heartbeat(engine, instance) == first  # no heartbeat for a fresh hold
        await anyio.sleep(instance.takeover_s)  # the hold goes stale (the next heartbeat is an hour away)
        assert await instance.acts_for(1001)
        assert await heartbeat(engine, instance) > first  # a heartbeat renewed it first
        await terminate(engine, instance.pid)  # a takeover ends the session
        await running.until(lambda: running.losses == 1)
        assert not await instance.acts_for(1001)
        tg.cancel_scope.cancel()

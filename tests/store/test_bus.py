"""The fleet bus on a real PostgreSQL: delivered on commit, never on rollback, per bot, and heard again after the
listening connection is lost (with `on_connect` so the subscriber sweeps for what it missed)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.store.bus import MAX_PAYLOAD, FleetBus
from bot.store.engine import database_url

pytestmark = pytest.mark.anyio


class Heard:
    """What a subscriber heard, in order, and a way to wait for the next."""

    def __init__(self) -> None:
        self.payloads: list[str] = []
        self.connects = 0
        self._changed = anyio.Event()

    def message(self, payload: str) -> None:
        self.payloads.append(payload)
        self._poke()

    def connected(self) -> None:
        self.connects += 1
        self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def until(self, done: Callable[[], object]) -> None:
        with anyio.fail_after(10):
            while not done():
                await self._changed.wait()


@asynccontextmanager
async def running(bus: FleetBus) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tg:
        await tg.start(bus.run)
        yield
        tg.cancel_scope.cancel()


@pytest.fixture
async def engine(postgresql_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database_url(postgresql_url))
    yield engine
    await engine.dispose()


async def test_delivered_when_committed_never_when_rolled_back(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    bus, heard = FleetBus(postgresql_url, 7), Heard()
    bus.subscribe("approvals", heard.message, heard.connected)
    async with running(bus):
        assert heard.connects == 1  # swept once at start
        async with engine.connect() as conn:
            await bus.publish(conn, "approvals", "rolled back")
            await conn.rollback()
        async with engine.begin() as conn:
            await bus.publish(conn, "approvals", "a1")
            assert heard.payloads == []  # not before the commit
        await heard.until(lambda: heard.payloads)
    # The rolled-back one was sent first: had it been delivered, it would be ahead of "a1".
    assert heard.payloads == ["a1"]


async def test_bots_on_one_database_do_not_hear_each_other(postgresql_url: str, engine: AsyncEngine) -> None:
    mine, other = FleetBus(postgresql_url, 1), FleetBus(postgresql_url, 2)
    heard_mine, heard_other = Heard(), Heard()
    mine.subscribe("inbox", heard_mine.message)
    other.subscribe("inbox", heard_other.message)
    async with running(mine), running(other):
        async with engine.begin() as conn:
            await other.publish(conn, "inbox", "for 2")
        async with engine.begin() as conn:
            await mine.publish(conn, "inbox", "for 1")
        await heard_mine.until(lambda: heard_mine.payloads)
        await heard_other.until(lambda: heard_other.payloads)
    assert (heard_mine.payloads, heard_other.payloads) == (["for 1"], ["for 2"])


async def test_listens_again_after_losing_its_connection(postgresql_url: str, engine: AsyncEngine) -> None:
    bus, heard = FleetBus(postgresql_url, 7, retry_s=0.05), Heard()
    bus.subscribe("inbox", heard.message, heard.connected)
    async with running(bus):
        first = bus.listener_pid
        async with engine.begin() as conn:
            assert (await conn.execute(select(func.pg_terminate_backend(first)))).scalar_one()
        await heard.until(lambda: heard.connects == 2)  # on_connect again: the subscriber sweeps
        assert bus.listener_pid not in (None, first)
        async with engine.begin() as conn:
            await bus.publish(conn, "inbox", "after")
        await heard.until(lambda: heard.payloads)
    assert heard.payloads == ["after"]


async def test_starts_even_when_the_database_is_unreachable() -> None:
    """The bot runs on without wake-ups (it sweeps on its own); it keeps trying."""
    bus, heard = FleetBus("postgresql://nobody@127.0.0.1:1/none", 7, retry_s=0.05), Heard()
    bus.subscribe("inbox", heard.message, heard.connected)
    async with running(bus):
        assert (bus.listener_pid, heard.connects) == (None, 0)


async def test_refuses_a_payload_postgresql_would_refuse(postgresql_url: str, engine: AsyncEngine) -> None:
    bus = FleetBus(postgresql_url, 7)
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="at most"):
            await bus.publish(conn, "inbox", "x" * (MAX_PAYLOAD + 1))
        await bus.publish(conn, "inbox", "x" * MAX_PAYLOAD)  # the largest PostgreSQL takes
        await conn.execute(text("select 1"))


def test_topics_are_lowercase_identifiers(postgresql_url: str) -> None:
    bus = FleetBus(postgresql_url, 42)
    assert bus.channel("approvals") == "tnx_42_approvals"
    with pytest.raises(ValueError, match="lowercase"):
        bus.channel("Approvals; drop table")


async def test_a_subscriber_after_the_start_is_refused_not_missed(postgresql_url: str) -> None:
    bus = FleetBus(postgresql_url, 7)
    bus.subscribe("inbox", Heard().message)
    async with running(bus):
        with pytest.raises(RuntimeError, match="before the bus runs"):
            bus.subscribe("approvals", Heard().message)

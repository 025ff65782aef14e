"""One Telegram budget for a fleet: two instances (each its own FloodLimiter, PTB bot and engine) on one real
PostgreSQL, sending to the fake Bot API, which records when it received each call.

What is counted is the fake's own receive times (as Telegram counts), never how long a test took."""

from __future__ import annotations

import itertools
import logging
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketStream
from sqlalchemy import select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store import open_engine
from bot.store.budget import RETRY_AFTER_S, TelegramBudget
from bot.store.tables import telegram_budget
from bot.telegram.bot import CardBot, build_bot
from bot.telegram.flood import FLEET_LATE_S, FLEET_MOST_PER_S, FloodLimiter
from tests.fakes.telegram import FakeTelegram
from tests.ports import free_port

pytestmark = pytest.mark.anyio

GROUP = -5001


class Noticed:
    """The real shared budget, telling the test when a 429's pause is stored (it does nothing else)."""

    def __init__(self, budget: TelegramBudget) -> None:
        self._budget = budget
        self.paused = anyio.Event()
        self.places: list[float] = []
        """Each overall place booked (by `time.monotonic`, as the limiter counts it)."""

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        wait = await self._budget.book(group, interval_s, period_s, late_s=late_s)
        if group is None and wait is not None:
            self.places.append(time.monotonic() + wait)
        return wait

    async def pause(self, seconds: float) -> None:
        await self._budget.pause(seconds)
        self.paused.set()


@asynccontextmanager
async def instance(
    fake: FakeTelegram, url: str, clock: Callable[[], float] = time.monotonic, *, migrate: bool = True
) -> AsyncIterator[tuple[CardBot, Noticed]]:
    """One bot instance of the fleet: its own engine (migrated), shared budget, limiter and PTB bot."""
    engine = await open_engine(url, migrate=migrate)
    try:
        budget = Noticed(TelegramBudget(engine, fake.bot_id, clock=clock))
        async with build_bot(fake.token, fake.base_url, FloodLimiter(fleet=budget)) as bot:
            yield bot, budget
    finally:
        await engine.dispose()


@asynccontextmanager
async def fleet(fake: FakeTelegram, url: str, size: int = 2) -> AsyncIterator[list[CardBot]]:
    async with fleet_noticed(fake, url, size) as instances:
        yield [bot for bot, _ in instances]


@asynccontextmanager
async def fleet_noticed(
    fake: FakeTelegram, url: str, size: int = 2
) -> AsyncIterator[list[tuple[CardBot, Noticed]]]:
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(instance(fake, url)) for _ in range(size)]


def sent(fake: FakeTelegram, method: str = "sendMessage") -> list[tuple[float, object]]:
    """(received at, text) of each call of `method` the fake answered without an error, by receive time."""
    refused = {id(e.params) for e in fake.errors}
    return sorted(
        (at, params.get("text"))
        for (name, params), at in zip(fake.calls, fake.call_times, strict=True)
        if name == method and id(params) not in refused
    )


def most_in_a_second(times: list[float]) -> int:
    """The most of `times` (sorted) in any window [t, t + 1 s)."""
    most, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - 1.0:
            first += 1
        most = max(most, last - first + 1)
    return most


async def test_two_instances_share_nearly_28_places_a_second_and_no_second_holds_more_than_30(
    postgresql_url: str,
) -> None:
    """A flood through two instances: the fleet's places for sends that go on time are 1.08/30 s apart (27.8 a
    second: room for a send 80 ms late within Telegram's 30, no longer for one 100 ms late within 28: 1.1/28 s),
    and the fake (enforcing ~30/s) never counts more than 30 in any second nor refuses any."""
    async with FakeTelegram(rate_limit=True) as fake:
        people = [fake.user(2000 + i, f"U{i}").id for i in range(42)]  # 2 each: within a chat's own limit
        async with fleet_noticed(fake, postgresql_url) as instances, anyio.create_task_group() as tg:
            for i in range(84):
                tg.start_soon(instances[i % 2][0].send_message, people[i % 42], f"m{i}")
        places = sorted(place for _, noticed in instances for place in noticed.places)
    gaps = [later - earlier for earlier, later in itertools.pairwise(places)]
    assert len(places) >= 84
    assert statistics.median(gaps) == pytest.approx((1 + FLEET_LATE_S) / FLEET_MOST_PER_S, abs=0.001)
    assert not fake.errors
    times = [at for at, _ in sent(fake)]
    assert len(times) == 84
    assert most_in_a_second(times) <= FLEET_MOST_PER_S


async def test_a_429_on_one_instance_pauses_the_other(
    postgresql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Telegram refuses A's message with retry_after 2: B's next message, asked for after that, reaches the
    fake only once the 2 s have passed since the refusal (A's retry too)."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    async with FakeTelegram() as fake:
        alice, bob = fake.user(1001, "Alice").id, fake.user(1002, "Bob").id
        async with instance(fake, postgresql_url) as (a, noticed), instance(fake, postgresql_url) as (b, _):
            fake.fail_next("sendMessage", status=429, retry_after=2)
            async with anyio.create_task_group() as tg:
                tg.start_soon(a.send_message, alice, "from A")
                await noticed.paused.wait()  # A was refused and stored the pause
                await b.send_message(bob, "from B")
        (refused,) = [e for e in fake.errors if e.status == 429]
        refused_at = next(
            at for (_, p), at in zip(fake.calls, fake.call_times, strict=True) if p is refused.params
        )
        went = dict((text, at) for at, text in sent(fake))
        assert went["from B"] >= refused_at + 2
        assert went["from A"] >= refused_at + 2


async def test_a_groups_bucket_is_shared_the_21st_message_waits(postgresql_url: str) -> None:
    """20 messages a minute to one group: 10 through each instance go at once, the 21st (through either) not
    before a 20th of the minute after the first (3 s), though neither instance alone had sent 20."""
    async with FakeTelegram() as fake:  # the fake's own group limit is a sliding window: counted here instead
        alice = fake.user(1001, "Alice")
        fake.group(GROUP, "Ops", members=[alice])
        async with fleet(fake, postgresql_url) as bots:
            started = time.monotonic()  # the fake's clock: before the bucket's first booking
            async with anyio.create_task_group() as tg:
                for i in range(20):
                    tg.start_soon(bots[i % 2].send_message, GROUP, f"g{i}")
            await bots[1].send_message(GROUP, "g20")
        times = sent(fake)
        assert len(times) == 21 and times[-1][1] == "g20"
        assert times[-1][0] >= started + 3.0  # its place: 3 s after the first booking


@asynccontextmanager
async def forwarder(port: int, target: tuple[str, int]) -> AsyncIterator[None]:
    """Forward TCP connections to 127.0.0.1:`port` to `target` (the database "back" on its address)."""

    async def pipe(source: SocketStream, sink: SocketStream) -> None:
        async with source, sink:
            async for chunk in source:
                await sink.send(chunk)

    async def serve(client: SocketStream) -> None:
        server = await anyio.connect_tcp(*target)
        async with anyio.create_task_group() as tg:
            tg.start_soon(pipe, client, server)
            tg.start_soon(pipe, server, client)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, serve)
        yield
        tg.cancel_scope.cancel()


async def test_with_postgresql_unreachable_sends_go_out_and_the_database_is_tried_again_later(
    postgresql_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database's address refuses connections: every message still goes (the local buckets decide), one
    warning is logged for all of them. Once the address answers and `RETRY_AFTER_S` passed, bookings are
    shared again (the overall row is written)."""
    caplog.set_level(logging.INFO, logger="bot.store.budget")
    real = make_url(postgresql_url)
    await (await open_engine(postgresql_url)).dispose()  # migrated through the real address
    port = free_port()
    away = real.set(port=port).render_as_string(hide_password=False)
    now = [0.0]
    async with FakeTelegram() as fake:
        alice = fake.user(1001, "Alice")
        fake.group(GROUP, "Ops", members=[alice])
        async with instance(fake, away, lambda: now[0], migrate=False) as (bot, _):
            for text in ("one", "two", "three"):
                await bot.send_message(alice.id, text)
            await bot.send_message(GROUP, "to the group")
            assert [text for _, text in sent(fake)] == ["one", "two", "three", "to the group"]
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "keeps to its own Telegram budget" in warnings[0].getMessage()

            async with forwarder(port, (str(real.host), int(real.port or 5432))):
                await bot.send_message(alice.id, "not yet")  # within RETRY_AFTER_S: not tried
                engine = await open_engine(postgresql_url, migrate=False)
                try:
                    assert not await rows(engine)
                    now[0] += RETRY_AFTER_S
                    await bot.send_message(alice.id, "shared again")
                    assert await rows(engine) == ["overall"]
                finally:
                    await engine.dispose()
        assert any("back" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


async def rows(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        return list((await conn.execute(select(telegram_budget.c.bucket))).scalars())

"""The webhook in a fleet, two instances in one test on a real PostgreSQL (two engines, lock sessions and buses):
an update delivered to the instance that does not own its user waits in the inbox and is handed to the owner's
PTB queue exactly once; one whose wake-up was missed is found when the owner's bus (re)connects, and when
another instance takes the partition over. Each instance's webhook is its real Starlette route (httpx's ASGI
transport: no sockets needed to see the routing)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.routing import Route
from telegram import Bot, Update

from bot.store.bus import FleetBus
from bot.store.engine import open_engine
from bot.store.fleet import Partitions, partition_of
from bot.store.inbox import InboxStore
from bot.web.webhook import SECRET_HEADER, Routing, Webhook
from tests.telegram.harness import ALICE_ID
from tests.web.test_webhook import an_update

pytestmark = pytest.mark.anyio

BOT = 5151
SECRET = "fleet-secret"


@dataclass
class Instance:
    partitions: Partitions
    bus: FleetBus
    routing: Routing
    queue: asyncio.Queue[Any]
    client: httpx.AsyncClient

    async def deliver(self, update_id: int) -> int:
        answer = await self.client.post(
            "/telegram", json=an_update(update_id), headers={SECRET_HEADER: SECRET}
        )
        return answer.status_code

    async def handed(self) -> int:
        """The next update PTB gets on this instance (its id)."""
        with anyio.fail_after(10):
            update = await self.queue.get()
        assert isinstance(update, Update)
        return update.update_id


@pytest.fixture
async def engine(postgresql_url: str) -> AsyncIterator[AsyncEngine]:
    engine = await open_engine(postgresql_url)  # migrated
    yield engine
    await engine.dispose()


@asynccontextmanager
async def instance(
    url: str, tg: anyio.abc.TaskGroup, *, bus_now: bool = True, taken_up: bool = True
) -> AsyncIterator[Instance]:
    """One instance: its own engine, partitions (one heartbeat done), bus and routing running, and webhook. Without
    `taken_up` the partitions it takes are not taken up until the test says so (`Partitions.taken_up`), as while
    a takeover places their kept cards again."""
    async with AsyncExitStack() as stack:
        own = await open_engine(url)
        stack.push_async_callback(own.dispose)
        partitions = Partitions(url, BOT)
        if taken_up:
            # As a process whose takeovers find nothing kept to place again: what it takes is taken up at once.
            partitions.on_acquired(partitions.taken_up)
        stack.push_async_callback(partitions.release_all)
        await partitions.connect()
        await partitions.tick()
        bus, queue = FleetBus(url, BOT, retry_s=0.05), asyncio.Queue[Any]()
        bot = Bot("5151:fleet")
        inbox = InboxStore(own)
        routing = Routing(partitions, bus, inbox, bot, queue)
        await tg.start(routing.run)
        if bus_now:
            await tg.start(bus.run)
        webhook = Webhook(SECRET, bot, queue, inbox=inbox, bot_id=BOT, routing=routing)
        app = Starlette(routes=[Route("/telegram", webhook.handle, methods=["POST"])])
        client = await stack.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://fleet")
        )
        yield Instance(partitions, bus, routing, queue, client)


async def test_an_update_delivered_to_another_instance_is_handled_by_the_owner_once(
    postgresql_url: str,
) -> None:
    async with anyio.create_task_group() as tg:
        async with instance(postgresql_url, tg) as a, instance(postgresql_url, tg) as b:
            assert a.partitions.owns(ALICE_ID) and not b.partitions.owns(ALICE_ID)
            assert await b.deliver(1) == 200
            assert await a.handed() == 1  # the owner handles it
            assert await b.deliver(1) == 200  # Telegram delivers it again, to either instance
            assert await a.deliver(1) == 200
            assert await b.deliver(2) == 200
            assert await a.handed() == 2  # handled in order: had 1 been handed again, it would be here
            assert await a.deliver(3) == 200  # the owner's own delivery: handled at once
            assert await a.handed() == 3
            assert a.queue.empty() and b.queue.empty()
            assert a.routing.claimed == 2 and b.routing.claimed == 0
        tg.cancel_scope.cancel()


async def test_a_missed_wake_up_is_found_when_the_owners_bus_connects(postgresql_url: str) -> None:
    async with anyio.create_task_group() as tg:
        async with instance(postgresql_url, tg, bus_now=False) as a, instance(postgresql_url, tg) as b:
            assert await b.deliver(7) == 200  # A is not listening: nobody hears the wake-up
            await tg.start(a.bus.run)  # connecting, A sweeps its partitions
            assert await a.handed() == 7
            assert b.queue.empty()
        tg.cancel_scope.cancel()


async def test_an_update_waiting_for_a_dead_owner_goes_to_the_instance_that_takes_it_over(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    async with anyio.create_task_group() as tg:
        async with instance(postgresql_url, tg, bus_now=False) as a, instance(postgresql_url, tg) as b:
            assert await b.deliver(11) == 200  # waits for A, who never hears of it
            async with engine.begin() as conn:  # A dies (its lock session ends)
                await conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": a.partitions.pid})
            await b.partitions.tick()  # B takes A's partitions and looks for what waits in them
            assert b.partitions.owns(ALICE_ID)
            assert await b.handed() == 11
            assert a.queue.empty()
        tg.cancel_scope.cancel()


def update_of(user_id: int, update_id: int) -> dict[str, Any]:
    update = an_update(update_id)
    message: dict[str, Any] = update["message"]  # type: ignore[assignment]
    message["chat"] = {**message["chat"], "id": user_id}
    message["from"] = {**message["from"], "id": user_id}
    return update


async def test_a_partition_taken_but_not_yet_taken_up_has_its_updates_wait_until_its_cards_are_placed_again(
    postgresql_url: str,
) -> None:
    """A has taken every partition but has placed again only Bob's people's cards, not yet Alice's (a takeover in
    progress). Alice's update, delivered to A itself or to B, waits in the inbox; Bob's, delivered after it to B, is
    handed to A (so A has heard Alice's wake-up too, which came first on the bus, and left it). Once Alice's
    partition is taken up, her update is handed, once."""
    bob = next(u for u in range(ALICE_ID + 1, ALICE_ID + 1000) if partition_of(u) != partition_of(ALICE_ID))
    async with anyio.create_task_group() as tg:
        async with instance(postgresql_url, tg, taken_up=False) as a, instance(postgresql_url, tg) as b:
            assert a.partitions.owns(ALICE_ID) and a.partitions.owns(bob)
            a.partitions.taken_up([partition_of(bob)])
            assert await a.deliver(21) == 200  # to her new owner itself: not handled yet
            assert await b.deliver(22) == 200
            answer = await b.client.post(
                "/telegram", json=update_of(bob, 23), headers={SECRET_HEADER: SECRET}
            )
            assert answer.status_code == 200
            assert await a.handed() == 23  # Bob's: his partition is taken up
            assert a.queue.empty()  # Alice's two still wait
            a.partitions.taken_up([partition_of(ALICE_ID)])
            assert [await a.handed(), await a.handed()] == [21, 22]
            assert a.queue.empty() and b.queue.empty()
        tg.cancel_scope.cancel()

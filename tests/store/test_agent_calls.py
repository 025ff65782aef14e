"""Agents' calls handed between a fleet's instances, in rows on a real PostgreSQL (`bot.store.agent_calls`): one
instance claims a call, once; a call nobody claimed is withdrawn when its agent leaves, and never claimed once its
receiver died; a running call hears that its agent left; a receiver hears that the instance running its call died.

An instance lives as the partitions count it: a fresh `fleet_instances` row whose lock session is connected. Each
instance here is such a row over a connection of its own (closed: the instance died, as a SIGKILL ends it).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import asyncpg
import pytest

from bot.config import AuditContent, Secret, StorageConfig
from bot.core import Outcome
from bot.core.agent_calls import LOST_LINE, AgentCall
from bot.store import Store, open_store
from bot.store.agent_calls import FleetAgentCalls
from bot.store.bus import FleetBus
from bot.store.engine import database_url

pytestmark = pytest.mark.anyio

BOT = 42
CALL = AgentCall(7, 1001, "claude", "d__confirm", {"action": "deploy"})
RESULT = {"content": [{"type": "text", "text": "deploy: done"}], "isError": False}


class Instances:
    """Instances of the bot `BOT`, each alive while its connection is open."""

    def __init__(self, store: Store, url: str, stack: AsyncExitStack) -> None:
        self.store = store
        self.dsn = database_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self.stack = stack
        self.conns: dict[str, asyncpg.Connection] = {}
        self.bus = FleetBus(url, BOT)

    async def start(self) -> FleetAgentCalls:
        instance = str(uuid.uuid4())
        conn = await asyncpg.connect(self.dsn)
        self.stack.push_async_callback(conn.close)
        await conn.execute(
            "INSERT INTO fleet_instances (bot_id, instance, pid, heartbeat) "
            "VALUES ($1, $2, pg_backend_pid(), extract(epoch from clock_timestamp()))",
            BOT,
            instance,
        )
        self.conns[instance] = conn
        return FleetAgentCalls(self.store.engine, self.bus, BOT, instance)

    async def kill(self, calls: FleetAgentCalls) -> None:
        await self.conns[calls.instance].close()


@pytest.fixture
async def fleet(postgresql_url: str) -> AsyncIterator[Instances]:
    async with (
        open_store(StorageConfig(url=Secret(postgresql_url)), AuditContent.FULL) as store,
        AsyncExitStack() as stack,
    ):
        yield Instances(store, postgresql_url, stack)


async def test_a_handed_over_call_is_claimed_by_one_instance_once_and_its_result_reaches_the_receiver(
    fleet: Instances,
) -> None:
    receiver, one, other = await fleet.start(), await fleet.start(), await fleet.start()
    key = await receiver.send(CALL)
    claimed: list[AgentCall | None] = []

    async def claim(calls: FleetAgentCalls) -> None:
        claimed.append(await calls.claim(key))

    async with anyio.create_task_group() as tg:
        for calls in (one, other, one, other):
            tg.start_soon(claim, calls)
    assert [c for c in claimed if c is not None] == [CALL]
    assert await one.claim(key) is None
    for calls in (one, other):
        await calls.settle(key, RESULT)  # only the claimer's counts; the other finds nothing to settle
    with anyio.fail_after(10):
        ended = await receiver.result(key)
    assert ended.result == RESULT


async def test_a_call_whose_receiver_died_before_it_was_claimed_is_never_run(fleet: Instances) -> None:
    receiver, owner = await fleet.start(), await fleet.start()
    key = await receiver.send(CALL)
    await fleet.kill(receiver)
    assert await owner.claim(key) is None
    assert await owner.waiting() == []


async def test_an_agent_leaving_withdraws_an_unclaimed_call_and_ends_a_running_one(fleet: Instances) -> None:
    receiver, owner = await fleet.start(), await fleet.start()
    unclaimed = await receiver.send(CALL)
    assert await receiver.leave(unclaimed, Outcome.AGENT_CANCELLED)
    assert await owner.claim(unclaimed) is None
    with anyio.fail_after(10):
        assert (await receiver.result(unclaimed)).result is None
    running = await receiver.send(CALL)
    assert await owner.claim(running) == CALL
    assert not await receiver.leave(running, Outcome.AGENT_REVOKED)
    with anyio.fail_after(10):
        assert await owner.watch(running) is Outcome.AGENT_REVOKED


async def test_each_side_hears_that_the_other_died(fleet: Instances) -> None:
    """The owner hears that the receiver holding the agent's request died (nobody waits: the call ends as its
    agent's leaving); the receiver hears that the owner running its call died (the agent gets an error)."""
    receiver, owner = await fleet.start(), await fleet.start()
    key = await receiver.send(CALL)
    assert await owner.claim(key) == CALL
    await fleet.kill(owner)
    with anyio.fail_after(10):
        ended = await receiver.result(key)
    assert (ended.result, ended.line) == (None, LOST_LINE)
    other_owner = await fleet.start()
    second = await receiver.send(CALL)
    assert await other_owner.claim(second) == CALL
    await fleet.kill(receiver)
    with anyio.fail_after(10):
        assert await other_owner.watch(second) is Outcome.AGENT_CANCELLED

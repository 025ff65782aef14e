"""Agents on every instance of a fleet (docs/fleet.md): the gateway's `/mcp` behind any load balancer.

Real parts only (`tests.fleet.scene`): two `toolnexus-bot` processes with `[gateway]` on one PostgreSQL, the fake
Bot API, the durable MCP server, and the SDK's own `Client` as the agent, connected straight to one instance or
the other (as a load balancer without sticky sessions may send it). Which instance owns Alice is read from the
database once the partitions are shared out: her agent's call is sent to the other one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import anyio
import asyncpg
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError

from bot.store.engine import database_url
from bot.store.fleet import PARTITIONS, partition_of
from tests.fleet.scene import ALICE, Fleet, FleetBot, fleet_scene, stamps
from tests.web.agents import agent, make_token, revoke, text_of
from tests.web.test_gateway_tasks import call_as_task, polled, task_result

pytestmark = pytest.mark.anyio

GATEWAY = "[gateway]\nenabled = true\nkeepalive_s = 1\n"
WAIT_S = 60
"""For a card or a result under load: two bot processes, PostgreSQL and the MCP server share 2 cores."""
INSTANCE = "this is instance "


@asynccontextmanager
async def _database(fleet: Fleet) -> AsyncIterator[asyncpg.Connection]:
    dsn = database_url(fleet.store_url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        yield conn
    finally:
        await conn.close()


async def owner_and_other(fleet: Fleet, user_id: int) -> tuple[FleetBot, FleetBot]:
    """(the instance owning `user_id`, the other one), once the two share the partitions half and half."""
    bots: dict[str, FleetBot] = {}
    for bot in fleet.bots:
        line = await bot.logged(INSTANCE)
        bots[line.split(INSTANCE)[1].split()[0]] = bot
    async with _database(fleet) as conn:
        with anyio.fail_after(WAIT_S):
            while True:
                rows = await conn.fetch("SELECT partition, owner FROM fleet_partitions")
                held = Counter(row["owner"] for row in rows)
                if all(held[instance] == PARTITIONS // 2 for instance in bots):
                    break
                await anyio.sleep(0.2)  # a poll of the database, bounded above
    owner = bots[next(row["owner"] for row in rows if row["partition"] == partition_of(user_id))]
    return owner, next(bot for bot in fleet.bots if bot is not owner)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_agent_s_call_through_the_instance_that_does_not_own_its_person_is_answered_on_the_phone(
    tmp_path: Path, postgresql_url: str, mode: Literal["auto", "legacy"]
) -> None:
    """Alice's agent (2026-07-28, or in a 2025-11-25 session) calls `confirm` through the instance that does not
    own her: the call is handed to her owner, whose card she answers on her phone (her taps reach whichever
    instance, and go to the owner); the server gets her answer once and the result returns to the agent on the
    instance it called."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=GATEWAY) as fleet:
        _, other = await owner_and_other(fleet, ALICE)
        token = await make_token(fleet.store_url, ALICE, "claude")
        got: list[types.CallToolResult] = []
        async with agent(other.port, token, mode) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await client.call_tool("d__confirm", {"action": "deploy"}))

            tg.start_soon(call)
            card = await fleet.fake.wait_for(
                lambda m: "Really deploy?" in m.text and bool(m.buttons), timeout=WAIT_S
            )
            await fleet.alice.press(card, "Yes", timeout=WAIT_S)
            await fleet.fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons), timeout=WAIT_S)
            answer = await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)
            assert not answer.show_alert, answer.text
        assert not got[0].is_error, text_of(got[0])
        assert text_of(got[0]) == "deploy: done"
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        await other.logged("handed to the instance that owns them")
        assert not fleet.fake.unexpected_errors, fleet.fake.unexpected_errors


async def test_an_agent_s_task_through_the_instance_that_does_not_own_its_person_is_answered_on_the_phone(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Alice's agent makes its call a task (2025-11-25) through the instance that does not own her: the task is
    answered at once, the call handed to her owner, whose card she answers; the agent's poll on the instance it
    called gets the server's result, and the server got her answer once."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=GATEWAY) as fleet:
        _, other = await owner_and_other(fleet, ALICE)
        token = await make_token(fleet.store_url, ALICE, "claude")
        created = await call_as_task(other.port, token, "d__confirm", {"action": "deploy"})
        card = await fleet.fake.wait_for(
            lambda m: "Really deploy?" in m.text and bool(m.buttons), timeout=WAIT_S
        )
        await fleet.alice.press(card, "Yes", timeout=WAIT_S)
        await fleet.fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons), timeout=WAIT_S)
        answer = await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)
        assert not answer.show_alert, answer.text
        async with agent(other.port, token, "legacy") as client:
            done = await polled(client, created.task.task_id)
            result = await task_result(client, created.task.task_id)
        assert done.status == "completed"
        assert not result.is_error and text_of(result) == "deploy: done"
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        await other.logged("a task's call of agent claude")


async def test_a_per_agent_limit_of_one_lets_exactly_one_call_through_across_two_instances(
    tmp_path: Path, postgresql_url: str
) -> None:
    """`calls_per_minute = 2` gives each agent 1 a minute: the agent's first call, through one instance, runs; its
    second, through the other, is refused; the server got one call."""
    config = GATEWAY + "[limits]\ncalls_per_minute = 2\n"
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=config) as fleet:
        owner, other = await owner_and_other(fleet, ALICE)
        token = await make_token(fleet.store_url, ALICE, "claude")
        got = []
        for n, bot in ((1, other), (2, owner)):
            async with agent(bot.port, token) as client:
                got.append(await client.call_tool("d__stamp", {"n": n}))
        assert [r.is_error for r in got] == [False, True], [text_of(r) for r in got]
        assert text_of(got[0]) == "stamp 1"
        assert "at most 1 calls a minute for agent claude" in text_of(got[1])
        assert stamps(fleet) == [1]


async def test_a_revoked_token_is_refused_by_every_instance_at_once(
    tmp_path: Path, postgresql_url: str
) -> None:
    """An agent connected to both instances lists its tools on each; its token is revoked in the database (as
    `/agents` or `toolnexus-bot agents revoke` do, from any process): the next request to either is refused (401)."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=GATEWAY) as fleet:
        token = await make_token(fleet.store_url, ALICE, "claude")
        statuses: list[list[int]] = [[], []]
        async with (
            agent(fleet.bots[0].port, token, statuses=statuses[0]) as first,
            agent(fleet.bots[1].port, token, statuses=statuses[1]) as second,
        ):
            for client in (first, second):
                assert (await client.list_tools()).tools
            await revoke(fleet.store_url, ALICE, "claude")
            for client in (first, second):
                with pytest.raises(MCPError, match="Server returned an error response"):
                    await client.list_tools()
        assert [seen[-1] for seen in statuses] == [401, 401]


async def test_an_agent_s_call_whose_instance_is_killed_ends_for_the_agent_and_its_card_says_so(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Alice's agent calls `confirm` through the instance that does not own her, and that instance is killed
    (SIGKILL) while her card waits: the agent's request fails, her card on her owner says her agent stopped
    waiting, the server's question ends unanswered and the call is not run again."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=GATEWAY) as fleet:
        owner, other = await owner_and_other(fleet, ALICE)
        token = await make_token(fleet.store_url, ALICE, "claude")
        failed: list[BaseException] = []
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                try:
                    async with agent(other.port, token) as client:
                        await client.call_tool("d__confirm", {"action": "deploy"})
                except* (httpx2.HTTPError, MCPError) as group:
                    failed.extend(group.exceptions)

            tg.start_soon(call)
            card = await fleet.fake.wait_for(
                lambda m: "Really deploy?" in m.text and bool(m.buttons), timeout=WAIT_S
            )
            await other.kill()
            await fleet.fake.wait_for(
                lambda m: m is card and "your agent stopped waiting" in m.text and not m.buttons,
                timeout=WAIT_S,
            )
        assert failed
        assert [r["action"] for r in fleet.received("confirm")] in ([], ["cancel"])
        assert owner.alive


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_an_agent_cancelling_its_call_through_the_other_instance_ends_the_card_on_the_owner(
    tmp_path: Path, postgresql_url: str, mode: Literal["auto", "legacy"]
) -> None:
    """Alice's agent calls `confirm` through the instance that does not own her and cancels the call while her
    card waits on her owner: the card says her agent stopped waiting, the server gets no answer but `cancel`, and
    the agent's next call through the same instance works."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=GATEWAY) as fleet:
        _, other = await owner_and_other(fleet, ALICE)
        token = await make_token(fleet.store_url, ALICE, "claude")
        async with agent(other.port, token, mode) as client:
            got: list[types.CallToolResult] = []
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    got.append(await client.call_tool("d__confirm", {"action": "deploy"}))

                tg.start_soon(call)
                card = await fleet.fake.wait_for(
                    lambda m: "Really deploy?" in m.text and bool(m.buttons), timeout=WAIT_S
                )
                tg.cancel_scope.cancel()
            assert got == []
            await fleet.fake.wait_for(
                lambda m: m is card and "your agent stopped waiting" in m.text and not m.buttons,
                timeout=WAIT_S,
            )
            assert not (await client.call_tool("d__stamp", {"n": 1})).is_error
        assert [r["action"] for r in fleet.received("confirm")] in ([], ["cancel"])
        assert stamps(fleet) == [1]

"""Agents' calls as first-class calls, end to end: the SDK's own `Client` is the agent, through `/mcp` on the bot's
web endpoint, to a real MCP server whose calls are written down (`Ledger`); approvers and the person tap on the
fake Bot API; the store is a SQLite file.

An `[[approvals]]` rule for agents only makes the agent's call wait for 2 of 3 approvers while the same tool runs
at once from the chat; an agent's request approved after a restart is not run; an agent past its own share of
`[limits]` gets an error result naming the limit while its person's chat calls still run; `/cancel` in the
person's chat ends an agent's question; `/metrics` counts the gateway's calls by outcome."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from tests.fakes.servers.elicit import build_server as build_elicit
from tests.fakes.servers.ledger import Ledger
from tests.fakes.telegram import FakeUser, Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat, is_result, result_body
from tests.web.agents import agent, gateway_scene, make_token, text_of

pytestmark = pytest.mark.anyio

CAROL_ID, DAVE_ID = 3003, 3004
OPS = -7001
DEPLOY = {"service": "web", "version": "1.2.3"}
AGENTS_ONLY = {
    "servers": ["prod"],
    "tools": ["deploy*"],
    "approvers": [BOB_ID, CAROL_ID, DAVE_ID],
    "quorum": 2,
    "chat": OPS,
    "callers": ["agent"],
}


@dataclass
class Ops:
    """The scene, its endpoint and database, the approvers Carol and Dave, the approval group and the ledger."""

    s: Chat
    port: int
    url: str
    carol: FakeUser
    dave: FakeUser
    ledger: Ledger

    def card(self, m: Msg) -> bool:
        return m.chat_id == OPS and "Approval" in m.text


@asynccontextmanager
async def ops_scene(
    tmp_path: Path,
    *,
    world: Ops | None = None,
    approvals: list[dict[str, Any]] | None = None,
    **kwargs: Any,
) -> AsyncIterator[Ops]:
    """The bot with `[gateway]` on a free local port, a SQLite file in `tmp_path`, the ledger server `prod` and the
    form server `t`; Bob, Carol and Dave in the approval group OPS (where they said hello, so the bot knows their
    names). With `world`, a new bot process on that scene's database, people and ledger: a restart."""
    ledger = Ledger() if world is None else world.ledger
    async with gateway_scene(
        tmp_path,
        in_process={"prod": ledger.build, "t": build_elicit},
        approvals=[AGENTS_ONLY] if approvals is None else approvals,
        world=None if world is None else world.s,
        **kwargs,
    ) as (s, port, url):
        if world is None:
            carol = s.fake.user(id=CAROL_ID, first_name="Carol")
            dave = s.fake.user(id=DAVE_ID, first_name="Dave")
            ops = s.fake.group(OPS, title="On-call", members=[s.alice, s.bob, carol, dave])
            for person in (s.bob, carol, dave):
                await person.send("here", chat=ops)
            await s.alice.send("/help")  # as when she made her agent's token: the bot knows her name
            await s.fake.next_message(s.alice, containing="/tools")
        else:
            carol, dave = world.carol, world.dave
        yield Ops(s, port, url, carol, dave, ledger)


async def gateway_counts(port: int) -> dict[str, float]:
    """`toolnexus_gateway_calls_total` from `/metrics`, by outcome."""
    async with httpx.AsyncClient(trust_env=False) as http:
        page = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    counts: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith('toolnexus_gateway_calls_total{outcome="'):
            label, value = line.removeprefix('toolnexus_gateway_calls_total{outcome="').split('"} ')
            counts[label] = float(value)
    return counts


async def test_an_agents_gated_call_waits_for_two_of_three_approvers_and_runs_once_while_chat_runs_at_once(
    tmp_path: Path,
) -> None:
    """A rule for agents only: the agent's deploy waits; the approval card names Alice and her agent; Bob's
    approval does not run it; Carol's does, exactly once, and the agent gets the server's result. The same tool
    called by Alice from the chat runs at once, with no approval card. /metrics counts the agent's call as ok."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult] = []
        async with agent(o.port, token) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await client.call_tool("prod__deploy", DEPLOY))

            tg.start_soon(call)
            card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
            assert "Alice (agent ci-bot) asks to call deploy on prod" in card.text
            assert "service: web" in card.text and "Needs 2 of: Bob, Carol, Dave" in card.text

            await s.bob.press(card, "✅ Approve")
            card = await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
            assert o.ledger.calls == [] and got == []

            await o.carol.press(card, "✅ Approve")
        assert o.ledger.calls == [("deploy", DEPLOY)]
        assert text_of(got[0]) == "deployed web 1.2.3" and not got[0].is_error
        told = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "Approved by Bob and Carol" in m.text
        )
        assert "prod · deploy (agent ci-bot)" in told.text

        asked = await s.alice.send("/call prod deploy service=web version=2.0")
        result = await s.fake.wait_for(lambda m: is_result(m, asked))
        assert "deployed web 2.0" in result_body(result)
        assert o.ledger.calls == [("deploy", DEPLOY), ("deploy", {"service": "web", "version": "2.0"})]
        assert len([m for m in s.fake.messages(OPS, from_bot=True) if "Approval" in m.text]) == 1
        counts = await gateway_counts(o.port)
    assert counts["ok"] == 1 and counts["refused"] == 0


async def test_an_agent_that_stops_waiting_for_its_approvers_ends_the_request_and_a_late_approval_runs_nothing(
    tmp_path: Path,
) -> None:
    """The agent cancels its deploy while it waits for approvers (Bob has approved): the request ends then, as its
    requester's doing, and the approvers' card says so without buttons, instead of staying open for a call
    nobody waits for. Carol's late tap on it is refused with an alert and runs nothing."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        async with agent(o.port, token) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.call_tool, "prod__deploy", DEPLOY)
                card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
                late = card.button("✅ Approve").callback_data
                await s.bob.press(card, "✅ Approve")
                await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
                tg.cancel_scope.cancel()
            ended = await s.fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=15)
            assert "Cancelled: nothing was sent" in ended.text, ended.text
            answer = await o.carol.press_data(card, late)
            assert answer.show_alert and not card.reply_markup
    assert o.ledger.calls == []


async def test_an_agents_request_approved_after_a_restart_is_not_run_and_the_card_says_so(
    tmp_path: Path,
) -> None:
    """The bot stops while the agent's deploy waits (Bob has approved): the agent is told the call was not made.
    A new bot process on the same database shows the request as the agent's (the column survives); Carol's
    approval on the old card completes it, but the call is not run: the card and Alice say the agent is gone."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult] = []
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                # The bot goes away under the agent: its connection may end before or after the result.
                with contextlib.suppress(Exception):
                    async with agent(o.port, token) as client:
                        got.append(await client.call_tool("prod__deploy", DEPLOY))

            tg.start_soon(call)
            card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
            await s.bob.press(card, "✅ Approve")
            await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
            s.stop.set()
            with anyio.fail_after(20):
                await s.stopped.wait()
            tg.cancel_scope.cancel()
        for result in got:  # when the answer made it out before the endpoint closed
            assert result.is_error and "will not be made after the restart" in text_of(result)

        async with ops_scene(tmp_path, world=o) as again:
            answer = await again.carol.press(card, "✅ Approve")
            assert not answer.show_alert, answer.text
            settled = await s.fake.wait_for(
                lambda m: m is card and "the agent that asked is gone; not run" in m.text.lower()
            )
            told = await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "not run" in m.text)
    assert "Approved by Bob" in settled.text and not settled.reply_markup
    assert "(agent ci-bot)" in told.text and "Bob and Carol" in told.text
    assert o.ledger.calls == []


async def test_an_agent_past_its_share_of_the_limits_gets_an_error_naming_it_and_the_chat_still_runs(
    tmp_path: Path,
) -> None:
    """`calls_per_minute = 2`: the agent may make 1 a minute (half); its second call is an error result that
    names the limit; Alice's own /call still runs (the agent did not use up her allowance); /metrics counts
    one ok and one refused gateway call."""
    async with ops_scene(tmp_path, approvals=[], limits={"calls_per_minute": 2}) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        async with agent(o.port, token) as client:
            first = await client.call_tool("prod__status", {})
            second = await client.call_tool("prod__status", {})
        assert text_of(first) == "all green" and not first.is_error
        assert second.is_error
        refusal = "at most 1 calls a minute for agent ci-bot (half of [limits] calls_per_minute)"
        assert refusal in text_of(second)

        asked = await s.alice.send("/call prod status")
        result = await s.fake.wait_for(lambda m: is_result(m, asked))
        assert "all green" in result_body(result)
        counts = await gateway_counts(o.port)
    assert o.ledger.calls == [("status", {}), ("status", {})]
    assert counts["ok"] == 1 and counts["refused"] == 1


async def test_cancel_in_the_chat_ends_an_agents_question_and_the_agent_gets_cancel(tmp_path: Path) -> None:
    """The agent asks Alice something (`ask_person`); her /cancel in her private chat answers it with cancel, the
    agent gets `action: cancel`, and /metrics counts it as a cancelled gateway call."""
    async with ops_scene(tmp_path, approvals=[]) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult] = []
        async with agent(o.port, token) as client, anyio.create_task_group() as tg:

            async def ask() -> None:
                got.append(await client.call_tool("ask_person", {"message": "Ship it?"}))

            tg.start_soon(ask)
            await s.fake.wait_for(
                lambda m: m.chat_id == ALICE_ID and "Ship it?" in m.text and bool(m.buttons)
            )
            await s.alice.send("/cancel")
            await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "Cancelled 1 pending" in m.text)
        assert got[0].structured_content == {"action": "cancel"}
        counts = await gateway_counts(o.port)
    assert counts["cancelled"] == 1 and counts["ok"] == 0


async def test_a_rule_for_chat_calls_only_lets_an_agents_call_run_at_once(tmp_path: Path) -> None:
    """`callers = ["chat"]`: the agent's deploy runs without a card; Alice's own /call of it waits for
    approvers, and its card does not mention an agent."""
    chat_only = {**AGENTS_ONLY, "callers": ["chat"]}
    async with ops_scene(tmp_path, approvals=[chat_only]) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        async with agent(o.port, token) as client:
            result = await client.call_tool("prod__deploy", DEPLOY)
        assert text_of(result) == "deployed web 1.2.3" and o.ledger.calls == [("deploy", DEPLOY)]
        assert not [m for m in s.fake.messages(OPS, from_bot=True) if "Approval" in m.text]

        await s.alice.send("/call prod deploy service=web version=2.0")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
    assert "Alice asks to call deploy on prod" in card.text and "agent" not in card.text
    assert o.ledger.calls == [("deploy", DEPLOY)]

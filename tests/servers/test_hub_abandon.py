"""`Hub.abandon`: a call nobody waits for any more (its agent left, or lost its access) ends its questions as the
agent's doing, is cancelled from within, and its person hears of it. Real hub, real in-process test server."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from bot.core import CallStatus, Origin, Outcome, ToolOutcome
from bot.servers.hub import Flight, Hub
from mapping import RequestKind, SetBool, Submit, elicitation_to_request
from tests.fakes.servers.elicit import build_server
from tests.fakes.surface import ALICE, fill, make_config, placeholder, running_hub

pytestmark = pytest.mark.anyio

AGENT = Origin(ALICE.user_id, ALICE.user_id, agent="ci")
FORM = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}, "required": ["name"]}


class _Call:
    """An agent's call on the hub, run in a task: its flight, the event set once it returned, and its outcome."""

    def __init__(self, hub: Hub, tool: str, arguments: dict[str, Any]) -> None:
        self.hub, self.tool, self.arguments = hub, tool, arguments
        self.flight, self.ran, self.results = Flight(), anyio.Event(), list[ToolOutcome]()

    async def run(self) -> None:
        try:
            self.results.append(
                await self.hub.call_tool("t", self.tool, self.arguments, AGENT, flight=self.flight)
            )
        finally:
            self.ran.set()


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_an_abandoned_call_that_asked_before_is_cancelled_and_its_person_told(protocol: str) -> None:
    """The agent left after its call's question was answered: nothing is left to end, the call ends cancelled
    from within, and the person hears that their answer's result reaches nobody."""
    config = make_config(placeholder(["t"], protocol=protocol))
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, _prompts, surface),
        anyio.create_task_group() as tg,
    ):
        call = _Call(hub, "ask_then_block", {})
        tg.start_soon(call.run)
        prompt = await surface.next_prompt()
        assert prompt.answer(fill(prompt, SetBool(True), Submit()))
        await surface.outcome_of(prompt)
        with anyio.fail_after(10):
            assert await hub.abandon(
                call.flight, Outcome.AGENT_CANCELLED, AGENT, ("t", "ask_then_block"), call.ran
            )
            await call.ran.wait()
    assert call.results[0].status is CallStatus.CANCELLED
    assert surface.notices == [
        (
            AGENT,
            "🤖 Your agent ci stopped waiting for ask_then_block on t, which had asked you something: "
            "the call is ended, and its result reaches nobody.",
        )
    ]


async def test_an_abandoned_question_ends_as_the_agents_doing_and_its_server_gets_cancel() -> None:
    """The agent left with its call's question open: the card says so, the server hears `cancel` and ends its
    tool its own way; the person is not told twice (the card said it)."""
    config = make_config(placeholder(["t"], protocol="auto"))
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, _prompts, surface),
        anyio.create_task_group() as tg,
    ):
        call = _Call(hub, "ask_form", {"schema_json": json.dumps(FORM)})
        tg.start_soon(call.run)
        prompt = await surface.next_prompt()
        with anyio.fail_after(10):
            assert await hub.abandon(call.flight, Outcome.AGENT_CANCELLED, AGENT, ("t", "ask_form"), call.ran)
    assert await surface.outcome_of(prompt) is Outcome.AGENT_CANCELLED
    assert json.loads(call.results[0].text) == {"action": "cancel", "content": None}
    assert surface.notices == []


async def test_an_agents_own_question_is_left_to_its_caller_but_ends_when_its_access_is_revoked() -> None:
    """A flight not running on a session (an agent's own `ask_person` question): `abandon` says the caller
    cancels it; losing its access, the agent's own card ends as revoked."""
    config = make_config(placeholder(["t"]))
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, _prompts, surface),
        anyio.create_task_group() as tg,
    ):
        wire = {"mode": "form", "message": "Ship it?", "requestedSchema": FORM}
        request = elicitation_to_request(wire)
        assert request.kind is RequestKind.INPUT
        tg.start_soon(hub.ask_for_agent, request, None, AGENT)
        prompt = await surface.next_prompt()
        with anyio.fail_after(10):
            assert not await hub.abandon(Flight(), Outcome.AGENT_REVOKED, AGENT, None, anyio.Event())
    assert await surface.outcome_of(prompt) is Outcome.AGENT_REVOKED

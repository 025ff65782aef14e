"""2026-07-28 rounds driven by the bot itself: as many rounds as the server needs, state-only legs, the store.

Real hub, registry and an in-process MCP server (the transport is not the point); the surface records.
"""

from __future__ import annotations

import anyio
import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, MCPServer

from bot.core import CallStatus, ToolOutcome
from mapping import SetBool, Submit
from tests.fakes.surface import ALICE, fill, make_config, placeholder, running_hub

ROUNDS = 12
"""More than the SDK's own loop allows (ten)."""


def build_counter() -> MCPServer:
    server = MCPServer("toolnexus-test-rounds", version="1.0.0", log_level="WARNING")

    @server.tool()
    async def count(ctx: Context, rounds: int, idle_legs: int = 0) -> str | types.InputRequiredResult:
        """Asks one yes/no question per round for `rounds` rounds; before each question, `idle_legs` legs that
        carry only `requestState` (the server working). Returns how many questions got a yes."""
        state = (ctx.request_state or "0:0:0").split(":")
        asked, yes, idle = int(state[0]), int(state[1]), int(state[2])
        answer = (ctx.input_responses or {}).get("q")
        if isinstance(answer, types.ElicitResult):
            yes += answer.action == "accept" and bool((answer.content or {}).get("ok"))
        if asked == rounds:
            return f"{yes} of {rounds}"
        if idle < idle_legs:
            return types.InputRequiredResult(request_state=f"{asked}:{yes}:{idle + 1}")
        params = {
            "mode": "form",
            "message": f"Round {asked + 1}",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
        }
        question = types.ElicitRequest.model_validate({"method": "elicitation/create", "params": params})
        return types.InputRequiredResult(input_requests={"q": question}, request_state=f"{asked + 1}:{yes}:0")

    return server


@pytest.mark.anyio
async def test_a_call_may_take_more_rounds_than_the_sdk_loop_allows() -> None:
    """Twelve rounds, each answered by the person, end in the tool's result (the SDK's loop stops at ten)."""
    config = make_config(placeholder(["c"]))
    outcomes: list[ToolOutcome] = []
    async with (
        running_hub(config, in_process={"c": build_counter}) as (hub, _, surface),
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            outcomes.append(await hub.call_tool("c", "count", {"rounds": ROUNDS}, ALICE))

        tg.start_soon(call)
        for i in range(ROUNDS):
            prompt = await surface.next_prompt(ALICE, i)
            assert prompt.request.prompt == f"Round {i + 1}"
            prompt.answer(fill(prompt, SetBool(True), Submit()))
    assert outcomes[0].status is CallStatus.OK
    assert outcomes[0].text == f"{ROUNDS} of {ROUNDS}"


@pytest.mark.anyio
async def test_legs_that_carry_only_request_state_are_sent_again_until_a_question_or_the_result() -> None:
    """A server that works through several state-only legs before each question still gets its answers."""
    config = make_config(placeholder(["c"]))
    outcomes: list[ToolOutcome] = []
    async with (
        running_hub(config, in_process={"c": build_counter}) as (hub, _, surface),
        anyio.create_task_group() as tg,
    ):

        async def call() -> None:
            outcomes.append(await hub.call_tool("c", "count", {"rounds": 2, "idle_legs": 3}, ALICE))

        tg.start_soon(call)
        for i in range(2):
            prompt = await surface.next_prompt(ALICE, i)
            prompt.answer(fill(prompt, SetBool(i == 0), Submit()))
    assert outcomes[0].text == "1 of 2"

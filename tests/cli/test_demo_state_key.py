"""The demo server's `requestState` key: a restarted server (a new instance with the same key) resumes the
2026-07-28 rounds its predecessor issued; one with another key refuses them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client import ClientRequestContext

from bot.demo_server import STATE_KEY_ENV, build_server, state_key

pytestmark = pytest.mark.anyio


async def never(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    """Declares the elicitation capability; the test drives the rounds itself, so it is never called."""
    raise AssertionError("the SDK answered a question the test meant to drive")


async def first_round(key: str) -> types.InputRequiredResult:
    """`deploy` on one server instance, stopped at its first question (the client drives the rounds)."""
    async with Client(build_server(key), mode="2026-07-28", elicitation_callback=never) as client:
        result = await client.session.call_tool("deploy", {"service": "web"}, allow_input_required=True)
    assert isinstance(result, types.InputRequiredResult) and result.request_state
    return result


async def resume(
    key: str, asked: types.InputRequiredResult
) -> types.CallToolResult | types.InputRequiredResult | MCPError:
    """Answer the first question on a fresh server instance, with the saved requestState."""
    (name,) = asked.input_requests or {}
    answer = types.ElicitResult(action="accept", content={"environment": "staging"})
    async with Client(build_server(key), mode="2026-07-28", elicitation_callback=never) as client:
        try:
            return await client.session.call_tool(
                "deploy",
                {"service": "web"},
                input_responses={name: answer},
                request_state=asked.request_state,
                allow_input_required=True,
            )
        except MCPError as exc:
            return exc


async def test_a_restarted_demo_server_with_the_same_key_resumes_its_predecessors_round() -> None:
    """The answer reaches the new instance: it moves on to the confirmation question."""
    nxt = await resume("k" * 32, await first_round("k" * 32))
    assert isinstance(nxt, types.InputRequiredResult)
    (request,) = (nxt.input_requests or {}).values()
    assert isinstance(request, types.ElicitRequest)
    assert "Deploy web to staging?" in request.params.message


async def test_a_demo_server_with_another_key_refuses_the_round() -> None:
    """Without the predecessor's key the saved requestState is rejected (what an ephemeral key does)."""
    refused = await resume("b" * 32, await first_round("a" * 32))
    assert isinstance(refused, MCPError) and "requestState" in refused.message


def test_the_key_comes_from_the_environment_or_a_private_file_made_once(tmp_path: Path) -> None:
    """DEMO_STATE_KEY wins; else the key file under the state folder is made (0600) and then reused."""
    assert state_key({STATE_KEY_ENV: "from-env"}, str(tmp_path)) == "from-env"
    made = state_key({}, str(tmp_path / "state"))
    assert len(made) == 64 and state_key({}, str(tmp_path / "state")) == made
    assert (tmp_path / "state" / "request-state.key").stat().st_mode & 0o777 == 0o600


def test_demo_servers_starting_together_all_read_the_one_key_made(tmp_path: Path) -> None:
    """Several demo servers starting at once on a fresh state folder (a bot's first start with several people,
    or parallel tests): one key file is made, and every server reads the whole key, never a half-written one."""
    for attempt in range(20):
        folder = str(tmp_path / f"state-{attempt}")
        start = threading.Barrier(8)

        def starting(folder: str, start: threading.Barrier) -> str:
            start.wait()
            return state_key({}, folder)

        with ThreadPoolExecutor(8) as pool:
            keys = list(pool.map(starting, [folder] * 8, [start] * 8))
        assert len(set(keys)) == 1 and len(keys[0]) == 64, keys

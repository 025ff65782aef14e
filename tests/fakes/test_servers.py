"""The test MCP servers in `tests/fakes/servers/` behave as the bot's tests rely on, in both protocol eras."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters, UrlElicitationRequiredError

from tests.fakes.servers.elicit import AUTH_URL, SERVER_GAVE_UP, build_server
from tests.fakes.servers.scripted import Inbox, ScriptedUser, accept, decline

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = {"legacy": "2025-11-25", "auto": "2026-07-28"}
NESTED_SCHEMA = {
    "type": "object",
    "properties": {
        "address": {"type": "object", "properties": {"street": {"type": "string"}}},
        "mood": {"type": "colour"},
    },
}


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _text(result: types.CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


def _json(result: types.CallToolResult) -> Any:
    assert not result.is_error, result.content
    return json.loads(_text(result))


@asynccontextmanager
async def _connect(mode: str, user: ScriptedUser, inbox: Inbox | None = None) -> AsyncIterator[Client]:
    async with Client(build_server(), mode=mode, elicitation_callback=user, message_handler=inbox) as client:
        assert client.protocol_version == PROTOCOL[mode]
        yield client


def _stdio(mode: str, user: ScriptedUser) -> Client:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.fakes.servers.elicit"], cwd=str(REPO_ROOT)
    )
    return Client(params, mode=mode, elicitation_callback=user)


@pytest.mark.anyio
async def test_ask_form_passes_an_unsupported_schema_through_verbatim(mode: str) -> None:
    """Nested objects and unknown types reach the callback untouched; the answer comes back as JSON."""
    user = ScriptedUser([accept(mood="blue")])
    async with _connect(mode, user) as client:
        result = await client.call_tool(
            "ask_form", {"schema_json": json.dumps(NESTED_SCHEMA), "message": "Hi?"}
        )
    assert _json(result) == {"action": "accept", "content": {"mood": "blue"}}
    [asked] = user.asked
    assert asked == {"mode": "form", "message": "Hi?", "requestedSchema": NESTED_SCHEMA}


@pytest.mark.anyio
async def test_ask_form_reports_decline_without_content(mode: str) -> None:
    """A decline comes back as action "decline" and no content."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    async with _connect(mode, ScriptedUser([decline()])) as client:
        result = await client.call_tool("ask_form", {"schema_json": json.dumps(schema)})
    assert _json(result) == {"action": "decline", "content": None}


@pytest.mark.anyio
async def test_a_schema_without_properties_never_reaches_the_callback(mode: str) -> None:
    """The SDK itself rejects a requestedSchema lacking `properties` (-32602 legacy, -32603 in 2026)."""
    user = ScriptedUser([])
    async with _connect(mode, user) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ask_form", {"schema_json": '{"type": "object"}'})
    assert raised.value.code == (types.INVALID_PARAMS if mode == "legacy" else types.INTERNAL_ERROR)
    assert user.asked == []


@pytest.mark.anyio
async def test_a_callback_error_fails_the_call_with_its_code(mode: str) -> None:
    """ErrorData from the callback (e.g. "cannot render this") surfaces as MCPError with the same code."""
    refusal = types.ErrorData(code=types.INVALID_PARAMS, message="Unsupported schema: nested object")
    async with _connect(mode, ScriptedUser([refusal])) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("ask_form", {"schema_json": json.dumps(NESTED_SCHEMA)})
    assert (raised.value.code, raised.value.message) == (refusal.code, refusal.message)


@pytest.mark.anyio
async def test_ask_raw_sends_a_modeless_request_that_the_client_reads_as_a_form(mode: str) -> None:
    """A 2025-06-18-style request (no `mode`) reaches the callback as form mode in both eras."""
    raw = {
        "message": "Old style",
        "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
    }
    user = ScriptedUser([accept(ok=True)])
    async with _connect(mode, user) as client:
        result = await client.call_tool("ask_raw", {"params_json": json.dumps(raw)})
    assert _json(result) == {"action": "accept", "content": {"ok": True}}
    # On the wire legacy sends it mode-less and 2026 with mode "form"; the SDK client parses both alike.
    [asked] = user.asked
    assert asked == {"mode": "form", **raw}


@pytest.mark.anyio
async def test_ask_url_completes_an_accepted_link_in_legacy_only(mode: str) -> None:
    """URL mode: legacy carries the given elicitationId and sends its completion; 2026 has neither."""
    user, inbox = ScriptedUser([accept()]), Inbox()
    args = {"url": "https://example.com/x", "message": "Open it", "elicitation_id": "e-1"}
    async with _connect(mode, user, inbox) as client:
        result = await client.call_tool("ask_url", args)
        if mode == "legacy":
            with anyio.fail_after(5):
                await inbox.wait_for_completion("e-1")
    [asked] = user.asked
    if mode == "legacy":
        assert _json(result) == {"action": "accept", "elicitationId": "e-1"}
        assert asked == {
            "mode": "url",
            "message": "Open it",
            "url": "https://example.com/x",
            "elicitationId": "e-1",
        }
    else:
        assert _json(result) == {"action": "accept"}
        assert asked == {"mode": "url", "message": "Open it", "url": "https://example.com/x"}
        assert inbox.completed_ids() == []


@pytest.mark.anyio
async def test_ask_url_sends_no_completion_for_a_declined_link(mode: str) -> None:
    """Nothing completes when the user declines."""
    inbox = Inbox()
    async with _connect(mode, ScriptedUser([decline()]), inbox) as client:
        result = await client.call_tool("ask_url", {"elicitation_id": "e-2"})
    assert _json(result)["action"] == "decline"
    assert inbox.completed_ids() == []


@pytest.mark.anyio
async def test_needs_auth_fails_with_32042_first_and_succeeds_on_retry(mode: str) -> None:
    """-32042 carries one URL elicitation; the retry succeeds (legacy: after completing that elicitation)."""
    inbox = Inbox()
    async with _connect(mode, ScriptedUser([]), inbox) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("needs_auth", {})
        [link] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        assert _text(await client.call_tool("needs_auth", {})) == "authorized"
        if mode == "legacy":
            with anyio.fail_after(5):
                await inbox.wait_for_completion(link.elicitation_id or "")
    assert raised.value.code == types.URL_ELICITATION_REQUIRED
    assert link.message == "Authorize the test server"
    assert link.url == f"{AUTH_URL}?state={link.elicitation_id}"


@pytest.mark.anyio
async def test_server_cancels_its_own_question_in_legacy() -> None:
    """After its timeout the server withdraws the question: the callback is cancelled and the tool returns."""
    asked, cancelled = anyio.Event(), anyio.Event()

    async def wait_forever(_: dict[str, Any]) -> types.ElicitResult:
        asked.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        raise AssertionError("unreachable")

    async with _connect("legacy", ScriptedUser([wait_forever])) as client:
        with anyio.fail_after(5):
            result = await client.call_tool("server_cancels", {"timeout_s": 0.2})
            await cancelled.wait()
    assert asked.is_set()
    assert _text(result) == SERVER_GAVE_UP


@pytest.mark.anyio
async def test_server_cancels_is_an_error_in_2026() -> None:
    """2026-07-28 has no server-to-client request a server could withdraw."""
    user = ScriptedUser([])
    async with _connect("auto", user) as client:
        result = await client.call_tool("server_cancels", {})
    assert result.is_error
    assert user.asked == []


@pytest.mark.anyio
async def test_never_answers_until_the_client_gives_up(mode: str) -> None:
    """never_answers only ends by the client's timeout (-32001)."""
    async with _connect(mode, ScriptedUser([])) as client:
        with anyio.fail_after(5), pytest.raises(MCPError) as raised:
            await client.call_tool("never_answers", {}, read_timeout_seconds=0.1)
    assert raised.value.code == types.REQUEST_TIMEOUT


@pytest.mark.anyio
async def test_slow_progress_reports_each_step(mode: str) -> None:
    """slow_progress reports i/n with "step i/n", then returns "done n"."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with _connect(mode, ScriptedUser([])) as client:
        result = await client.call_tool("slow_progress", {"n": 2}, progress_callback=on_progress)
    assert _text(result) == "done 2"
    assert seen == [(1, 2, "step 1/2"), (2, 2, "step 2/2")]


@pytest.mark.anyio
async def test_whoami_tells_connections_apart_in_process(mode: str) -> None:
    """Two clients of one in-process server get different connection ids; one client keeps its own."""
    server = build_server()
    async with Client(server, mode=mode) as first, Client(server, mode=mode) as second:
        a1, a2 = _json(await first.call_tool("whoami", {})), _json(await first.call_tool("whoami", {}))
        b = _json(await second.call_tool("whoami", {}))
    assert a1 == a2
    assert a1["connection"] != b["connection"]
    assert a1["pid"] == b["pid"] == os.getpid()
    assert a1["protocol"] == PROTOCOL[mode]


@pytest.mark.anyio
async def test_die_during_elicitation_is_an_error_in_process(mode: str) -> None:
    """In-process there is no process to end: the tool fails instead of asking."""
    user = ScriptedUser([])
    async with _connect(mode, user) as client:
        result = await client.call_tool("die_during_elicitation", {})
    assert result.is_error
    assert user.asked == []


@pytest.mark.anyio
@pytest.mark.slow
async def test_die_during_elicitation_ends_the_stdio_server_after_asking(mode: str) -> None:
    """Over stdio the question arrives, then the process is gone: the call fails with "connection closed"."""
    user = ScriptedUser([accept(name="too late")])
    with anyio.fail_after(30):
        async with _stdio(mode, user) as client:
            whoami = _json(await client.call_tool("whoami", {}))
            with pytest.raises(MCPError) as raised:
                await client.call_tool("die_during_elicitation", {})
    assert raised.value.code == types.CONNECTION_CLOSED
    assert [asked["message"] for asked in user.asked] == ["This server will be gone before you answer"]
    assert whoami["pid"] != os.getpid()


@pytest.mark.anyio
@pytest.mark.slow
async def test_stdio_servers_are_separate_processes() -> None:
    """Each stdio client gets its own server process (and so its own state)."""
    with anyio.fail_after(30):
        async with _stdio("legacy", ScriptedUser([])) as first, _stdio("auto", ScriptedUser([])) as second:
            a, b = _json(await first.call_tool("whoami", {})), _json(await second.call_tool("whoami", {}))
    assert a["pid"] != b["pid"]
    assert (a["protocol"], b["protocol"]) == ("2025-11-25", "2026-07-28")

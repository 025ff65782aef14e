"""An agent that goes away while its person's card is open, end to end: the SDK's own `Client` is the agent,
through `/mcp` on the bot's web endpoint, to the real elicit test server; the person is on the fake Bot API.

The agent cancels its call (the SDK's `Client` sends `notifications/cancelled` in 2025-11-25, and closes the
call's POST in 2026-07-28, whose wire has no other cancel): the card says the agent cancelled, its buttons go,
a late tap gets an alert, the server hears `cancel`, and nothing is left pending. An agent whose connection just
drops (2025-11-25: no cancel is sent, and the call goes on): the person's answer still reaches the server, and
since the result has nobody to go to, the chat says so."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.server.mcpserver import Context, MCPServer
from mcp_types.version import is_version_at_least
from pydantic import BaseModel

from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, Chat
from tests.web.agents import agent, agent_mode, gateway_scene, make_token

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "2026-07-28"]
SUBMIT = "✅ Submit"
GO_ON = {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}


class GoOn(BaseModel):
    go: bool


@dataclass
class Heard:
    """A test MCP server whose `ask` tool asks "Go on?" and writes down the action it got back, in both eras."""

    actions: list[str] = field(default_factory=list)
    heard: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)

    def build(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer("toolnexus-test-heard", log_level="WARNING")

        @server.tool()
        async def ask(ctx: Context[Any]) -> str | types.InputRequiredResult:
            """Ask "Go on?"; return the action."""
            if ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, "2026-07-28"):
                answer = (ctx.input_responses or {}).get("q")
                if not isinstance(answer, types.ElicitResult):
                    question = types.ElicitRequest.model_validate(
                        {
                            "method": "elicitation/create",
                            "params": {"message": "Go on?", "requestedSchema": GO_ON},
                        }
                    )
                    return types.InputRequiredResult(input_requests={"q": question})
                action = answer.action
            else:
                action = (await ctx.elicit("Go on?", GoOn)).action
            self.actions.append(action)
            self.heard.set()
            return action

        @server.tool()
        async def ask_then_work(ctx: Context[Any]) -> str:
            """(2025-11-25) Ask "Go on?", then work until cancelled; write down the action and the cancel."""
            self.actions.append((await ctx.elicit("Go on?", GoOn)).action)
            self.heard.set()
            try:
                await anyio.sleep_forever()
            finally:
                self.actions.append("cancelled")
                self.stopped.set()
            return "never"

        return server


@contextmanager
def call_ended(server: str) -> Iterator[anyio.Event]:
    """An event set when the hub logs the end of a call on `server` (its per-call INFO line, written once the
    call is over and off the running list)."""
    ended = anyio.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith(f"call {server}/"):
                ended.set()

    handler = Handler(logging.INFO)
    logger = logging.getLogger("bot.servers.hub")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield ended
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@asynccontextmanager
async def heard_scene(
    tmp_path: Path, protocol: str
) -> AsyncIterator[tuple[Chat, int, str, Heard, anyio.Event]]:
    """The gateway scene with the `Heard` server as `h`; (scene, port, database URL, the server, an event set
    when a call on `h` has ended in the hub)."""
    heard = Heard()
    with call_ended("h") as ended:
        async with gateway_scene(tmp_path, protocol=protocol, in_process={"h": heard.build}) as (
            s,
            port,
            url,
        ):
            yield s, port, url, heard, ended


async def card_for(s: Chat, words: str) -> Msg:
    return await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and words in m.text and bool(m.buttons))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("tool", ["h__ask", "ask_person"])
async def test_an_agent_that_cancels_its_call_ends_the_card_honestly(
    tmp_path: Path, protocol: str, tool: str
) -> None:
    """The agent's call waits on Alice's card (a server's question, or the agent's own `ask_person`); the agent
    cancels it. The card says the agent stopped waiting, without buttons; Alice's late tap gets an alert and
    changes nothing; a server's question is answered `cancel` towards the server; /cancel finds nothing
    pending. The agent's session goes on."""
    async with heard_scene(tmp_path, protocol) as (s, port, url, heard, ended):
        token = await make_token(url, ALICE_ID, "ci-bot")
        async with agent(port, token, agent_mode(protocol)) as client:
            got: list[types.CallToolResult] = []
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    arguments = {"message": "Go on?", "schema": GO_ON} if tool == "ask_person" else {}
                    got.append(await client.call_tool(tool, arguments))

                tg.start_soon(call)
                card = await card_for(s, "Go on?")
                late = card.button("Yes").callback_data
                tg.cancel_scope.cancel()
            assert got == []
            card = await s.fake.wait_for(lambda m: m is card and not m.buttons, timeout=15)
            assert "Cancelled: your agent stopped waiting" in card.text, card.text
            before = card.text
            answer = await s.alice.press_data(card, late)
            assert answer.show_alert and card.text == before and not card.buttons
            if tool == "h__ask":
                with anyio.fail_after(15):
                    await heard.heard.wait()
                    await ended.wait()
                assert heard.actions == ["cancel"]
            assert (await client.call_tool("notify_person", {"message": "still here"})).is_error is False
        await nothing_pending(s)


@asynccontextmanager
async def raw_call(port: int, token: str, tool: str) -> AsyncIterator[None]:
    """A 2025-11-25 agent by hand: a session, then `tool` called on a POST whose response stream is open while
    this runs; on exit the response is closed before its end, so the connection drops (and no cancel is sent)."""
    endpoint = f"http://127.0.0.1:{port}/mcp"
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    client_info = {"name": "raw", "version": "1"}
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info},
    }
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": tool, "arguments": {}}}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        opened = await http.post(endpoint, json=initialize, headers=headers)
        assert opened.status_code == 200, opened.text
        session = {
            **headers,
            "Mcp-Session-Id": opened.headers["mcp-session-id"],
            "MCP-Protocol-Version": "2025-11-25",
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(endpoint, json=initialized, headers=session)).status_code == 202
        async with http.stream("POST", endpoint, json=call, headers=session) as response:
            assert response.status_code == 200
            yield


async def nothing_pending(s: Chat) -> None:
    """/cancel in Alice's chat finds nothing to cancel."""
    asked = await s.alice.send("/cancel")
    said = await s.fake.wait_for(
        lambda m: m.chat_id == ALICE_ID and m.message_id > asked.message_id and "cancel" in m.text.lower()
    )
    assert "Nothing to cancel here." in said.text, said.text


async def test_an_agent_whose_connection_drops_is_taken_as_gone_and_the_card_says_so(tmp_path: Path) -> None:
    """2025-11-25: the agent's connection carrying its call drops while Alice's card is open, and no cancel is
    sent. The SDK would run the call on and drop its result (without an event store nothing can resume it), so
    Alice's answer would go nowhere: the gateway takes the drop as the agent going. The card says the agent
    stopped waiting, without buttons; the server hears `cancel`; nothing is left pending."""
    async with heard_scene(tmp_path, "legacy") as (s, port, url, heard, ended):
        token = await make_token(url, ALICE_ID, "ci-bot")
        async with raw_call(port, token, "h__ask"):
            card = await card_for(s, "Go on?")
        card = await s.fake.wait_for(lambda m: m is card and not m.buttons, timeout=15)
        assert "Cancelled: your agent stopped waiting" in card.text, card.text
        with anyio.fail_after(15):
            await heard.heard.wait()
            await ended.wait()
        assert heard.actions == ["cancel"]
        await nothing_pending(s)


async def test_an_agent_that_drops_after_the_person_answered_ends_the_call_and_the_chat_says_so(
    tmp_path: Path,
) -> None:
    """2025-11-25: Alice answers the server's question, the server works on, and the agent's connection drops.
    The call is cancelled (the server's tool sees it), and since the result of what Alice answered reaches
    nobody, her chat says so, naming the agent and the tool."""
    async with heard_scene(tmp_path, "legacy") as (s, port, url, heard, ended):
        token = await make_token(url, ALICE_ID, "ci-bot")
        async with raw_call(port, token, "h__ask_then_work"):
            card = await card_for(s, "Go on?")
            await s.alice.press(card, "Yes")
            await s.fake.wait_for(lambda m: m is card and SUBMIT in m.buttons)
            await s.alice.press(card, SUBMIT)
            with anyio.fail_after(15):
                await heard.heard.wait()
        told = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "stopped waiting" in m.text and m is not card, timeout=15
        )
        assert "ci-bot" in told.text and "ask_then_work on h" in told.text and "reaches nobody" in told.text
        with anyio.fail_after(15):
            await heard.stopped.wait()
            await ended.wait()
        assert heard.actions == ["accept", "cancelled"]
        await s.fake.wait_for(lambda m: m is card and "Answer sent" in m.text and not m.buttons)
        await nothing_pending(s)

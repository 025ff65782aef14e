"""The MCP gateway end to end: the SDK's own `Client` is the agent, through `/mcp` on the bot's web endpoint, to
real test MCP servers; the person answers on the fake Bot API; the agent gets the server's own result.

The agent tokens are made by the store the bot uses (a second connection to the same SQLite file), as
`/agents new` makes them."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp_types import SERVER_INFO_META_KEY

from bot.config import Secret, StorageConfig
from bot.core import MESSAGE_CLIP, clip
from bot.store import open_store
from tests.fakes.servers.conformance import OWN_META
from tests.fakes.servers.conformance import build_server as build_reference
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, GROUP_ID, Chat
from tests.web.agents import agent, agent_mode, gateway_scene, make_token, revoke, text_of

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "2026-07-28"]
SUBMIT = "✅ Submit"
GO_ON = {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}


async def card_for(s: Chat, user_id: int, words: str) -> Msg:
    return await s.fake.wait_for(lambda m: m.chat_id == user_id and words in m.text and bool(m.buttons))


async def submit(s: Chat, card: Msg) -> None:
    """Press Submit once the card shows its review screen.

    `card` must be the card's message as it is now: taps edit it in place (the fake keeps the one `Msg`), but
    after a typed answer the card moves below the reply, a new message (the old one is deleted)."""
    person = s.alice if card.chat_id == ALICE_ID else s.bob
    await s.fake.wait_for(lambda m: m is card and SUBMIT in m.buttons)
    await person.press(card, SUBMIT)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_an_agents_call_asks_the_person_a_form_and_gets_the_servers_result(
    tmp_path: Path, protocol: str
) -> None:
    """The agent lists Alice's servers' tools as <server>__<tool>; its call's form question becomes a card in
    Alice's private chat naming the agent; her tap goes back to the server; the agent gets the server's result,
    and no result message lands in the chat (the agent has it)."""
    async with gateway_scene(tmp_path, protocol=protocol) as (s, port, url):
        token = await make_token(url, ALICE_ID, "ci-bot")
        async with agent(port, token) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"t__ask_form", "demo__deploy", "ask_person", "notify_person"} <= names
            async with anyio.create_task_group() as tg:
                got: list[types.CallToolResult] = []

                async def call() -> None:
                    args = {"message": "Go on?", "schema_json": json.dumps(GO_ON)}
                    got.append(await client.call_tool("t__ask_form", args))

                tg.start_soon(call)
                card = await card_for(s, ALICE_ID, "Go on?")
                assert "ci-bot" in card.text
                await s.alice.press(card, "Yes")
                await submit(s, card)
        assert json.loads(text_of(got[0])) == {"action": "accept", "content": {"go": True}}
        assert not got[0].is_error


async def test_a_url_question_reaches_the_person_and_the_agent_gets_the_consent(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path, protocol="legacy") as (s, port, url):
        token = await make_token(url, ALICE_ID, "ide")
        async with agent(port, token) as client, anyio.create_task_group() as tg:
            got: list[types.CallToolResult] = []

            async def call() -> None:
                got.append(await client.call_tool("t__ask_url", {"url": "https://good.com/login"}))

            tg.start_soon(call)
            card = await s.fake.wait_for(
                lambda m: m.chat_id == ALICE_ID and "open a link" in m.text and bool(m.buttons)
            )
            await s.alice.press(card, "Open good.com")
        assert json.loads(text_of(got[0]))["action"] == "accept"


async def test_notify_person_sends_a_line(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "ci")
        async with agent(port, token) as client:
            result = await client.call_tool("notify_person", {"message": "build <b>42</b> is green"})
        assert not result.is_error
        line = await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "build <b>42</b> is green" in m.text)
        assert "ci" in line.text


async def test_notify_person_counts_against_the_agents_limits_and_is_audited_like_a_call(
    tmp_path: Path,
) -> None:
    """`calls_per_minute = 2` (the agent's half: 1): of five lines one reaches Alice's chat, the other four are
    error results naming the limit; each of the five is audited as a call of `notify_person` by the agent, with
    the line it carried and how it ended."""
    async with gateway_scene(tmp_path, limits={"calls_per_minute": 2}) as (s, port, url):
        token = await make_token(url, ALICE_ID, "ci")
        async with agent(port, token) as client:
            results = [await client.call_tool("notify_person", {"message": f"build {n}"}) for n in range(5)]
        async with open_store(StorageConfig(url=Secret(url))) as store:
            # The calls' rows: the token's own (agent_token_created) is not one of them.
            rows = [r.as_dict() for r in await store.audit.rows() if r.event.startswith("call_")]
    assert [r.is_error for r in results] == [False, True, True, True, True]
    assert all("at most 1 calls a minute for agent ci" in text_of(r) for r in results[1:])
    assert [m.text for m in s.fake.messages(ALICE_ID) if "build" in m.text] == ["🤖 ci: build 0"]
    assert [(r["event"], r["server"], r["tool"], r["user_id"]) for r in rows] == [
        ("call_started", "ci", "notify_person", ALICE_ID),
        ("call_ended", "ci", "notify_person", ALICE_ID),
    ] * 5
    started, ended = rows[0::2], rows[1::2]
    assert [r["detail"]["arguments"]["content"] for r in started] == [
        {"message": f"build {n}"} for n in range(5)
    ]
    assert [r["detail"]["status"] for r in ended] == ["ok"] + ["refused"] * 4
    assert all(r["detail"]["agent"] == "ci" for r in rows)


async def test_two_peoples_agents_are_isolated(tmp_path: Path) -> None:
    """Alice's agent and Bob's call a form tool at once: each card lands only in its own person's chat; a press
    by Bob carrying Alice's card's button (a forged client: he cannot see her chat) is refused and leaves her
    question open; each agent gets its own person's answer."""
    async with gateway_scene(tmp_path) as (s, port, url):
        alice_token = await make_token(url, ALICE_ID, "alice-ci")
        bob_token = await make_token(url, BOB_ID, "bob-ci")
        got: dict[int, types.CallToolResult] = {}

        async def call(user_id: int, token: str, message: str) -> None:
            async with agent(port, token) as client:
                args = {"message": message, "schema_json": json.dumps(GO_ON)}
                got[user_id] = await client.call_tool("t__ask_form", args)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, ALICE_ID, alice_token, "Alice, go on?")
            tg.start_soon(call, BOB_ID, bob_token, "Bob, go on?")
            alice_card = await card_for(s, ALICE_ID, "Alice, go on?")
            bob_card = await card_for(s, BOB_ID, "Bob, go on?")
            assert "alice-ci" in alice_card.text and "bob-ci" in bob_card.text
            everywhere = [m for chat in (ALICE_ID, BOB_ID, GROUP_ID) for m in s.fake.messages(chat)]
            assert not [m for m in everywhere if "Alice, go on?" in m.text and m.chat_id != ALICE_ID]
            assert not [m for m in everywhere if "Bob, go on?" in m.text and m.chat_id != BOB_ID]

            forged = await s.bob.press_data(bob_card, alice_card.button("No").callback_data)
            assert "for the person who started the call" in forged.text
            assert SUBMIT not in alice_card.buttons and "No" in alice_card.buttons, alice_card.text
            assert ALICE_ID not in got

            await s.bob.press(bob_card, "No")
            await submit(s, bob_card)
            await s.alice.press(alice_card, "Yes")
            await submit(s, alice_card)
        assert json.loads(text_of(got[ALICE_ID])) == {"action": "accept", "content": {"go": True}}
        assert json.loads(text_of(got[BOB_ID])) == {"action": "accept", "content": {"go": False}}


TYPED = {
    "type": "object",
    "properties": {
        "count": {"type": "integer", "title": "Count", "minimum": 1},
        "urgent": {"type": "boolean", "title": "Urgent"},
        "color": {"type": "string", "title": "Color", "enum": ["red", "green"]},
    },
    "required": ["count", "urgent", "color"],
}


async def ask(client: Client, arguments: dict[str, Any], got: list[types.CallToolResult]) -> None:
    got.append(await client.call_tool("ask_person", arguments))


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ask_person_returns_typed_content(tmp_path: Path, protocol: str) -> None:
    """The agent asks a form of an integer, a boolean and an enum; Alice fills it on the card; the agent gets
    `accept` with the content typed as the schema says (3, not "3")."""
    async with gateway_scene(tmp_path, protocol=protocol) as (s, port, url):
        token = await make_token(url, ALICE_ID, "planner")
        async with agent(port, token, agent_mode(protocol)) as client:
            got: list[types.CallToolResult] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, client, {"message": "How many builds?", "schema": TYPED}, got)
                card = await s.fake.wait_for(
                    lambda m: m.chat_id == ALICE_ID and "How many builds?" in m.text and "Count" in m.text
                )
                assert "planner" in card.text
                await s.alice.send("3", reply_to=card)
                # After a typed answer the card moves below it: a new message (the old one is deleted).
                card = await card_for(s, ALICE_ID, "Urgent")
                assert "Yes" in card.buttons
                await s.alice.press(card, "Yes")
                card = await s.fake.wait_for(lambda m: m is card and "green" in m.buttons)
                await s.alice.press(card, "green")
                await submit(s, card)
        assert not got[0].is_error, text_of(got[0])
        expected = {"action": "accept", "content": {"count": 3, "urgent": True, "color": "green"}}
        assert got[0].structured_content == expected
        assert json.loads(text_of(got[0])) == expected
        assert isinstance(got[0].structured_content["content"]["count"], int)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_ask_person_decline_choices_and_yes_no(tmp_path: Path, protocol: str) -> None:
    """Declining a form gives `decline`; `choices` asks one pick and returns it; neither asks yes/no, with Yes
    and No buttons (not a bare OK), and returns the answer as a boolean."""
    async with gateway_scene(tmp_path, protocol=protocol) as (s, port, url):
        token = await make_token(url, ALICE_ID, "planner")
        async with agent(port, token, agent_mode(protocol)) as client:
            got: list[types.CallToolResult] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, client, {"message": "Fill the release form", "schema": TYPED}, got)
                card = await card_for(s, ALICE_ID, "Fill the release form")
                await s.alice.press(card, "Decline")
            assert got[-1].structured_content == {"action": "decline"}

            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    ask, client, {"message": "Which region?", "choices": ["eu-west", "us-east"]}, got
                )
                card = await s.fake.wait_for(
                    lambda m: m.chat_id == ALICE_ID and "Which region?" in m.text and "us-east" in m.buttons
                )
                await s.alice.press(card, "us-east")
                await submit(s, card)
            assert got[-1].structured_content == {"action": "accept", "content": {"choice": "us-east"}}

            for button, answer in (("Yes", True), ("No", False)):
                question = f"Ship it now ({button})?"
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ask, client, {"message": question}, got)
                    card = await card_for(s, ALICE_ID, question)
                    assert {"Yes", "No"} <= set(card.buttons) and "✅ OK" not in card.buttons
                    await s.alice.press(card, button)
                    await submit(s, card)
                assert got[-1].structured_content == {"action": "accept", "content": {"answer": answer}}
        assert not any(result.is_error for result in got)


async def test_a_huge_ask_person_message_is_audited_as_its_card_shows_it_with_its_length_and_digest(
    tmp_path: Path,
) -> None:
    """A 3 MB question: the card shows its first `MESSAGE_CLIP` characters, and the `question_shown` row keeps
    just those (not 3 MB), beside the whole text's length and SHA-256."""
    message = "Ship it? " + "x" * 3_000_000
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "planner")
        async with agent(port, token) as client:
            got: list[types.CallToolResult] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, client, {"message": message}, got)
                card = await card_for(s, ALICE_ID, "Ship it? xxx")
                await s.alice.send("/cancel")
        async with open_store(StorageConfig(url=Secret(url))) as store:
            (shown,) = [
                r.as_dict()["detail"] for r in await store.audit.rows() if r.event == "question_shown"
            ]
    assert got[0].structured_content == {"action": "cancel"}
    assert shown["message"] == clip(message, MESSAGE_CLIP) and shown["message"] in card.text
    assert shown["message_chars"] == len(message)
    assert shown["message_sha256"] == hashlib.sha256(message.encode()).hexdigest()


async def test_ask_person_refuses_a_bad_schema_and_says_why(tmp_path: Path) -> None:
    """A schema MCP elicitation cannot take (a nested object) is refused at once, naming why; no card is sent."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "planner")
        nested = {"type": "object", "properties": {"where": {"type": "object", "properties": {}}}}
        async with agent(port, token) as client:
            result = await client.call_tool("ask_person", {"message": "Where?", "schema": nested})
            both = await client.call_tool("ask_person", {"message": "x", "schema": TYPED, "choices": ["a"]})
        assert result.is_error and "ask_person cannot ask this" in text_of(result)
        assert "where" in text_of(result)
        assert both.is_error and "not both" in text_of(both)
        assert not [m for m in s.fake.messages(ALICE_ID) if "Where?" in m.text]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_revoked_token_is_refused_at_once(tmp_path: Path, protocol: str) -> None:
    """Revoked in the store while the agent's session is open: its next request is refused (401), and a new
    connection with it fails; another token of the same person still works."""
    async with gateway_scene(tmp_path) as (_, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        other = await make_token(url, ALICE_ID, "ci")
        async with agent(port, token, agent_mode(protocol)) as client:
            assert (await client.list_tools()).tools
            await revoke(url, ALICE_ID, "laptop")
            # The SDK reports the 401 as an error response (the raw status is checked below).
            with pytest.raises(MCPError, match="Server returned an error response"):
                await client.list_tools()
        async with httpx2.AsyncClient(trust_env=False) as http:
            probe = await http.post(
                f"http://127.0.0.1:{port}/mcp",
                headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            )
        assert probe.status_code == 401
        connected = True
        try:
            async with agent(port, token, agent_mode(protocol)) as client:
                await client.list_tools()
        except* MCPError:
            connected = False
        assert not connected
        async with agent(port, other, agent_mode(protocol)) as client:
            assert (await client.list_tools()).tools


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_servers_protocol_meta_stays_behind(tmp_path: Path, protocol: str) -> None:
    """A server's result passes through without its `io.modelcontextprotocol/*` `_meta` keys (its serverInfo
    names the server, not the gateway the agent talks to); its other `_meta` keys pass. In 2026-07-28 the agent
    sees the gateway's own serverInfo instead."""
    servers = {"c": build_reference}
    async with gateway_scene(tmp_path, protocol=protocol, in_process=servers) as (_, port, url):
        token = await make_token(url, ALICE_ID, "ide")
        async with agent(port, token, agent_mode(protocol)) as client:
            result = await client.call_tool("c__with_meta", {})
    assert text_of(result) == "with meta"
    meta = dict(result.meta or {})
    assert {key: meta.pop(key) for key in OWN_META} == OWN_META
    info = meta.pop(SERVER_INFO_META_KEY, None)
    assert info is None if protocol == "legacy" else info["name"] == "toolnexus-bot", info
    assert not meta, meta


async def test_an_agents_call_gets_its_info_line_naming_the_agent_as_a_chat_call_does(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator sees an agent's call at INFO as a chat call: server, tool, user, the agent, outcome, time."""
    async with gateway_scene(tmp_path) as (_, port, url):
        token = await make_token(url, ALICE_ID, "ci-bot")
        with caplog.at_level(logging.INFO, logger="bot.servers.hub"):
            async with agent(port, token) as client:
                result = await client.call_tool("demo__echo", {"text": "PRIVATE-TEXT"})
    assert not result.is_error
    lines = [
        r.getMessage() for r in caplog.records if r.name == "bot.servers.hub" and r.msg.startswith("call ")
    ]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"call demo/echo by user {ALICE_ID} via agent ci-bot: ok in "), lines
    assert "PRIVATE-TEXT" not in caplog.text

"""The MCP gateway end to end: the SDK's own `Client` is the agent, through `/mcp` on the bot's web endpoint, to
real test MCP servers; the person answers on the fake Bot API; the agent gets the server's own result.

The agent tokens are made by the store the bot uses (a second connection to the same SQLite file), as
`/agents new` makes them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bot.config import Secret, StorageConfig
from bot.store import open_store
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, Chat, bot_scene
from tests.web.support import free_port

pytestmark = pytest.mark.anyio

PUBLIC_URL = "https://bot.example.com"
PROTOCOLS = ["legacy", "2026-07-28"]
SUBMIT = "✅ Submit"
GO_ON = {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}


@asynccontextmanager
async def gateway_scene(tmp_path: Path, **kwargs: Any) -> AsyncIterator[tuple[Chat, int, str]]:
    """The bot with `[gateway]` on a free local port and a database; (scene, port, database URL)."""
    port = free_port()
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL}
    async with bot_scene(web=web, storage=url, gateway={"enabled": True}, **kwargs) as s:
        yield s, port, url


async def make_token(url: str, user_id: int, name: str) -> str:
    """An agent token for `user_id`, made in the bot's database."""
    async with open_store(StorageConfig(url=Secret(url))) as store:
        _, text = await store.agents.create(user_id, name, 0)
    return str(text)


async def revoke(url: str, user_id: int, name: str) -> None:
    async with open_store(StorageConfig(url=Secret(url))) as store:
        assert await store.agents.revoke(user_id, name)


@asynccontextmanager
async def agent(port: int, token: str, mode: Literal["auto", "legacy"] = "auto") -> AsyncIterator[Client]:
    """The SDK's `Client` as an agent with `token`, on the local endpoint (as a proxy forwards the public one)."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=120.0), trust_env=False
        ) as http,
        Client(
            streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http),
            mode=mode,
            read_timeout_seconds=None,
        ) as client,
    ):
        yield client


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def card_for(s: Chat, user_id: int, words: str) -> Msg:
    return await s.fake.wait_for(lambda m: m.chat_id == user_id and words in m.text and bool(m.buttons))


async def submit(s: Chat, card: Msg) -> None:
    """Press Submit once the card shows its review screen."""
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

"""Shared by the gateway's tests: the bot with `[gateway]` on a free local port and a SQLite database, agent tokens
made in that database as `/agents new` makes them, and the SDK's own `Client` as the agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.web.gateway import GATEWAY_PATH
from tests.ports import free_port
from tests.telegram.harness import Chat, bot_scene

PUBLIC_URL = "https://bot.example.com"
_TLS = httpx2.create_ssl_context()
"""What httpx trusts by default, read once: each client would read the bundle again (about 30 ms of CPU)."""


@asynccontextmanager
async def gateway_scene(
    tmp_path: Path, gateway: dict[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[tuple[Chat, int, str]]:
    """The bot with `[gateway]` (and the keys of `gateway`) on a free local port and a SQLite file in `tmp_path`;
    (scene, port, database URL). `kwargs` go to `bot_scene` (servers, approvals, a restart's `world`, ...)."""
    port = free_port()
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL}
    table = {"enabled": True, **(gateway or {})}
    async with bot_scene(web=web, storage=url, gateway=table, **kwargs) as s:
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
async def agent(
    port: int, token: str, mode: Literal["auto", "legacy"] = "auto", statuses: list[int] | None = None
) -> AsyncIterator[Client]:
    """The SDK's `Client` as an agent presenting `token` to the local endpoint (as a proxy forwards the public one);
    the HTTP status of every answer it gets goes to `statuses`."""

    async def seen(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30.0, read=120.0),
            trust_env=False,
            verify=_TLS,
            event_hooks={"response": [seen]},
        ) as http,
        Client(
            streamable_http_client(f"http://127.0.0.1:{port}{GATEWAY_PATH}", http_client=http),
            mode=mode,
            read_timeout_seconds=None,
        ) as client,
    ):
        yield client


def agent_mode(protocol: str) -> Literal["auto", "legacy"]:
    """The agent speaks the same era as the scene's servers: 2025-11-25 (`legacy`) or 2026-07-28 (`auto`)."""
    return "legacy" if protocol == "legacy" else "auto"


def text_of(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text

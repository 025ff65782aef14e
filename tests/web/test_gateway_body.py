"""`/mcp` bounds a request's body, end to end on the bot's web endpoint: over `MAX_BODY` by Content-Length or
while a chunked body arrives it is refused with 413 before the transport parses it (the SDK's body limit, set
to the bot's `MAX_BODY`); a stranger gets 401 before a byte of the body is read; a body of exactly `MAX_BODY`
and an agent's ordinary calls still pass."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from anyio.abc import SocketStream
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bot.web import REQUEST_TIMEOUT_S
from bot.web.gateway import MAX_BODY
from tests.telegram.harness import ALICE_ID
from tests.web.agents import gateway_scene, make_token

pytestmark = pytest.mark.anyio

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


async def post(port: int, token: str, content: bytes | AsyncIterator[bytes]) -> httpx.Response:
    """A raw POST to `/mcp` as an agent with `token`."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        return await http.post(f"http://127.0.0.1:{port}/mcp", content=content, headers=headers)


async def head_only(port: int, authorization: str) -> int:
    """The status code of the answer to a POST that announces a body over `MAX_BODY` and never sends it."""
    stream: SocketStream = await anyio.connect_tcp("127.0.0.1", port)
    try:
        await stream.send(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json, text/event-stream\r\n"
            + authorization.encode()
            + f"Content-Length: {MAX_BODY * 4}\r\n\r\n".encode()
        )
        received = b""
        with anyio.fail_after(REQUEST_TIMEOUT_S / 2):  # well before the server would give up on the body
            while b"\r\n" not in received:
                received += await stream.receive()
        return int(received.split(b" ", 2)[1])
    finally:
        await stream.aclose()


async def test_bodies_over_the_cap_are_refused_before_the_transport_and_strangers_before_the_body(
    tmp_path: Path,
) -> None:
    """A Content-Length over the cap: 413 with nothing of the body sent (so nothing read). A chunked body (no
    length) that grows past it: 413 (a body the transport parsed would get 200 or 400). Without a token: 401, also with nothing of the body sent. A padded `initialize` of exactly the cap is
    taken; an agent's ordinary calls work."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "ci-bot")
        assert await head_only(port, f"Authorization: Bearer {token}\r\n") == 413
        assert await head_only(port, "") == 401
        assert await head_only(port, "Authorization: Bearer tnx_forged\r\n") == 401

        sent = 0

        async def chunks() -> AsyncIterator[bytes]:
            nonlocal sent
            yield json.dumps(INITIALIZE).encode()
            for _ in range(2 * MAX_BODY // 65536):
                sent += 65536
                yield b" " * 65536

        refused = await post(port, token, chunks())
        assert refused.status_code == 413, refused.text

        padded = json.dumps(INITIALIZE).encode()
        exactly = padded + b" " * (MAX_BODY - len(padded))
        assert len(exactly) == MAX_BODY
        taken = await post(port, token, exactly)
        assert taken.status_code == 200, taken.text
        assert "toolnexus-bot" in taken.text  # the gateway's own serverInfo: the transport read it all

        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30, trust_env=False) as http,
            Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
        ):
            result = await client.call_tool("notify_person", {"message": "x" * 2000})
        assert not result.is_error
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "ci-bot" in m.text and "xxxx" in m.text)

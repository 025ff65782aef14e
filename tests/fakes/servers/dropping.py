"""An MCP server over streamable HTTP whose connection breaks as a person's answer arrives.

I/O: a loopback TCP proxy in front of `serve_http`. The bytes the client sends are passed on
until a request carries an answer (an elicitation result: `"action"` appears in no other message the bot sends
these tools); then that HTTP connection is reset at once, the request never reaching the server, as an
overloaded server or a load balancer does. Only the first `times` answers: one sent again goes through.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.abc

from tests.fakes.servers.http import serve_http

__all__ = ["Dropping", "serve_dropping"]

ANSWER_MARK: Final = b'"action"'


@dataclass(slots=True)
class Dropping:
    """The proxy's address and what it did: how many connections it reset on an answer."""

    url: str
    times: int
    resets: int = 0
    reset: anyio.Event = field(default_factory=anyio.Event)
    """Set once the first answer's connection was reset."""


@asynccontextmanager
async def serve_dropping(build: Callable[[], Any], *, times: int = 1) -> AsyncIterator[Dropping]:
    """Serve `build()` over HTTP behind a proxy that resets the first `times` connections carrying an answer."""
    async with serve_http(build) as upstream, drop_answers(upstream, times=times) as dropping:
        yield dropping


@asynccontextmanager
async def drop_answers(upstream: str, *, times: int = 1) -> AsyncIterator[Dropping]:
    """A proxy to the streamable HTTP endpoint `upstream` (http://127.0.0.1:PORT/mcp) that resets the first
    `times` connections carrying an answer."""
    port = int(upstream.rsplit(":", 1)[1].split("/", 1)[0])
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", backlog=4096)
    local = listener.extra(anyio.abc.SocketAttribute.local_port)
    dropping = Dropping(url=f"http://127.0.0.1:{local}/mcp", times=times)

    async def pipe(client: anyio.abc.SocketStream) -> None:
        async with (
            client,
            await anyio.connect_tcp("127.0.0.1", port) as server,
            anyio.create_task_group() as tg,
        ):
            tg.start_soon(_down, server, client, tg.cancel_scope)
            await _up(client, server, dropping)
            tg.cancel_scope.cancel()

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, pipe)
        try:
            yield dropping
        finally:
            tg.cancel_scope.cancel()


async def _up(client: anyio.abc.SocketStream, server: anyio.abc.SocketStream, dropping: Dropping) -> None:
    """Client to server; an answer resets the client's connection instead of going on."""
    tail = b""
    try:
        async for chunk in client:
            if ANSWER_MARK in tail + chunk and dropping.resets < dropping.times:
                dropping.resets += 1
                raw = client.extra(anyio.abc.SocketAttribute.raw_socket)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                await client.aclose()  # linger 0: an RST, which the client reads as a ReadError
                dropping.reset.set()
                return
            tail = chunk[-len(ANSWER_MARK) :]
            await server.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


async def _down(
    server: anyio.abc.SocketStream, client: anyio.abc.SocketStream, scope: anyio.CancelScope
) -> None:
    """Server to client, until either side ends; then the whole pipe ends."""
    try:
        async for chunk in server:
            await client.send(chunk)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass
    scope.cancel()

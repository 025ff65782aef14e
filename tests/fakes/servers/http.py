"""Serve an MCP server over streamable HTTP on a loopback port, inside the test's own event loop."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import uvicorn


@asynccontextmanager
async def serve_http(build: Callable[[], Any]) -> AsyncIterator[str]:
    """Yield the /mcp URL of `build()`'s streamable HTTP app; stop it on exit."""
    server = uvicorn.Server(uvicorn.Config(build().streamable_http_app(), log_level="warning"))
    # Listening before uvicorn starts, so clients can connect at once (no waiting for `server.started`).
    ended = anyio.Event()

    async def run(listener: socket.socket) -> None:
        try:
            await server.serve([listener])
        finally:
            ended.set()

    with socket.create_server(("127.0.0.1", 0)) as listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, listener)
            try:
                yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"
            finally:
                # Shut down in full also when the test failed: cancelled midway, uvicorn leaves the loop unable
                # to close, and the failing test hangs instead of failing.
                server.should_exit = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await ended.wait()

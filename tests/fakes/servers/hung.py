"""Servers that accept a client and never answer: `check` must give up on them within its timeout.

`python -m tests.fakes.servers.hung [PID_FILE]` is a stdio one (reads every line, answers none, writes its pid to
PID_FILE first); `hung_http()` is an HTTP one on a loopback port inside the test's own event loop. Does I/O.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import SocketStream

__all__ = ["hung_http"]


@asynccontextmanager
async def hung_http() -> AsyncIterator[str]:
    """Yield an http://127.0.0.1:<port>/mcp URL whose server reads requests and never answers them."""

    async def swallow(stream: SocketStream) -> None:
        async with stream:
            async for _ in stream:
                pass

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, swallow)
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        yield f"http://127.0.0.1:{port}/mcp"
        tg.cancel_scope.cancel()


def main() -> None:
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="ascii") as out:  # a FIFO the test reads
            out.write(str(os.getpid()))
    for _ in sys.stdin:
        pass


if __name__ == "__main__":
    main()

"""Serve a test server over stdio, with a tripwire that ends the process once a question reached the client.

I/O: reads stdin and writes stdout of the current process; used only by the `__main__` of test servers.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

__all__ = ["DIED_EXIT_CODE", "Rewrite", "Tripwire", "serve_stdio"]

DIED_EXIT_CODE: Final = 17


@dataclass(slots=True)
class Tripwire:
    """Armed by a tool; then the process exits right after the next elicitation is flushed to stdout."""

    armed: bool = False

    def fires_on(self, line: str) -> bool:
        if not self.armed:
            return False
        message: dict[str, Any] = json.loads(line)
        result = message.get("result")
        # 2025-11-25 asks with a request; 2026-07-28 answers the tool call with an input_required result.
        return message.get("method") == "elicitation/create" or (
            isinstance(result, dict) and result.get("resultType") == "input_required"
        )


Rewrite = Callable[[dict[str, Any]], None]
"""Changes one outgoing JSON-RPC message in place before it is written (a server that misbehaves on the wire)."""


class _TripwireStdout:
    """The two methods of `anyio.AsyncFile[str]` that `stdio_server` writes through, plus the tripwire."""

    def __init__(
        self, inner: anyio.AsyncFile[str], tripwire: Tripwire, rewrite: Rewrite | None = None
    ) -> None:
        self._inner = inner
        self._tripwire = tripwire
        self._rewrite = rewrite
        self._last_line = ""

    async def write(self, text: str) -> int:
        if self._rewrite is not None and text.strip():
            message = json.loads(text)
            self._rewrite(message)
            text = json.dumps(message) + "\n"
        self._last_line = text
        return await self._inner.write(text)

    async def flush(self) -> None:
        await self._inner.flush()
        if self._tripwire.fires_on(self._last_line):
            # Deterministic "server crashed mid-question": the request is in the pipe, nothing follows it.
            os._exit(DIED_EXIT_CODE)


async def serve_stdio(server: MCPServer[Any], tripwire: Tripwire, rewrite: Rewrite | None = None) -> None:
    """`server.run("stdio")`, but with stdout wrapped by the tripwire (each message passed through `rewrite` first)."""
    sys.stdout.reconfigure(encoding="utf-8")  # type: ignore[union-attr]  # the wire is UTF-8 whatever the locale
    stdout = _TripwireStdout(anyio.wrap_file(sys.stdout), tripwire, rewrite)
    async with stdio_server(stdout=stdout) as (read_stream, write_stream):  # type: ignore[arg-type]
        # MCPServer has no public way to run on given streams (the SDK's in-memory transport does this too).
        lowlevel = server._lowlevel_server  # pyright: ignore[reportPrivateUsage]
        await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())

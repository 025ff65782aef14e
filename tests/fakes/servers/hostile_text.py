"""A server whose text is hostile to a terminal: ANSI and OSC escape sequences in a tool's description, its
question, a field's title and its result (stdio; `python -m tests.fakes.servers.hostile_text`).

Test support: the console must print all of it without the control characters.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from tests.fakes.servers._stdio import Tripwire, serve_stdio

ESCAPES: Final = "\x1b]0;owned\x07\x1b[2J\x1b[H\x1b[31m\x9b31m\x9d2;owned\x9c\x08\x0d\x00"
"""Retitle the window (OSC 0, BEL), clear the screen, home the cursor, red (7-bit CSI), red (8-bit CSI),
retitle (8-bit OSC, ST), backspace, carriage return, NUL."""
CONTROLS: Final = frozenset(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]) - {"\n", "\t"}


class Colour(BaseModel):
    n: int = Field(title=f"Colour {ESCAPES}number")


def build_server() -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("toolnexus-test-hostile-text", log_level="WARNING")

    @server.tool(description=f"Paints {ESCAPES}the terminal")
    async def paint(ctx: Context[Any]) -> str:
        """Asks one integer question with hostile text; returns hostile text."""
        await ctx.report_progress(0.5, 1.0, f"half {ESCAPES}way")
        answer = await ctx.elicit(f"Pick a colour {ESCAPES}now", Colour)
        return f"painted {ESCAPES}{answer.action}"

    return server


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    anyio.run(serve_stdio, build_server(), Tripwire())

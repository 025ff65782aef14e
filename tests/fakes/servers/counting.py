"""A stdio MCP server with one slow tool that reports progress each step and says when it is cancelled.

`python -m tests.fakes.servers.counting HEARD_FILE`: when a call of `count` is cancelled by the client, the server
writes `cancelled at step N of M` to HEARD_FILE, so a test can see that the server heard it. Does I/O.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer

__all__ = ["build_server"]


def build_server(heard: Path) -> MCPServer[object]:
    server: MCPServer[object] = MCPServer("counting", log_level="WARNING")

    @server.tool()
    async def count(ctx: Context[object], steps: int = 100, delay_s: float = 0.05) -> str:
        """Counts to `steps`, reporting progress after each step."""
        step = 0
        try:
            for step in range(1, steps + 1):
                await anyio.sleep(delay_s)  # stands in for work
                await ctx.report_progress(step, steps, f"step {step}")
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.Path(heard).write_text(f"cancelled at step {step} of {steps}")
            raise
        return f"counted to {steps}"

    return server


if __name__ == "__main__":
    build_server(Path(sys.argv[1])).run("stdio")

"""A test MCP server that records every connection made to it and every tool call it gets.

In-process only: `Recorder().build` is the server factory a test hands the harness (called once per connection).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["Recorder"]


@dataclass
class Recorder:
    """What the servers built by `build` have seen: connections opened, tool calls (name, arguments)."""

    connections: int = 0
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def build(self) -> MCPServer[Any]:
        self.connections += 1
        server: MCPServer[Any] = MCPServer("toolnexus-test-recorder", log_level="WARNING")

        @server.tool()
        def ping(text: str = "") -> str:
            """Answer pong (and record the call)."""
            self.calls.append(("ping", {"text": text}))
            return f"pong {text}"

        return server

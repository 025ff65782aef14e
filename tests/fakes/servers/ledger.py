"""A test MCP server whose tool calls are written down: in memory (in-process) or one JSON line each in a file.

`python -m tests.fakes.servers.ledger LEDGER_FILE` serves it over stdio (a bot killed and started again reaches a
new process of it; the file is what both saw). Tools: `deploy(service, version)` and `rollback()` (gated in
the approval tests), `status()` (not gated). Does I/O (the file).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

__all__ = ["Ledger"]


@dataclass
class Ledger:
    """The calls the servers built by `build` received, as (tool, arguments); also appended to `path`."""

    path: Path | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def _note(self, tool: str, arguments: dict[str, Any]) -> None:
        self.calls.append((tool, arguments))
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as file:
                file.write(json.dumps({"tool": tool, "arguments": arguments}) + "\n")

    def build(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer("toolnexus-test-ledger", log_level="WARNING")

        @server.tool()
        def deploy(service: str, version: str) -> str:
            """Deploy `service` at `version` (and write it down)."""
            self._note("deploy", {"service": service, "version": version})
            return f"deployed {service} {version}"

        @server.tool()
        def rollback() -> str:
            """Roll back (and write it down)."""
            self._note("rollback", {})
            return "rolled back"

        @server.tool()
        def status() -> str:
            """Say all is well (and write it down)."""
            self._note("status", {})
            return "all green"

        return server


if __name__ == "__main__":
    Ledger(Path(sys.argv[1])).build().run("stdio")

"""A stdio MCP server that exits on purpose, saying why on stderr, as a misconfigured or crashing server does.

`python -m tests.fakes.servers.exits start` writes `BAD_CONFIG` (and, after it, the value of `SECRET_VAR` when
set) to stderr and exits with status 3 before answering anything. `at-list` answers `initialize` (2025-11-25),
then writes `NO_TOOLS` to stderr and exits with status 4 when asked for its tools. Without an argument it serves
the tool `die`, which writes `DYING` to stderr and exits with status 5 in the middle of its call. Does I/O.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Final

from mcp.server.mcpserver import MCPServer

__all__ = ["BAD_CONFIG", "DYING", "NO_TOOLS", "SECRET_VAR"]

BAD_CONFIG: Final = "boom: bad config"
DYING: Final = "dying: lost the database"
NO_TOOLS: Final = "fatal: the tool registry is unreadable"
SECRET_VAR: Final = "EXITS_API_TOKEN"
"""An environment variable whose value the server echoes on stderr before it exits (a leak to be redacted)."""


def build_server() -> MCPServer:
    server = MCPServer("exits")

    @server.tool()
    def die() -> str:
        """Exit with status 5 mid-call."""
        print(DYING, file=sys.stderr, flush=True)
        os._exit(5)

    return server


def _exit_at_list() -> None:
    """Just enough JSON-RPC by hand: a session opens, and the process exits at its first `tools/list`."""
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        if message.get("method") == "tools/list":
            print(NO_TOOLS, file=sys.stderr, flush=True)
            sys.exit(4)
        reply: dict[str, Any]
        if message.get("method") == "initialize":
            reply = {
                "result": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "exits", "version": "1"},
                }
            }
        else:
            reply = {"error": {"code": -32601, "message": "Method not found"}}
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], **reply}), flush=True)


def main() -> None:
    if sys.argv[1:] == ["at-list"]:
        _exit_at_list()
        return
    if sys.argv[1:] == ["start"]:
        print("starting the exits server", file=sys.stderr)
        print(BAD_CONFIG, file=sys.stderr, flush=True)
        secret = os.environ.get(SECRET_VAR)
        if secret:
            print(f"token tried: {secret}", file=sys.stderr, flush=True)
        sys.exit(3)
    build_server().run("stdio")


if __name__ == "__main__":
    main()

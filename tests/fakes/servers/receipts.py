"""A test MCP server that runs a call only with a valid approval receipt (`bot.receipts.verify`), the way the
README's example server does. In-process only: `Guarded(public_key).build` is the server factory.

Tools: `deploy(service, version)` (refused without a receipt that holds) and `status()` (no receipt asked).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from bot.receipts import BadReceipt, Nonces, Receipt, verify

__all__ = ["Guarded"]


@dataclass
class Guarded:
    """What the servers built by `build` ran (tool, arguments, the receipt) and refused (the reason), and the
    `_meta` of every request (so a test can replay one)."""

    public_key: str
    name: str = "prod"
    """The bot's name for this server (the receipt's hash covers it)."""
    nonces: Nonces = field(default_factory=Nonces)
    ran: list[tuple[str, dict[str, Any], Receipt]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    metas: list[dict[str, Any]] = field(default_factory=list)

    def build(self) -> MCPServer[Any]:
        server: MCPServer[Any] = MCPServer("toolnexus-test-guarded", log_level="WARNING")

        @server.tool()
        def deploy(service: str, version: str, ctx: Context) -> str:
            """Deploy `service` at `version`: only with a valid approval receipt."""
            request = ctx.request_context
            meta = dict(request.meta or {})
            self.metas.append(meta)
            arguments = dict((request.params or {}).get("arguments") or {})
            try:
                receipt = verify(
                    meta,
                    public_key=self.public_key,
                    server=self.name,
                    tool="deploy",
                    arguments=arguments,
                    nonces=self.nonces,
                )
            except BadReceipt as exc:
                self.refused.append(exc.reason)
                raise ToolError(f"refused: {exc.reason}") from None
            self.ran.append(("deploy", arguments, receipt))
            approvers = ", ".join(a.name for a in receipt.approvers)
            return f"deployed {service} {version} (approved by {approvers})"

        @server.tool()
        def status() -> str:
            """Say all is well."""
            return "all green"

        return server

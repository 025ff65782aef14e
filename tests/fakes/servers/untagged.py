"""A 2026-07-28 server that leaves `resultType` out of its complete tool results, as the spec allows.

I/O: an MCP server over stdio only (`python -m tests.fakes.servers.untagged`): the SDK's own server always writes the
tag, so the stdio writer takes it out of each complete `tools/call` result (the spec: an absent `resultType`
means "complete"). `input_required` results and everything else are left as the SDK wrote them.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import AcceptedElicitation, Elicit, ElicitationResult, MCPServer, Resolve
from pydantic import BaseModel, Field

from tests.fakes.servers._stdio import Tripwire, serve_stdio

__all__ = ["build_server", "untag"]


class GoOn(BaseModel):
    go: bool = Field(title="Go on?")


async def ask_go_on() -> Elicit[GoOn]:
    return Elicit("Go on?", GoOn)


def build_server() -> MCPServer[Any]:
    server = MCPServer("toolnexus-test-untagged", version="1.0.0", log_level="WARNING")

    @server.tool()
    async def greet(name: str) -> str:
        """Answers at once."""
        return f"Hello {name}"

    @server.tool()
    async def ask_then_greet(
        name: str, answer: Annotated[ElicitationResult[GoOn], Resolve(ask_go_on)]
    ) -> str:
        """Asks one question (an input_required round), then answers."""
        if isinstance(answer, AcceptedElicitation):
            return f"Hello {name}, go on: {answer.data.go}"
        return f"{name} chose {answer.action}"

    return server


def untag(message: dict[str, Any]) -> None:
    """Drop `resultType` from a complete tool result (one with `content`)."""
    result = message.get("result")
    if isinstance(result, dict) and "content" in result and result.get("resultType") == "complete":
        del result["resultType"]


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    anyio.run(serve_stdio, build_server(), Tripwire(), untag)

"""A streamable HTTP MCP server whose 2026-07-28 rounds survive a restart of the client. Does I/O.

Run as its own process (`python -m tests.fakes.servers.durable --fd N --log PATH`) on a listening socket the test
made and passed in (clients may connect at once). `requestState` is sealed with a key from the environment
(`DURABLE_STATE_KEY`), as a third-party server that wants its rounds to outlive a client (or itself) would. Each
answer the server receives is appended to the log as one JSON line, so a test sees what reached the server.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
from typing import Annotated, Literal, TypeVar

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import AcceptedElicitation, Context, Elicit, ElicitationResult, MCPServer, Resolve
from mcp.server.request_state import RequestStateSecurity
from pydantic import BaseModel, Field

__all__ = ["build_server", "main"]

M = TypeVar("M", bound=BaseModel)


class Confirmation(BaseModel):
    sure: bool = Field(title="Sure?")


class Booking(BaseModel):
    size: Literal["small", "large"] = Field(title="Table size")
    guests: int = Field(ge=1, le=12, title="Guests")
    name: str = Field(title="Name")


async def ask_confirmation(action: str) -> Elicit[Confirmation]:
    return Elicit(f"Really {action}?", Confirmation)


async def ask_booking(restaurant: str) -> Elicit[Booking]:
    return Elicit(f"Book a table at {restaurant}", Booking)


def build_server(log: str, key: str) -> MCPServer:
    """The server; every answer it receives is appended to `log`."""
    server = MCPServer(
        "toolnexus-test-durable",
        version="1.0.0",
        log_level="WARNING",
        request_state_security=RequestStateSecurity(keys=[key]),
    )

    def write(entry: dict[str, object]) -> None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def received(tool: str, answer: ElicitationResult[M]) -> None:
        data = answer.data.model_dump() if isinstance(answer, AcceptedElicitation) else None
        write({"tool": tool, "action": answer.action, "data": data})

    @server.tool()
    async def confirm(
        action: str, answer: Annotated[ElicitationResult[Confirmation], Resolve(ask_confirmation)]
    ) -> str:
        """One yes/no question."""
        received("confirm", answer)
        if isinstance(answer, AcceptedElicitation):
            return f"{action}: {'done' if answer.data.sure else 'not done'}"
        return f"{action}: {answer.action}"

    @server.tool()
    async def book(
        restaurant: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]
    ) -> str:
        """A three-field form."""
        received("book", booking)
        if isinstance(booking, AcceptedElicitation):
            b = booking.data
            return f"Booked a {b.size} table for {b.guests} at {restaurant} for {b.name}"
        return f"Booking {booking.action}"

    @server.tool()
    async def stamp(n: int) -> str:
        """A plain call (no question), written down, so a test counts how often each call reached the server."""
        write({"tool": "stamp", "action": "call", "data": {"n": n}})
        return f"stamp {n}"

    @server.tool()
    async def pair(ctx: Context) -> str | types.InputRequiredResult:
        """Two yes/no questions in one round (both cards out at once); returns both answers."""
        answers = ctx.input_responses or {}
        if not answers:
            schema = {
                "type": "object",
                "properties": {"ok": {"type": "boolean", "title": "OK?"}},
                "required": ["ok"],
            }
            asks: types.InputRequests = {
                key: types.ElicitRequest.model_validate(
                    {
                        "method": "elicitation/create",
                        "params": {"mode": "form", "message": f"Pair: {key}?", "requestedSchema": schema},
                    }
                )
                for key in ("left", "right")
            }
            return types.InputRequiredResult(input_requests=asks, request_state="pair")
        got = {}
        for key in ("left", "right"):
            answer = answers.get(key)
            got[key] = answer.content if isinstance(answer, types.ElicitResult) else None
        write({"tool": "pair", "action": "accept", "data": got})
        return f"left={got['left']} right={got['right']}"

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.servers.durable")
    parser.add_argument("--fd", type=int, required=True, help="a listening TCP socket passed in")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    server = build_server(args.log, os.environ["DURABLE_STATE_KEY"])
    listener = socket.socket(fileno=args.fd)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [listener])


if __name__ == "__main__":
    main()

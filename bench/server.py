"""The benchmark's MCP server: one question per tool call, of the three kinds the bench measures. Does I/O.

Every answer it receives is appended to a JSON-lines log (`--log PATH`, flushed per line) with who asked
(`tag`), the MCP session, when the question left (`asked_at`, `time.monotonic()`, comparable across
processes on Linux) and what came back, so the bench can check each person's answer reached their call.
`python -m bench.server --log PATH` serves stdio; `--http PORT` serves streamable HTTP at /mcp.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
import uuid
from typing import Any, Final, Literal

import anyio
import mcp_types as types
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least

__all__ = ["CHOICES", "FORM3_SCHEMA", "FORM6_SCHEMA", "PICK_SCHEMA", "build_server"]

CHOICES: Final = ("red", "green", "blue")
PICK_SCHEMA: Final = {
    "type": "object",
    "properties": {"colour": {"type": "string", "title": "Colour", "enum": list(CHOICES)}},
    "required": ["colour"],
}
FORM3_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "size": {"type": "string", "title": "Size", "enum": ["small", "medium", "large"]},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "outdoor": {"type": "boolean", "title": "Outdoor"},
    },
    "required": ["size", "guests", "outdoor"],
}
FORM6_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name"},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "day": {"type": "string", "format": "date", "title": "Day"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "outdoor": {"type": "boolean", "title": "Outdoor"},
        "size": {"type": "string", "title": "Size", "enum": ["small", "medium", "large"]},
    },
    "required": ["name", "email", "day", "guests", "outdoor", "size"],
}
"""Six fields, a date among them: a form that gets the Mini App's Open form button."""
CONSENT_URL: Final = "https://example.com/bench/authorize"
_KEY: Final = "q"
_numbers = itertools.count(1)


class _RawElicitRequest(types.Request[Any, Literal["elicitation/create"]]):
    """`elicitation/create` with the params exactly as given."""

    method: Literal["elicitation/create"] = "elicitation/create"
    params: dict[str, Any]


class _Log:
    """Appends one JSON line per answered question; `asked` remembers 2026 questions between rounds."""

    def __init__(self, path: str | None) -> None:
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 - lives as long as the server
        self.asked: dict[str, float] = {}

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()


def _modern(ctx: Context[Any]) -> bool:
    return ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, "2026-07-28")


def build_server(log_path: str | None = None) -> MCPServer[Any]:
    """A fresh server logging answers to `log_path` (None: no log)."""
    log = _Log(log_path)
    server = MCPServer("toolnexus-bench", version="1.0.0", log_level="WARNING")

    async def ask(
        ctx: Context[Any], tool: str, tag: str, params: dict[str, Any]
    ) -> str | types.InputRequiredResult:
        session = (ctx.headers or {}).get("mcp-session-id") or ""
        if _modern(ctx):
            # 2026-07-28: the question travels in the result; the retry carries the answer (and our round id).
            answer = (ctx.input_responses or {}).get(_KEY)
            if not isinstance(answer, types.ElicitResult):
                round_id = f"{tag}/{next(_numbers)}"
                log.asked[round_id] = time.monotonic()
                question = types.ElicitRequest.model_validate(
                    {"method": "elicitation/create", "params": params}
                )
                return types.InputRequiredResult(input_requests={_KEY: question}, request_state=round_id)
            asked_at = log.asked.pop(ctx.request_state or "", float("nan"))
        else:
            asked_at = time.monotonic()
            mcp_session: ServerSession = ctx.request_context.session  # `ctx.session` is unannotated
            answer = await mcp_session.send_request(
                _RawElicitRequest(params=params),  # type: ignore[arg-type]  # any model with method+params
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
            )
        record = {
            "tool": tool,
            "tag": tag,
            "session": session,
            "asked_at": asked_at,
            "answered_at": time.monotonic(),
            "action": answer.action,
            "content": answer.content,
        }
        log.write(record)
        if tool == "consent" and answer.action == "accept" and not _modern(ctx) and "elicitationId" in params:
            await ctx.session.send_elicit_complete(params["elicitationId"], related_request_id=ctx.request_id)
        return json.dumps({"tag": tag, "action": answer.action, "content": answer.content})

    @server.tool()
    async def hello(tag: str = "") -> str:
        """No question: opens the caller's session (the bench's baseline)."""
        return f"hello {tag}"

    @server.tool()
    async def pick(ctx: Context[Any], tag: str = "") -> str | types.InputRequiredResult:
        """One single-choice question (a colour)."""
        params = {"mode": "form", "message": f"Pick a colour for {tag}", "requestedSchema": PICK_SCHEMA}
        return await ask(ctx, "pick", tag, params)

    @server.tool()
    async def form3(ctx: Context[Any], tag: str = "") -> str | types.InputRequiredResult:
        """A three-field form: a choice, an integer (typed), a yes/no."""
        params = {"mode": "form", "message": f"Book a table for {tag}", "requestedSchema": FORM3_SCHEMA}
        return await ask(ctx, "form3", tag, params)

    @server.tool()
    async def form6(ctx: Context[Any], tag: str = "") -> str | types.InputRequiredResult:
        """A six-field form (four typed, a yes/no, a choice): answered in the chat or on the Mini App page."""
        params = {"mode": "form", "message": f"Book a room for {tag}", "requestedSchema": FORM6_SCHEMA}
        return await ask(ctx, "form6", tag, params)

    @server.tool()
    async def consent(ctx: Context[Any], tag: str = "") -> str | types.InputRequiredResult:
        """URL mode: consent to open a link (completion sent after an accept, 2025-11-25)."""
        params: dict[str, Any] = {"mode": "url", "message": f"Sign in for {tag}", "url": CONSENT_URL}
        if not _modern(ctx):
            params["elicitationId"] = uuid.uuid4().hex
        return await ask(ctx, "consent", tag, params)

    return server


async def _serve_http(server: MCPServer[Any], port: int) -> None:
    config = uvicorn.Config(
        server.streamable_http_app(),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        backlog=4096,
        limit_concurrency=None,
    )
    await uvicorn.Server(config).serve()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.server")
    parser.add_argument("--log", help="append one JSON line per answer here")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP at /mcp on this port")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = build_server(args.log)
    if args.http is None:
        server.run("stdio")
    else:
        anyio.run(_serve_http, server, args.http)


if __name__ == "__main__":
    main()

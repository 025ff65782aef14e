"""A test MCP server that asks whatever a test wants, in both protocol eras, and misbehaves on request.

I/O: an MCP server; `build_server()` for in-process use, `python -m tests.fakes.servers.elicit` for stdio.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp import MCPError, UrlElicitationRequiredError
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.session import ServerSession
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import is_version_at_least

from tests.fakes.servers._stdio import Tripwire, serve_stdio

__all__ = ["AUTH_URL", "DYING_MESSAGE", "SERVER_GAVE_UP", "build_server"]

AUTH_URL: Final = "https://example.com/test/authorize"
SERVER_GAVE_UP: Final = "server gave up"
DYING_MESSAGE: Final = "This server will be gone before you answer"
_KEY: Final = "question"
"""The input-request key of every 2026-07-28 question this server asks (one per round)."""

_connection_numbers = itertools.count(1)


@dataclass(slots=True)
class _State:
    """Per connection over stdio and in-process; one for the whole server over HTTP (see `_caller`)."""

    connection: str = field(default_factory=lambda: f"c{next(_connection_numbers)}")
    pending_auth: dict[str, str] = field(default_factory=dict)
    authorized: set[str] = field(default_factory=set)


@contextlib.asynccontextmanager
async def _lifespan(server: MCPServer[_State]) -> AsyncIterator[_State]:
    yield _State()


def _state(ctx: Context[_State]) -> _State:
    return ctx.request_context.lifespan_context


def _caller(ctx: Context[_State]) -> str:
    """The HTTP session id (2025-11-25 over HTTP), else this connection's own id."""
    return (ctx.headers or {}).get("mcp-session-id") or _state(ctx).connection


def _session(ctx: Context[_State]) -> ServerSession:
    """`ctx.session`, typed (the SDK's property has no annotation)."""
    return ctx.request_context.session


def _modern(ctx: Context[_State]) -> bool:
    return ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, "2026-07-28")


def _related(ctx: Context[_State]) -> ServerMessageMetadata:
    """Send on the tool call's own stream (it matters over streamable HTTP)."""
    return ServerMessageMetadata(related_request_id=ctx.request_id)


class _RawElicitRequest(types.Request[Any, Literal["elicitation/create"]]):
    """`elicitation/create` with params sent exactly as given: no defaults filled in, nothing dropped."""

    method: Literal["elicitation/create"] = "elicitation/create"
    params: dict[str, Any]


async def _elicit(
    ctx: Context[_State], params: dict[str, Any]
) -> types.ElicitResult | types.InputRequiredResult:
    """Ask with wire-shaped `params` in the client's era.

    2025-11-25: send them verbatim and wait for the answer. 2026-07-28: return the question (first round) or
    the answer the retry carries; there the params pass through the SDK's models, which fill in `mode` and
    drop what that revision lacks (such as `elicitationId`).
    """
    if not _modern(ctx):
        return await _session(ctx).send_request(
            _RawElicitRequest(params=params),  # type: ignore[arg-type]  # any model with method+params will do
            types.ElicitResult,
            metadata=_related(ctx),
        )
    answer = (ctx.input_responses or {}).get(_KEY)
    if isinstance(answer, types.ElicitResult):
        return answer
    question = types.ElicitRequest.model_validate({"method": "elicitation/create", "params": params})
    return types.InputRequiredResult(input_requests={_KEY: question})


def _outcome(answer: types.ElicitResult) -> str:
    return json.dumps({"action": answer.action, "content": answer.content})


async def ask_form(
    ctx: Context[_State], schema_json: str, message: str = "Please fill in the form"
) -> str | types.InputRequiredResult:
    """Form elicitation with exactly this requestedSchema, supported or not; returns the answer (JSON)."""
    params = {"mode": "form", "message": message, "requestedSchema": json.loads(schema_json)}
    answer = await _elicit(ctx, params)
    return answer if isinstance(answer, types.InputRequiredResult) else _outcome(answer)


async def ask_raw(ctx: Context[_State], params_json: str) -> str | types.InputRequiredResult:
    """`elicitation/create` with these params (message, mode, url, requestedSchema...); returns JSON."""
    answer = await _elicit(ctx, json.loads(params_json))
    return answer if isinstance(answer, types.InputRequiredResult) else _outcome(answer)


async def ask_url(
    ctx: Context[_State],
    url: str = "https://example.com/test/login",
    message: str = "Please sign in",
    elicitation_id: str = "",
    complete: bool = True,
) -> str | types.InputRequiredResult:
    """URL elicitation; after an accept (and if `complete`) sends its completion (2025-11-25 only)."""
    elicitation_id = elicitation_id or uuid.uuid4().hex
    params = {"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id}
    answer = await _elicit(ctx, params)
    if isinstance(answer, types.InputRequiredResult):
        return answer
    if _modern(ctx):
        return json.dumps({"action": answer.action})
    if answer.action == "accept" and complete:
        await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
    return json.dumps({"action": answer.action, "elicitationId": elicitation_id})


async def needs_auth(ctx: Context[_State], url: str = "") -> str:
    """Fails with -32042 on a caller's first call; the next call counts as "authorized" and succeeds.

    That retry first sends notifications/elicitation/complete for the link (2025-11-25 only). The link is
    `url` when given, else one to AUTH_URL.
    """
    state, caller = _state(ctx), _caller(ctx)
    if caller not in state.authorized:
        elicitation_id = state.pending_auth.pop(caller, None)
        if elicitation_id is None:
            elicitation_id = f"auth-{uuid.uuid4().hex[:8]}"
            state.pending_auth[caller] = elicitation_id
            link = types.ElicitRequestURLParams(
                message="Authorize the test server",
                url=url or f"{AUTH_URL}?state={elicitation_id}",
                elicitation_id=elicitation_id,
            )
            raise UrlElicitationRequiredError([link])
        state.authorized.add(caller)
        if not _modern(ctx):
            await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
    return "authorized"


async def server_cancels(ctx: Context[_State], timeout_s: float = 0.5) -> str:
    """2025-11-25 only: asks "Still there?", gives up after `timeout_s` and withdraws the question."""
    if _modern(ctx):
        raise ToolError("Only a 2025-11-25 server can withdraw a question (it sent it as a request)")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "Still there?"}}}
    params = types.ElicitRequestFormParams(message="Still there?", requested_schema=schema)
    try:
        answer = await _session(ctx).send_request(
            types.ElicitRequest(params=params),
            types.ElicitResult,
            request_read_timeout_seconds=timeout_s,
            metadata=_related(ctx),
        )
    except MCPError as exc:
        if exc.code != types.REQUEST_TIMEOUT:
            raise
        return SERVER_GAVE_UP  # the SDK has sent notifications/cancelled for the question
    return f"answered: {answer.action}"


async def ask_then_block(ctx: Context[_State]) -> str | types.InputRequiredResult:
    """Asks a yes/no question, then (whatever the answer) blocks until the call is cancelled."""
    params = {
        "mode": "form",
        "message": "Go on?",
        "requestedSchema": {
            "type": "object",
            "properties": {"go": {"type": "boolean"}},
            "required": ["go"],
        },
    }
    answer = await _elicit(ctx, params)
    if isinstance(answer, types.InputRequiredResult):
        return answer
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def never_answers() -> str:
    """Blocks until the call is cancelled."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def ask_many(ctx: Context[_State], n: int = 6) -> str | types.InputRequiredResult:
    """Asks `n` yes/no questions at once (2025-11-25: `n` concurrent requests; 2026-07-28: one round of
    `n`); returns what each one got, in order (JSON list of actions, or "error <code>"). In 2025-11-25 each
    reply is also reported as it comes, as progress (message: what that question got)."""

    def question(i: int) -> dict[str, Any]:
        schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        return {"mode": "form", "message": f"Question {i + 1}", "requestedSchema": schema}

    if _modern(ctx):
        responses = ctx.input_responses or {}
        if not responses:
            return types.InputRequiredResult(
                input_requests={
                    f"q{i}": types.ElicitRequest.model_validate(
                        {"method": "elicitation/create", "params": question(i)}
                    )
                    for i in range(n)
                }
            )
        return json.dumps([getattr(responses.get(f"q{i}"), "action", None) for i in range(n)])
    got: list[str | None] = [None] * n

    async def ask(i: int) -> None:
        try:
            answer = await _session(ctx).send_request(
                _RawElicitRequest(params=question(i)),  # type: ignore[arg-type]  # as in _elicit
                types.ElicitResult,
                metadata=_related(ctx),
            )
            got[i] = answer.action
        except MCPError as exc:
            got[i] = f"error {exc.code}"
        await ctx.report_progress(sum(g is not None for g in got), n, got[i])

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(ask, i)
    return json.dumps(got)


async def flood_questions(ctx: Context[_State]) -> str:
    """2025-11-25 only: asks yes/no questions without end, each as soon as the last was sent, whatever the
    answers (errors included); never returns."""
    if _modern(ctx):
        raise ToolError("Only a 2025-11-25 server can send questions as requests")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}

    async def ask(i: int) -> None:
        with contextlib.suppress(MCPError):
            await _session(ctx).send_request(
                _RawElicitRequest(params={"message": f"Flood {i}", "requestedSchema": schema}),  # type: ignore[arg-type]
                types.ElicitResult,
                metadata=_related(ctx),
            )

    async with anyio.create_task_group() as tg:
        for i in itertools.count(1):
            tg.start_soon(ask, i)
            await anyio.lowlevel.checkpoint()
    raise AssertionError("unreachable")


async def runs_until_cancelled(ctx: Context[_State]) -> str:
    """Reports progress 0 of 1 ("running"), then blocks until the call is cancelled."""
    await ctx.report_progress(0, 1, "running")
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def slow_progress(ctx: Context[_State], n: int = 3, delay_s: float = 0.0) -> str:
    """Reports progress i of n (message "step i/n") n times, then returns "done n"."""
    for step in range(1, n + 1):
        await anyio.sleep(delay_s)
        await ctx.report_progress(step, n, f"step {step}/{n}")
    return f"done {n}"


def _die_during_elicitation(tripwire: Tripwire | None) -> Tool:
    """`die_during_elicitation` of a server with this `tripwire` (the one tool that differs per server)."""

    async def die_during_elicitation(ctx: Context[_State]) -> str | types.InputRequiredResult:
        """Over stdio: asks for a name, and the process exits as soon as the question is flushed."""
        if tripwire is None:
            raise ToolError(
                "die_during_elicitation needs the stdio entry point (python -m tests.fakes.servers.elicit)"
            )
        tripwire.armed = True
        schema = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}}
        answer = await _elicit(ctx, {"mode": "form", "message": DYING_MESSAGE, "requestedSchema": schema})
        if isinstance(answer, types.InputRequiredResult):
            return answer
        raise AssertionError("unreachable: the process ends once the question is sent")

    return Tool.from_function(die_during_elicitation)


async def long_text(chars: int = 10_000, line: int = 60) -> str:
    """Numbered lines of filler adding up to `chars` characters (results longer than one chat message)."""
    lines: list[str] = []
    total = 0
    while total < chars:
        text = f"{len(lines) + 1:05d} " + "x" * max(0, line - 7)
        lines.append(text)
        total += len(text) + 1
    return "\n".join(lines)[:chars]


async def whoami(ctx: Context[_State]) -> str:
    """JSON: pid, connection (per stdio process / in-process client), caller, protocol, client name."""
    client = ctx.session.client_params
    return json.dumps(
        {
            "pid": os.getpid(),
            "connection": _state(ctx).connection,
            "caller": _caller(ctx),
            "protocol": ctx.protocol_version,
            "client": client.client_info.name if client is not None else None,
        }
    )


@functools.cache
def _tools() -> tuple[Tool | None, ...]:
    """The tools in their order, `None` where `die_during_elicitation` goes: described once per process (reading
    each signature into its argument model is most of a server's build), shared by every server, which keeps
    its own lifespan state and request-state key."""
    return tuple(
        None if fn is None else Tool.from_function(fn)
        for fn in (
            ask_form,
            ask_raw,
            ask_url,
            needs_auth,
            server_cancels,
            ask_then_block,
            never_answers,
            ask_many,
            flood_questions,
            runs_until_cancelled,
            slow_progress,
            None,
            long_text,
            whoami,
        )
    )


def build_server(tripwire: Tripwire | None = None) -> MCPServer[_State]:
    """A fresh server; only the stdio entry point passes a `tripwire` (see `die_during_elicitation`)."""
    tools = [_die_during_elicitation(tripwire) if tool is None else tool for tool in _tools()]
    return MCPServer(
        "toolnexus-test-elicit", version="1.0.0", lifespan=_lifespan, log_level="WARNING", tools=tools
    )


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    wire = Tripwire()
    anyio.run(serve_stdio, build_server(wire), wire)

"""The gateway's parts its modules share: its tools' names, who the request being handled comes from, a result as an
agent gets it, an agent's progress notifications, and how a running call hears that its agent went. No I/O of its
own (progress is sent on the agent's request)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import ServerRequestContext
from starlette.requests import Request

from bot.core import Outcome, Progress
from bot.core.agent_calls import Ended
from bot.web.gateway_guard import Caller

__all__ = [
    "ASK_PERSON",
    "GONE_KEY",
    "NOTIFY_PERSON",
    "PERMISSION_PROMPT",
    "SEPARATOR",
    "AgentProgress",
    "Departure",
    "Report",
    "gone_event",
    "handed_back",
    "nowhere",
    "text_result",
    "the_caller",
    "to_agent",
    "token_id",
]

SEPARATOR: Final = "__"
"""Between a server's name and its tool's: `demo__deploy`."""
ASK_PERSON: Final = "ask_person"
NOTIFY_PERSON: Final = "notify_person"
PERMISSION_PROMPT: Final = "permission_prompt"
"""For Claude Code's `--permission-prompt-tool mcp__<name>__permission_prompt` (`<name>` as `claude mcp add` named
the gateway): its input is `tool_name`, `input` and `tool_use_id`; its result's text is the JSON
`{"behavior": "allow", "updatedInput": <input>}` or `{"behavior": "deny", "message": "..."}` (Claude Code's
headless docs, "--permission-prompt-tool"; checked against 2.1.332)."""
GONE_KEY: Final = "toolnexus.gone"
"""The key, in an `/mcp` request's ASGI scope, of the event set when its client disconnects."""


def token_id() -> int:
    return the_caller().token_id


def the_caller() -> Caller:
    access = get_access_token()
    assert access is not None
    return Caller.of(access)


def text_result(
    text: str, *, error: bool = False, structured: dict[str, Any] | None = None
) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=error, structured_content=structured
    )


def handed_back(ended: Ended) -> types.CallToolResult:
    """A handed-over call's end, as its agent gets it."""
    if ended.result is None:
        return text_result(ended.line, error=True)
    return types.CallToolResult.model_validate(ended.result)


def gone_event(ctx: ServerRequestContext[Any]) -> anyio.Event | None:
    """The event set when the HTTP request that carried this call disconnects (None off HTTP)."""
    request = ctx.request
    if not isinstance(request, Request):
        return None
    gone = request.scope.get(GONE_KEY)
    return gone if isinstance(gone, anyio.Event) else None


Report = Callable[[int, str], Awaitable[None]]
"""Sends one progress notification (its rising count, its line) to an agent."""


def to_agent(ctx: ServerRequestContext[Any]) -> Report:
    """Progress for the agent whose request `ctx` handles (the SDK sends it only when the agent asked for it)."""

    async def report(count: int, message: str) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            await ctx.session.report_progress(count, None, message)  # the agent may have gone

    return report


async def nowhere(count: int, message: str) -> None:
    """The progress of a call handed over from another instance: its agent is not connected here."""


class AgentProgress:
    """An agent's progress notifications for one call: the server's progress and a beat while it waits, as one
    rising count (the spec wants each notification's `progress` above the last), through `report`."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._count = 0
        self._lock = anyio.Lock()

    async def _send(self, message: str) -> None:
        async with self._lock:
            self._count += 1
            await self._report(self._count, message)

    async def forward(self, progress: Progress) -> None:
        """The server's progress, passed on."""
        fraction = progress.fraction
        said = progress.message or "working"
        await self._send(said if fraction is None else f"{said} ({fraction:.0%})")

    async def beat(self, every_s: float, waiting: Callable[[], bool]) -> None:
        """A line every `every_s` until cancelled: whether the call waits for its person (`waiting`)."""
        while True:
            await anyio.sleep(every_s)
            await self._send(
                "waiting for the person to answer on their phone" if waiting() else "still running"
            )


@dataclass(eq=False, slots=True)
class Departure:
    """How a running call hears that its agent is gone: `event` is set, `why` says how (AGENT_CANCELLED: it
    cancelled, its connection dropped, or the instance holding its request died; AGENT_REVOKED: its access
    ended)."""

    why: Outcome = Outcome.AGENT_CANCELLED
    event: anyio.Event = field(default_factory=anyio.Event)

    def go(self, why: Outcome) -> None:
        if not self.event.is_set():
            self.why = why
            self.event.set()

"""The MCP side of the bridge as the hosts see it: one `Hub` over the session pool, calls and elicitations.

Async, does I/O. Surfaces call `list_servers`, `list_tools`, `call_tool` and `cancel`; servers' questions
reach the surface only as `mapping.Request`s through the `PromptRegistry`, and answers come back as `Answer`s.
The work is done in `bot.servers.pool` (sessions), `bot.servers.calls` (tool calls, /cancel) and
`bot.servers.elicitation` (the SDK callback, routing questions to their person); `bot.servers.limits` decides
whether a person's call may start at all.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError

from bot.config import Config, ServerConfig
from bot.core import (
    CallStatus,
    Observer,
    Origin,
    Outcome,
    PromptRegistry,
    ServerStatus,
    ToolInfo,
    ToolOutcome,
)
from bot.servers.calls import Calls, ProgressSink
from bot.servers.connections import describe_error
from bot.servers.elicitation import Elicitations
from bot.servers.limits import Limits, Refusal
from bot.servers.pool import Pool, Unavailable
from bot.servers.results import failure

__all__ = ["Hub", "ProgressSink", "Unavailable"]

logger = logging.getLogger(__name__)


class Hub:
    """All MCP sessions of the process. Use as `async with Hub(config, prompts) as hub:`."""

    def __init__(
        self,
        config: Config,
        prompts: PromptRegistry,
        *,
        transport: Callable[[ServerConfig], Any] | None = None,
        clock: Callable[[], float] | None = None,
        observer: Observer | None = None,
        auth: Callable[[ServerConfig, Origin], Any] | None = None,
        signed_in: Callable[[int, str], Awaitable[bool]] | None = None,
    ) -> None:
        self.config = config
        self._signed_in = signed_in
        """Whether a person holds tokens for an OAuth server (`SignIns.signed_in`): /servers asks it first."""
        self.observer = observer
        """Told of each call's start and outcome before the server or the person is (the audit log)."""
        self.prompts = prompts
        self.limits = Limits(config.limits, clock or time.monotonic)
        """Per-person limits; `limits.refused` counts refusals (read by /metrics)."""
        self.elicitations = Elicitations(prompts, limits=self.limits)
        self.pool = Pool(
            config,
            prompts,
            self.elicitations.on_elicit,
            self.elicitations.on_message,
            transport=transport,
            clock=clock,
            limits=self.limits,
            auth=auth,
        )
        self.calls = Calls(self.pool, prompts, self.elicitations)
        self.servers = self.pool.servers
        self.calls_ended: Counter[CallStatus] = Counter()
        """Tool calls that returned, by how they ended (read by /metrics)."""
        self._tg: TaskGroup | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        self._tg = await anyio.create_task_group().__aenter__()
        self.pool.start(self._tg)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            await self.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._tg.__aexit__(None, None, None)
        self._tg = None

    async def aclose(self, grace_s: float = 2.0) -> None:
        """Shutdown: every pending prompt is cancelled towards its server, then calls and sessions end."""
        self.elicitations.stopping = True
        self.prompts.abort_all(Outcome.SHUTDOWN)
        self.prompts.abandon_io_after(grace_s)  # cards are settled while the grace lasts, not after
        await self.calls.stop(grace_s)
        self.pool.close_all()
        with anyio.move_on_after(grace_s):
            await self.pool.wait_closed()

    # -- queries ---------------------------------------------------------------------------------------

    def server_names(self) -> list[str]:
        return list(self.servers)

    @property
    def sessions_open(self) -> int:
        """MCP sessions open now."""
        return self.pool.open_count

    async def probe(self, name: str, origin: Origin) -> ServerStatus:
        """Connect (if needed) and count tools; errors are reported in the status, not raised."""
        server = self.servers[name]
        if (
            server.oauth is not None
            and self._signed_in is not None
            and self.pool.get(server, origin) is None
            and not await self._signed_in(origin.user_id, name)
        ):
            # Listing servers must not send a sign-in card per OAuth server: that is for /tools and calls.
            reason = f"sign in first (/tools {name})"
            return ServerStatus(name, server.title, server.transport, False, error=reason)
        try:
            tools = await self.list_tools(name, origin)
        except Unavailable as exc:
            return ServerStatus(name, server.title, server.transport, False, error=exc.reason)
        conn = self.pool.get(server, origin)
        return ServerStatus(
            name,
            server.title,
            server.transport,
            True,
            protocol=conn.protocol if conn else None,
            tool_count=len(tools),
        )

    async def list_tools(self, name: str, origin: Origin) -> list[ToolInfo]:
        """The server's tools (all pages), kept per session until the server says the list changed.

        Raises:
            Unavailable: the server cannot be reached or failed the request.
        """
        server = self.pool.server(name)
        async with self.pool.use(server, origin) as conn:
            if conn.tools is not None:
                return conn.tools
            assert conn.client is not None
            tools: list[types.Tool] = []
            cursor: str | None = None
            try:
                with anyio.fail_after(server.call_timeout_s):
                    while True:
                        page = await conn.client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
            except (MCPError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise Unavailable(name, describe_error(exc)) from exc
            conn.tools = [
                ToolInfo(
                    server=name,
                    name=t.name,
                    title=t.title,
                    description=t.description,
                    input_schema=dict(t.input_schema),
                )
                for t in tools
            ]
        return conn.tools

    # -- calls -----------------------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any] | None,
        origin: Origin,
        on_progress: ProgressSink | None = None,
    ) -> ToolOutcome:
        """Call a tool for `origin`; elicitations on the way reach that person. Never raises for outcomes.

        A call past this person's limits is not started: it ends `REFUSED` with one line, empty when they were
        told about that limit recently (say nothing then). Logs one INFO line per call: who, server, tool,
        outcome and duration (never arguments or answers).
        """
        started = anyio.current_time()
        if self.observer is not None:
            await self.observer.call_started(origin, name, tool, arguments)
        server = self.servers.get(name)
        refusal = self.limits.start_call(origin.user_id)
        if refusal is None:
            try:
                process = None if server is None else self.pool.refusal(server, origin)
                if process is not None:
                    outcome = refused(process)
                else:
                    outcome = await self.calls.call_tool(name, tool, arguments, origin, on_progress)
            finally:
                self.limits.end_call(origin.user_id)
        else:
            outcome = refused(refusal)
        self.calls_ended[outcome.status] += 1
        log_call(origin, name, tool, outcome, anyio.current_time() - started)
        if self.observer is not None:
            with anyio.CancelScope(shield=True):
                await self.observer.call_ended(origin, name, tool, outcome)
        return outcome

    def cancel(self, origin: Origin) -> int:
        """/cancel: this person's pending prompts and running calls in this chat; returns how many."""
        return self.calls.cancel(origin)


def refused(refusal: Refusal) -> ToolOutcome:
    """The outcome of a call a limit did not let start: its line, or nothing to say."""
    return failure(CallStatus.REFUSED, refusal.reason if refusal.tell else "")


def log_call(origin: Origin, server: str, tool: str, outcome: ToolOutcome, seconds: float) -> None:
    """The per-call INFO line. Only names and the status: arguments, answers and results may be private."""
    logger.info(
        "call %s/%s by user %d in chat %d: %s in %.1f s",
        server,
        tool,
        origin.user_id,
        origin.chat_id,
        outcome.status.value,
        seconds,
    )

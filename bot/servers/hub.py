"""The MCP side of the bridge: sessions per (server, chat, user), tool calls, elicitations routed to their person.

Async, does I/O. Surfaces call `list_servers`, `list_tools`, `call_tool` and `cancel`; servers' questions
reach the surface only as `mapping.Request`s through the `PromptRegistry`, and answers come back as `Answer`s.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError, UrlElicitationRequiredError
from mcp.client import ClientRequestContext, IncomingMessage
from mcp_types import ElicitRequestParams, ElicitResult, ErrorData
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bot.config import Config, ServerConfig
from bot.core import (
    CallStatus,
    Origin,
    Outcome,
    Progress,
    Prompt,
    PromptRegistry,
    ServerStatus,
    ToolInfo,
    ToolOutcome,
)
from bot.servers.connections import Connection, describe_error
from bot.servers.results import failure, outcome_of_result
from mapping import (
    Answer,
    FormSpec,
    MappingError,
    RequestKind,
    answer_to_elicit_result,
    elicitation_to_request,
    parse_schema,
)
from mapping.urls import check_url

logger = logging.getLogger(__name__)

ProgressSink = Callable[[Progress], Awaitable[None]]

_caller: contextvars.ContextVar[Origin | None] = contextvars.ContextVar("toolnexus_caller", default=None)
MAX_AUTH_ROUNDS = 3
BACKOFF_CAP_S = 60.0
SETTLE_GRACE_S = 5.0
"""How long a call whose server went away waits for its session's cards to be settled."""


class Unavailable(Exception):
    """A server cannot be used right now (`reason` is shown to the person)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"{server}: {reason}")
        self.server = server
        self.reason = reason


@dataclass(slots=True)
class _Health:
    failures: int = 0
    retry_at: float = 0.0
    last_error: str | None = None
    protocol: str | None = None
    tool_count: int | None = None


@dataclass(slots=True)
class _Call:
    origin: Origin
    server: str
    tool: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancelled_by_user: bool = False


class Hub:
    """All MCP sessions of the process. Use as `async with Hub(config, prompts) as hub:`."""

    def __init__(
        self,
        config: Config,
        prompts: PromptRegistry,
        *,
        transport: Callable[[ServerConfig], Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.config = config
        self.prompts = prompts
        self.servers: Mapping[str, ServerConfig] = {s.name: s for s in config.servers}
        self._connections: dict[Hashable, Connection] = {}
        self._connecting: dict[Hashable, anyio.Lock] = {}
        self._serial: dict[Hashable, anyio.Lock] = {}
        self._current: dict[Hashable, Origin] = {}
        self._health: dict[str, _Health] = {name: _Health() for name in self.servers}
        self._calls: list[_Call] = []
        self._no_calls = anyio.Event()
        self._no_calls.set()
        self._tg: TaskGroup | None = None
        self._now = clock or anyio.current_time
        self._transport = transport

    # -- lifecycle -------------------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        self._tg = await anyio.create_task_group().__aenter__()
        self._tg.start_soon(self._reap_idle)
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
        self.prompts.abort_all(Outcome.SHUTDOWN)
        with anyio.move_on_after(grace_s):
            await self._no_calls.wait()  # calls end promptly once their prompts are answered
        for call in list(self._calls):
            call.scope.cancel()
        for conn in list(self._connections.values()):
            conn.close()
        with anyio.move_on_after(grace_s):
            for conn in list(self._connections.values()):
                await conn.gone.wait()

    # -- queries ---------------------------------------------------------------------------------------

    def server_names(self) -> list[str]:
        return list(self.servers)

    async def probe(self, name: str, origin: Origin) -> ServerStatus:
        """Connect (if needed) and count tools; errors are reported in the status, not raised."""
        server = self.servers[name]
        try:
            tools = await self.list_tools(name, origin)
        except Unavailable as exc:
            return ServerStatus(name, server.title, server.transport, False, error=exc.reason)
        conn = self._connections.get(self._key(server, origin))
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
        server = self._server(name)
        async with self._use(server, origin) as conn:
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
        self._health[name].tool_count = len(tools)
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

        Logs one INFO line per call: who, server, tool, outcome and duration (never arguments or answers).
        """
        started = anyio.current_time()
        outcome = await self._call_tool(name, tool, arguments, origin, on_progress)
        log_call(origin, name, tool, outcome, anyio.current_time() - started)
        return outcome

    async def _call_tool(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any] | None,
        origin: Origin,
        on_progress: ProgressSink | None = None,
    ) -> ToolOutcome:
        server = self.servers.get(name)
        if server is None:
            return failure(CallStatus.FAILED, f"unknown server {name!r}")
        call = _Call(origin=origin, server=name, tool=tool)
        self._calls.append(call)
        if self._no_calls.is_set():
            self._no_calls = anyio.Event()
        token = _caller.set(origin)
        try:
            with call.scope:
                for _ in range(MAX_AUTH_ROUNDS):
                    outcome = await self._call_once(server, call, arguments, on_progress)
                    if not isinstance(outcome, list):
                        return outcome
                    declined = await self._authorize(server, call, outcome)
                    if declined is not None:
                        return declined
                return failure(CallStatus.FAILED, "the server kept asking for authorization; giving up")
            return failure(CallStatus.CANCELLED, "cancelled" if call.cancelled_by_user else "stopped")
        except Unavailable as exc:
            return failure(CallStatus.UNAVAILABLE, exc.reason)
        finally:
            _caller.reset(token)
            self._calls.remove(call)
            if not self._calls:
                self._no_calls.set()

    async def _call_once(
        self,
        server: ServerConfig,
        call: _Call,
        arguments: dict[str, Any] | None,
        on_progress: ProgressSink | None,
    ) -> ToolOutcome | list[types.ElicitRequestURLParams]:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            if on_progress is not None:
                try:
                    await on_progress(Progress(value, total, message))
                except Exception:
                    logger.exception("progress sink failed")

        async with self._use(server, call.origin) as conn, self._serialized(conn, call.origin):
            client = conn.client
            assert client is not None
            result: types.CallToolResult | None = None
            error: BaseException | None = None
            clock = conn.clock(server.call_timeout_s)
            try:
                with clock.scope:
                    try:
                        result = await client.call_tool(call.tool, arguments, progress_callback=progress)
                    except Exception as exc:
                        error = exc
            finally:
                conn.release(clock)
        ended_by = None
        if result is None and error is None:
            ended_by = "gone" if conn.gone.is_set() else "timeout" if clock.scope.cancelled_caught else None

        if result is not None:
            return outcome_of_result(result)
        if ended_by == "gone" or (error is not None and conn.gone.is_set()):
            # The call's cards say "the server went away" before its result does.
            with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_GRACE_S):
                await conn.finished.wait()
                await self.prompts.wait_settled(conn.key)
            return failure(
                CallStatus.UNAVAILABLE, f"the server went away ({conn.error or 'connection closed'})"
            )
        if ended_by == "timeout":
            return failure(CallStatus.TIMED_OUT, f"no result after {server.call_timeout_s:g} s")
        if isinstance(error, MCPError) and error.code == types.URL_ELICITATION_REQUIRED:
            return UrlElicitationRequiredError.from_error(error.error).elicitations
        if isinstance(error, MCPError):
            return failure(CallStatus.FAILED, error.message)
        if error is not None:
            return failure(CallStatus.FAILED, describe_error(error))
        return failure(CallStatus.CANCELLED, "cancelled")

    async def _authorize(
        self, server: ServerConfig, call: _Call, elicitations: list[types.ElicitRequestURLParams]
    ) -> ToolOutcome | None:
        """-32042: show each URL elicitation, wait for consent and completion; None means retry the call."""
        scope = self._key(server, call.origin)
        prompts: list[Prompt] = []
        for params in elicitations:
            wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
            wire["mode"] = "url"
            try:
                request = elicitation_to_request(wire)
            except MappingError as exc:
                return failure(
                    CallStatus.FAILED, f"the server asked for authorization the bot cannot show: {exc}"
                )
            prompt = Prompt(
                request=request,
                origin=call.origin,
                server=server.name,
                elicitation_id=params.elicitation_id,
                awaits_completion=True,
                scope=scope,
            )
            answer = await self.prompts.ask(prompt)
            if not answer.ok:
                return failure(
                    CallStatus.CANCELLED,
                    "authorization declined" if answer.reason == "declined" else "authorization cancelled",
                )
            prompts.append(prompt)
        with anyio.move_on_after(self.prompts.timeout_s) as waited:
            for prompt in prompts:
                await prompt.completed.wait()
        for prompt in prompts:
            self.prompts.complete_by_hand(prompt)  # drops any leftover (timed out) from the awaiting list
            if prompt.outcome is not Outcome.COMPLETED:
                await self.prompts.settle_completed(prompt)
        if waited.cancelled_caught:
            return failure(CallStatus.TIMED_OUT, "authorization was not completed in time")
        return None

    def cancel(self, origin: Origin) -> int:
        """/cancel: this person's pending prompts and running calls in this chat; returns how many."""
        count = 0
        for prompt in self.prompts.pending(origin=origin):
            count += self.prompts.answer(prompt, Answer(id=prompt.request.id, ok=False, reason="cancelled"))
        for call in self._calls:
            if call.origin == origin:
                call.cancelled_by_user = True
                call.scope.cancel()
                count += 1
        return count

    # -- sessions --------------------------------------------------------------------------------------

    def _server(self, name: str) -> ServerConfig:
        try:
            return self.servers[name]
        except KeyError:
            raise Unavailable(name, "no such server") from None

    def _key(self, server: ServerConfig, origin: Origin | None) -> Hashable:
        return (server.name,) if server.shared else (server.name, origin)

    @asynccontextmanager
    async def _use(self, server: ServerConfig, origin: Origin) -> AsyncIterator[Connection]:
        conn = await self._connect(server, origin)
        conn.active_calls += 1
        try:
            yield conn
        finally:
            conn.active_calls -= 1
            conn.last_used = self._now()
            if conn.active_calls == 0:
                for prompt in self.prompts.drop_awaiting(conn.key):
                    await self.prompts.settle_completed(prompt)

    @asynccontextmanager
    async def _serialized(self, conn: Connection, origin: Origin) -> AsyncIterator[None]:
        """A shared legacy session cannot tell whose call an elicitation belongs to: one call at a time."""
        if not conn.server.shared or conn.protocol in MODERN_PROTOCOL_VERSIONS:
            yield
            return
        lock = self._serial.setdefault(conn.key, anyio.Lock(fast_acquire=True))
        async with lock:
            self._current[conn.key] = origin
            try:
                yield
            finally:
                self._current.pop(conn.key, None)

    async def _connect(self, server: ServerConfig, origin: Origin) -> Connection:
        key = self._key(server, origin)
        conn = self._connections.get(key)
        if conn is not None and not conn.gone.is_set():
            return conn  # the common case, without the lock (it only orders first connects and reconnects)
        async with self._connecting.setdefault(key, anyio.Lock(fast_acquire=True)):
            conn = self._connections.get(key)
            if conn is not None and not conn.gone.is_set():
                return conn
            health = self._health[server.name]
            now = self._now()
            if health.failures and now < health.retry_at:
                raise Unavailable(
                    server.name, f"{health.last_error}; retrying in {max(1, round(health.retry_at - now))} s"
                )
            self._make_room()
            conn = Connection(server, key, self._on_elicit, self._on_message, self._transport)
            assert self._tg is not None
            await self._tg.start(self._own, conn)
            if conn.client is None:
                health.failures += 1
                health.last_error = conn.error or "connection failed"
                health.retry_at = self._now() + min(BACKOFF_CAP_S, 2.0 ** (health.failures - 1))
                raise Unavailable(server.name, health.last_error)
            health.failures, health.last_error, health.protocol = 0, None, conn.protocol
            self._connections[key] = conn
            return conn

    async def _own(self, conn: Connection, *, task_status: Any) -> None:
        try:
            await conn.own(task_status=task_status)
        finally:
            if self._connections.get(conn.key) is conn:
                del self._connections[conn.key]
            lock = self._connecting.get(conn.key)
            if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
                del self._connecting[conn.key]  # else one lock per person who ever called stays for good
            if not conn.closing:
                self.prompts.abort_all(Outcome.SERVER_GONE, scope=conn.key)
            conn.finished.set()

    def _make_room(self) -> None:
        limit = self.config.sessions.max_open
        if len(self._connections) < limit:
            return
        idle = sorted((c for c in self._connections.values() if c.idle), key=lambda c: c.last_used)
        if not idle:
            raise Unavailable("sessions", f"all {limit} MCP sessions are busy; try again shortly")
        idle[0].close()
        del self._connections[idle[0].key]

    async def _reap_idle(self) -> None:
        idle_s = self.config.sessions.idle_timeout_s
        while True:
            await anyio.sleep(max(1.0, min(30.0, idle_s / 4)))
            now = self._now()
            for conn in list(self._connections.values()):
                if conn.idle and now - conn.last_used >= idle_s:
                    conn.close()

    # -- elicitation -----------------------------------------------------------------------------------

    async def _on_elicit(
        self, conn: Connection, ctx: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """The SDK's elicitation callback for one session: both protocol eras arrive here."""
        try:
            return await self._elicit(conn, params)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            # The outermost MCP callback: a bug here must become a JSON-RPC error, never a hung server request.
            logger.exception("elicitation failed on %s", conn.server.name)
            return ErrorData(code=types.INTERNAL_ERROR, message="the client failed to handle the elicitation")

    async def _elicit(self, conn: Connection, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        origin = self._origin_of(conn)
        wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        message = wire.get("message") if isinstance(wire.get("message"), str) else ""
        if origin is None:
            return ErrorData(code=types.INVALID_REQUEST, message="elicitation outside of any tool call")
        try:
            request = elicitation_to_request(wire)
            form = (
                _form_of(request.data["schema"] if request.data else None)
                if request.kind is RequestKind.INPUT
                else None
            )
        except MappingError as exc:
            await self._report(origin, conn.server.name, str(message), str(exc))
            return ErrorData(code=types.INVALID_PARAMS, message=f"unsupported elicitation: {exc}")
        if request.url is not None and not check_url(request.url).openable:
            # Never a button, never a silent accept: the person is told, the server hears "decline".
            reason = "; ".join(check_url(request.url).warnings) or "not a web address"
            await self._report(origin, conn.server.name, request.prompt, f"the link was refused: {reason}")
            return ElicitResult(action="decline")
        prompt = Prompt(
            request=request,
            origin=origin,
            server=conn.server.name,
            form=form,
            elicitation_id=wire.get("elicitationId"),
            scope=conn.key,
            why_withdrawn=lambda: _why_withdrawn(conn),
        )
        conn.prompt_opened(+1)
        try:
            answer = await self.prompts.ask(prompt)
        finally:
            conn.prompt_opened(-1)
        result = answer_to_elicit_result(answer)
        if request.kind is RequestKind.AUTHORIZATION and result["action"] == "accept":
            return ElicitResult(action="accept")  # URL mode: consent only, no content on the wire
        return ElicitResult.model_validate(result)

    async def _report(self, origin: Origin, server: str, message: str, reason: str) -> None:
        with anyio.CancelScope(shield=True):
            try:
                await self.prompts.surface.report_unsupported(origin, server, message, reason)
            except Exception:
                logger.exception("could not report an unsupported elicitation")

    def _origin_of(self, conn: Connection) -> Origin | None:
        if len(conn.key) == 2:  # type: ignore[arg-type]
            return conn.key[1]  # type: ignore[index]
        return _caller.get() or self._current.get(conn.key)

    async def _on_message(self, conn: Connection, message: IncomingMessage) -> None:
        if isinstance(message, types.ElicitCompleteNotification):
            prompt = self.prompts.complete(conn.key, message.params.elicitation_id)
            if prompt is not None:
                await self.prompts.settle_completed(prompt)
        elif isinstance(message, types.ToolListChangedNotification):
            conn.tools = None
        elif isinstance(message, Exception):
            logger.debug("transport message from %s: %r", conn.server.name, message)


_FORM_KEY_MAX = 16_384
"""Schemas whose JSON is longer are parsed every time (a hostile server must not fill the cache)."""


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


def _form_of(schema: Any) -> FormSpec:
    """`parse_schema`, remembered per distinct schema (a `FormSpec` is immutable).

    Servers ask the same forms again and again, and parsing checks each against the JSON Schema meta-schema:
    about 0.5 ms for a one-field form, a twentieth of the bot's CPU per elicitation.
    """
    try:
        key = json.dumps(schema)  # key order kept: it is the order of the fields
    except (TypeError, ValueError, RecursionError):
        return parse_schema(schema)
    return _parsed(key) if len(key) <= _FORM_KEY_MAX else parse_schema(schema)


@functools.lru_cache(maxsize=256)
def _parsed(key: str) -> FormSpec:
    return parse_schema(json.loads(key))


def _why_withdrawn(conn: Connection) -> Outcome:
    """Why the SDK cancelled an elicitation callback: its session ended, or the server withdrew the request."""
    if conn.gone.is_set():
        return Outcome.SHUTDOWN if conn.closing else Outcome.SERVER_GONE
    return Outcome.SERVER_CANCELLED

"""One MCP `Client` per owner task: connect, notice when the server goes away, close. Does I/O.

anyio contexts must be exited by the task that entered them, so each `Client` lives inside
`Connection.own()`, which a long-lived task group runs; callers only borrow `connection.client`.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeAlias

import anyio
import httpx2
from anyio.abc import TaskStatus
from mcp import Client
from mcp.client import ClientRequestContext, IncomingMessage, Transport
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitRequestParams, ElicitResult, ErrorData, Implementation

from bot.config import ServerConfig
from bot.core import ToolInfo
from bot.servers.question_tasks import QuestionTasks
from bot.servers.signin_errors import SignInFailed
from bot.servers.stdio import StdioProcess
from bot.servers.streams import ReadProxy
from bot.servers.tasks import TasksExtension

TransportStreams: TypeAlias = tuple[Any, Any]
"""The (read, write) streams a `Transport` yields (the SDK names their type only in a private module)."""

logger = logging.getLogger(__name__)

ElicitHandler = Callable[
    ["Connection", ClientRequestContext, ElicitRequestParams], Awaitable[ElicitResult | ErrorData]
]
MessageHandler = Callable[["Connection", IncomingMessage], Awaitable[None]]

CLIENT_INFO = Implementation(name="toolnexus-bot", version="0.1.0")
ENDED_GRACE_S: Final = 5.0
"""How long a failed request waits for its ended session to say why (`Connection.why_failed`)."""


class _WatchedStream(ReadProxy):
    """A read stream that calls `on_end` when the server side ends (EOF or a transport error)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        super().__init__(inner)
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return item


ResponseHook = Callable[[httpx2.Response], Awaitable[None]]
"""Told of every HTTP answer a session gets (its status explains a failure: `http_status_reason`)."""

_HTTP_HINTS: Final = {
    400: "is this an MCP endpoint?",
    401: "check the server's headers (Authorization)",
    403: "check the server's headers (Authorization)",
    404: "is the path /mcp?",
    405: "is the path /mcp?",
    406: "is this an MCP endpoint?",
}


def http_status_reason(status: int, reason: str, location: str | None = None) -> str | None:
    """The one explanation of an HTTP answer that ended a session (`check` and the bot's sessions alike):
    a redirect names where to, an error its status and a hint; None for a success."""
    if 300 <= status < 400:
        where = f" to {location}" if location else ""
        return f"HTTP {status} {reason}: the server redirects{where}; use that URL"
    if status >= 400:
        hint = _HTTP_HINTS.get(status, "the server failed; see its logs" if status >= 500 else "")
        return f"HTTP {status} {reason}" + (f": {hint}" if hint else "")
    return None


HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=300.0)
"""A server's HTTP requests: 30 s to connect, write or wait for a pooled connection; 300 s between two reads
(a streamed answer stays quiet while its tool works or a question waits; the call's own clock bounds the call)."""


def default_transport(
    server: ServerConfig,
    auth: httpx2.Auth | None = None,
    on_response: ResponseHook | None = None,
    *,
    http_timeout: httpx2.Timeout | None = HTTP_TIMEOUT,
) -> Transport:
    """stdio for `command`, streamable HTTP (with the configured headers, and `auth`: OAuth) for `url`;
    `on_response` hears each HTTP answer; `http_timeout` bounds each HTTP wait (None: the caller's deadline does)."""
    if server.url is not None:
        return _http(server, auth, on_response, http_timeout)
    assert server.command is not None
    # Its stderr goes to this process's descriptor 2 (the console sends that to its log file: a server's raw
    # stderr stays out of the prompt), and its end is kept to explain an exit.
    return StdioProcess(server)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every HTTP session: by default httpx builds one per client, loading the CA store
    each time, for every MCP session."""
    return httpx2.create_ssl_context()


KEEPALIVE_S: Final = 2.0
"""How long an idle HTTP connection to a server is kept for the next request: well under the 5 s after which
uvicorn (under most Python MCP servers) closes one. At the same 5 s (httpx's default), a request sent as the
server closes the connection was reset unread (`ReadError`): under bench c's thousand sessions, the answers of
the people who answered about 5 s after their question came."""
_LIMITS: Final = httpx2.Limits(
    max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_S
)
"""httpx's own connection bounds, but for how long an idle one is kept."""
ERROR_CLIP: Final = 300
"""Characters of an error's own text shown in one line (`describe_error`); the rest is cut."""


@asynccontextmanager
async def _http(
    server: ServerConfig,
    auth: httpx2.Auth | None,
    on_response: ResponseHook | None,
    http_timeout: httpx2.Timeout | None,
) -> AsyncIterator[TransportStreams]:
    # The SDK leaves a client it was given open, so this transport owns (and closes) its own.
    assert server.url is not None
    async with (
        httpx2.AsyncClient(
            headers=server.reveal_headers(),
            timeout=http_timeout,
            limits=_LIMITS,
            follow_redirects=False,
            verify=_tls_context(),
            auth=auth,
            event_hooks={"response": [on_response]} if on_response is not None else None,
        ) as http,
        streamable_http_client(server.url, http_client=http) as streams,
    ):
        yield streams


@asynccontextmanager
async def _watched(transport: Transport, on_end: Callable[[], None]) -> AsyncIterator[TransportStreams]:
    async with transport as (read, write):
        yield _WatchedStream(read, on_end), write


class CallClock:
    """A tool call's cancel scope whose deadline runs only while no prompt is open on its session.

    The time a person spends answering never counts against a call's own timeout. The scope's deadline is
    moved as prompts open and close (no watcher task per call); the session cancels it when it ends.
    """

    def __init__(self, budget_s: float) -> None:
        self.scope = anyio.CancelScope()
        self.asking = False
        """A 2026-07-28 call between legs, holding a round's questions: the server's going away does not cancel it
        (it would cut the questions short of their cards); they are settled as the server gone, and its next leg
        fails on the closed session."""
        self._left = budget_s
        self._since = anyio.current_time()
        self._paused = True
        self.resume()

    def pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._left -= anyio.current_time() - self._since
            self.scope.deadline = math.inf

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._since = anyio.current_time()
            self.scope.deadline = self._since + self._left


class Connection:
    """An MCP session for one key (a server, and a person unless the server is shared)."""

    def __init__(
        self,
        server: ServerConfig,
        key: Hashable,
        on_elicit: ElicitHandler,
        on_message: MessageHandler,
        transport: Callable[[ServerConfig], Any] | None = None,
        auth: httpx2.Auth | None = None,
    ) -> None:
        self.server = server
        self.auth = auth
        """OAuth for this session's HTTP requests (`bot.servers.oauth`), with the default transport."""
        self.sign_in_failed = False
        """The connect ended because the person did not sign in (not the server's fault: no backoff)."""
        self.key = key
        self.client: Client | None = None
        self.gone = anyio.Event()
        """Set when the session ended for any reason (server died, closed, failed to connect)."""
        self.closing = False
        self.active_calls = 0
        self.open_prompts = 0
        self.last_used = anyio.current_time()
        self.error: str | None = None
        self.tools: list[ToolInfo] | None = None
        """The server's tool list, cached until `notifications/tools/list_changed`."""
        self.question_tasks = QuestionTasks()
        """The questions this session's server sent as tasks (declared, polled and answered on its transport)."""
        self.finished = anyio.Event()
        """Set once the owner task has left the session and the hub has aborted its prompts."""
        self._stop = anyio.Event()
        self._clocks: set[CallClock] = set()
        self._on_elicit = on_elicit
        self._on_message = on_message
        self._answer: tuple[int, str, str | None] | None = None
        """The last HTTP answer of the default transport: (status, reason, location), to explain a failure."""
        self._process: StdioProcess | None = None
        """The stdio transport of this session's server process, to explain its exit."""
        # An OAuth session is HTTP with its auth whatever `transport` says (an in-process stand-in has no HTTP).
        self._transport = (
            functools.partial(default_transport, auth=auth, on_response=self._heard)
            if auth or transport is None
            else transport
        )

    def begin_call(self) -> None:
        """A request borrows the session (it is not idle until the request ends)."""
        self.active_calls += 1

    def end_call(self, now: float) -> bool:
        """The request ended at `now`; whether the session is now without requests."""
        self.active_calls -= 1
        self.last_used = now
        return self.active_calls == 0

    def keep_tools(self, tools: list[ToolInfo]) -> list[ToolInfo]:
        """Cache the server's tool list (until `forget_tools`); the list."""
        self.tools = tools
        return tools

    def forget_tools(self) -> None:
        """The server said its tool list changed (`notifications/tools/list_changed`)."""
        self.tools = None

    async def _heard(self, response: httpx2.Response) -> None:
        self._answer = (response.status_code, response.reason_phrase, response.headers.get("location"))

    async def _explain(self, exc: BaseException) -> str:
        """Why the session failed, as `check` says it: the server process's exit, the HTTP answer that ended
        it, else the exception."""
        said = await self._process_end()
        if said is None and self._answer is not None:
            said = http_status_reason(*self._answer)
        return said or describe_error(exc, self.server)

    async def _process_end(self) -> str | None:
        """How the stdio server's process ended (its status and the end of its stderr), if it did."""
        return None if self._process is None else await self._process.ended()

    async def why_failed(self, exc: BaseException) -> str:
        """Why a request on this session failed: when the session ended meanwhile, how it ended (a server process
        that exited says how, as `check` does); else the exception (`describe_error`)."""
        if self.gone.is_set():
            with anyio.CancelScope(shield=True), anyio.move_on_after(ENDED_GRACE_S):
                await self.finished.wait()
        return self.error or describe_error(exc, self.server)

    @property
    def protocol(self) -> str | None:
        return self.client.protocol_version if self.client is not None else None

    @property
    def idle(self) -> bool:
        return self.active_calls == 0 and self.open_prompts == 0

    def clock(self, budget_s: float) -> CallClock:
        """A call's clock on this session: paused while a prompt is open, cancelled when the session ends.
        Hand it back with `release` when the call is over."""
        clock = CallClock(budget_s)
        if self.open_prompts:
            clock.pause()
        if self.gone.is_set():
            clock.scope.cancel()
        self._clocks.add(clock)
        return clock

    def release(self, clock: CallClock) -> None:
        self._clocks.discard(clock)

    def prompt_opened(self, delta: int) -> None:
        before = self.open_prompts
        self.open_prompts += delta
        if before == 0 and self.open_prompts > 0:
            for clock in self._clocks:
                clock.pause()
        elif before > 0 and self.open_prompts == 0:
            for clock in self._clocks:
                clock.resume()

    def _ended(self) -> None:
        """The session is over (the server went away, or it was closed): every call on it stops waiting."""
        self.gone.set()
        for clock in self._clocks:
            if self.closing or not clock.asking:  # the server gone: its questions are aborted (`Pool`)
                clock.scope.cancel()

    def _eof(self) -> None:
        """The server's side of the transport ended: the owner leaves the session (`_ended` once it has). Calls
        are not cancelled here: the SDK fails the requests still waiting, and a response read before the end
        may have woken its call without its having run yet (cancelled now, it would lose that response)."""
        self.gone.set()

    def close(self) -> None:
        """Ask the owner task to leave the session (it exits in its own task)."""
        self.closing = True
        self._stop.set()

    async def own(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the session until closed or gone; reports readiness (or the connect error) via task_status."""
        started = False
        try:
            target = self._transport(self.server)
            self._process = target if isinstance(target, StdioProcess) else None
            client = Client(
                self.question_tasks.streams(_watched(target, self._eof)) if _is_transport(target) else target,
                elicitation_callback=self._elicit,
                message_handler=self._message,
                mode=self.server.protocol.value,
                read_timeout_seconds=None,
                client_info=CLIENT_INFO,
                extensions=[TasksExtension()],  # 2026-07-28 sessions declare the tasks extension
            )
            async with client:
                self.client = client
                task_status.started()
                started = True
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_set_when, self.gone, self._stop)
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
            if not self.closing:  # the server went away: a process that exited says how
                self.error = await self._process_end()
                if self.error is not None:
                    logger.warning("MCP server %s: %s", self.server.name, self.error)
        except Exception as exc:
            failed = _sign_in_failure(exc)
            self.sign_in_failed = failed is not None
            self.error = failed.reason if failed is not None else await self._explain(exc)
            if not self.closing:
                logger.warning("MCP server %s: %s", self.server.name, self.error)
        finally:
            self.client = None
            self._ended()
            if not started:
                task_status.started()

    async def _elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        return await self._on_elicit(self, context, params)

    async def _message(self, message: IncomingMessage) -> None:
        await self._on_message(self, message)


def _sign_in_failure(exc: BaseException) -> SignInFailed | None:
    """The `SignInFailed` an exception (group) carries, if any."""
    for cause in _chain(exc):
        if isinstance(cause, SignInFailed):
            return cause
        if isinstance(cause, BaseExceptionGroup):
            for inner in cause.exceptions:
                found = _sign_in_failure(inner)
                if found is not None:
                    return found
    return None


def _is_transport(target: object) -> bool:
    """A transport is an async context manager of streams; anything else (an in-process server) goes as is."""
    return hasattr(target, "__aenter__") and not hasattr(target, "call_tool") and not hasattr(target, "run")


async def _set_when(gone: anyio.Event, stop: anyio.Event) -> None:
    await gone.wait()
    stop.set()


def describe_error(exc: BaseException, server: ServerConfig | None = None) -> str:
    """One readable line for a connect or transport failure (ExceptionGroups unwrapped).

    Names what happened where the exception chain says so: the DNS name not found, the connection refused,
    the TLS failure and its reason, the command or working folder missing (given the `server`).
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe_error(e, server) for e in exc.exceptions)
    if isinstance(exc, httpx2.TransportError):
        return _transport_reason(exc)
    if isinstance(exc, FileNotFoundError):
        if server is not None and server.cwd is not None and not os.path.isdir(server.cwd):
            return f"the working folder does not exist: {server.cwd}"
        # The SDK's spawn error names no file: the server's own command is what was not found.
        missing = exc.filename or (server.command if server is not None else None)
        return f"command not found: {missing or exc}"
    if isinstance(exc, PermissionError) and server is not None and server.command is not None:
        return f"cannot run {server.command}: permission denied"
    text = str(exc) or type(exc).__name__
    return text if len(text) <= ERROR_CLIP else text[: ERROR_CLIP - 3] + "..."


def _transport_reason(exc: httpx2.TransportError) -> str:
    host = _host_of(exc)
    for cause in _chain(exc):
        if isinstance(cause, socket.gaierror):
            return f"DNS name not found: {host}" if host else "DNS name not found"
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused by {host}" if host else "connection refused"
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS failure: {cause.verify_message or cause.reason or cause}"
        if isinstance(cause, ssl.SSLError):
            reason = (cause.reason or str(cause)).replace("_", " ").lower()
            plain = " (is it plain http?)" if cause.reason == "WRONG_VERSION_NUMBER" else ""
            return f"TLS failure: {reason}{plain}"
    if isinstance(exc, httpx2.TimeoutException):
        return f"no answer from {host}" if host else "no answer"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect to {host}: {exc}" if host else f"cannot connect: {exc}"
    return str(exc) or type(exc).__name__


def _host_of(exc: httpx2.TransportError) -> str | None:
    try:
        return exc.request.url.host or None
    except RuntimeError:  # httpx raises when the error carries no request
        return None


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, outermost first (cycles cut)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen

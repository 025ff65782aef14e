"""`toolnexus-bot check`: probe every configured server at once, each within a timeout, one line each. Does I/O.

A probe connects, lists the tools and leaves. What it saw on the side (the HTTP status and content type of the
last answer, a message that was not JSON-RPC, a stdio server's exit status and last stderr lines) turns a vague
transport error into a reason a person can act on. Children are always reaped: on the timeout, on SIGINT and
SIGTERM (the MCP client stops a stdio server's whole process group).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client import ClientRequestContext, IncomingMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bot.config import Config, ServerConfig
from bot.servers.connections import Connection, default_transport, describe_error, http_status_reason
from bot.servers.stdio import StdioProcess, spawn_problem

__all__ = ["DEFAULT_TIMEOUT_S", "CheckResult", "check", "probe"]

DEFAULT_TIMEOUT_S: Final = 10.0
"""How long one server may take to connect and list its tools."""

_QUIET: Final = (
    "bot.servers.connections",
    "mcp",
)  # they would repeat, as log lines, what the result line says


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One server's probe."""

    name: str
    """The server's table name."""
    ok: bool
    """Connected and listed its tools."""
    detail: str
    """`protocol X, N tools` when ok, else the reason."""

    @property
    def line(self) -> str:
        return f"{self.name}: ok ({self.detail})" if self.ok else f"{self.name}: FAILED: {self.detail}"


@dataclass(slots=True)
class _Evidence:
    """What a probe saw besides the exception that ended it."""

    process: StdioProcess | None = None
    """The stdio server's process (its stderr kept, not shown: the result line quotes its end)."""
    http_status: int | None = None
    http_reason: str = ""
    location: str | None = None
    content_type: str | None = None
    not_json_rpc: anyio.Event = field(default_factory=anyio.Event)

    async def on_response(self, response: httpx2.Response) -> None:
        self.http_status, self.http_reason = response.status_code, response.reason_phrase
        self.location = response.headers.get("location")
        self.content_type = response.headers.get("content-type", "").split(";")[0].strip() or None

    async def on_message(self, _conn: Connection, message: IncomingMessage) -> None:
        if isinstance(message, Exception):  # a line or body that did not parse as JSON-RPC
            self.not_json_rpc.set()

    def stderr_tail(self) -> str:
        return "" if self.process is None else self.process.tail()


async def check(
    config: Config, timeout_s: float = DEFAULT_TIMEOUT_S, write: Callable[[str], None] | None = None
) -> int:
    """Probe every server at once; print each line as its probe ends, then a summary in config order.

    0 when all are ok, 1 when one failed, 130 when interrupted by SIGINT or SIGTERM (children reaped first).
    """
    out = write or _print
    results: dict[str, CheckResult] = {}
    interrupted = False

    async def one(server: ServerConfig) -> None:
        result = await probe(server, timeout_s)
        results[server.name] = result
        out(result.line)

    with _quiet_logs():
        async with anyio.create_task_group() as tg:

            async def on_signal() -> None:
                nonlocal interrupted
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for _ in signals:
                        interrupted = True
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(on_signal)
            async with anyio.create_task_group() as probes:
                for server in config.servers:
                    probes.start_soon(one, server)
            tg.cancel_scope.cancel()
    if interrupted:
        out("check: interrupted; every server process was stopped")
        return 130
    if not config.servers:
        out("no servers configured")
        return 0
    failed = [r.name for r in results.values() if not r.ok]
    order = ", ".join(f"{s.name} {'ok' if results[s.name].ok else 'FAILED'}" for s in config.servers)
    out(f"{len(config.servers) - len(failed)} of {len(config.servers)} ok: {order}")
    return 1 if failed else 0


async def probe(server: ServerConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> CheckResult:
    """Connect to one server and list its tools within `timeout_s`; never raises for a failure."""
    early = _before_start(server)
    if early is not None:
        return CheckResult(server.name, False, early)
    evidence = _Evidence()
    conn = Connection(
        server, ("check", server.name), _nobody, evidence.on_message, transport=_transport(evidence)
    )
    tools, protocol, error, timed_out = await _connect_and_list(conn, evidence, timeout_s)
    ended = None if evidence.process is None or timed_out else await evidence.process.ended()
    if tools is not None:
        return CheckResult(
            server.name,
            True,
            f"protocol {protocol or 'unknown'}, {tools} tools{_sharing(server, protocol)}",
        )
    if server.oauth is not None and evidence.http_status == 401:
        # Reached, and asking for a person's sign-in: all `check` can see without a person.
        return CheckResult(server.name, True, "reachable; asks each person to sign in (OAuth) first")
    return CheckResult(server.name, False, _reason(server, evidence, error, ended, timed_out, timeout_s))


def _sharing(server: ServerConfig, protocol: str | None) -> str:
    """What `shared = true` means in the era found: a 2025 session cannot tell whose call a question is for."""
    if not server.shared:
        return ""
    if protocol in MODERN_PROTOCOL_VERSIONS:
        return "; shared: calls of different people run concurrently"
    return (
        "; shared, but a 2025 revision cannot say whose call a question belongs to: calls run one at a time, "
        "and an open question makes everyone else wait (up to elicitation.timeout_s)"
    )


async def _connect_and_list(
    conn: Connection, evidence: _Evidence, timeout_s: float
) -> tuple[int | None, str | None, str | None, bool]:
    """(tool count or None, protocol, the error, whether the time ran out); the session is closed on return."""
    tools: int | None = None
    protocol: str | None = None
    error: str | None = None
    async with anyio.create_task_group() as tg:
        with anyio.move_on_after(timeout_s) as deadline:

            async def on_garbage(scope: anyio.CancelScope) -> None:
                await evidence.not_json_rpc.wait()
                scope.cancel()

            async with anyio.create_task_group() as watch:
                watch.start_soon(on_garbage, watch.cancel_scope)
                await tg.start(conn.own)
                if conn.client is not None:
                    protocol = conn.protocol
                    try:
                        tools = await _count_tools(conn.client)
                    except (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                        error = str(exc) or type(exc).__name__
                watch.cancel_scope.cancel()
        conn.close()
        if conn.client is None or deadline.cancelled_caught:
            tg.cancel_scope.cancel()
    return tools, protocol, error or conn.error, deadline.cancelled_caught


async def _count_tools(client: Client) -> int:
    count, cursor = 0, None
    while True:
        page = await client.list_tools(cursor=cursor)
        count += len(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return count


def _before_start(server: ServerConfig) -> str | None:
    """A reason found without starting anything: the working folder or the command is missing."""
    if server.command is None:
        return None
    problem = spawn_problem(server)
    return None if problem is None else describe_error(problem, server)


def _transport(evidence: _Evidence) -> Callable[[ServerConfig], object]:
    def make(server: ServerConfig) -> object:
        if server.url is not None:
            # No timeout of its own: the probe's deadline bounds every wait.
            return default_transport(server, on_response=evidence.on_response, http_timeout=None)
        evidence.process = StdioProcess(server, forward_stderr=False)
        return evidence.process

    return make


async def _nobody(
    _conn: Connection, _ctx: ClientRequestContext, _params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message="nobody is there to answer: this is a check")


def _reason(
    server: ServerConfig,
    evidence: _Evidence,
    error: str | None,
    ended: str | None,
    timed_out: bool,
    timeout_s: float,
) -> str:
    if evidence.not_json_rpc.is_set() and server.command is not None:
        return "not an MCP server (the answer was not JSON-RPC)"
    if ended is not None:
        return ended
    status_code = evidence.http_status
    said = (
        None
        if status_code is None
        else http_status_reason(status_code, evidence.http_reason, evidence.location)
    )
    if said is not None:
        return said
    content_type = evidence.content_type
    if evidence.not_json_rpc.is_set() or (
        content_type is not None and content_type not in ("application/json", "text/event-stream")
    ):
        sent = f"; it sent {content_type}" if content_type and server.url is not None else ""
        return f"not an MCP server (the answer was not JSON-RPC{sent})"
    if timed_out:
        tail = evidence.stderr_tail()
        return f"no answer within {timeout_s:g} s" + (f"; its stderr ends: {tail}" if tail else "")
    return error or "the connection failed"


@contextmanager
def _quiet_logs() -> Iterator[None]:
    """Failures are reported on the result line, so the loggers that would repeat them are muted (unless DEBUG)."""
    if logging.getLogger().getEffectiveLevel() <= logging.DEBUG:
        yield
        return
    loggers = [logging.getLogger(name) for name in _QUIET]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _print(line: str) -> None:
    print(line, flush=True)

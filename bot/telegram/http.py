"""The HTTP client under PTB: keep-alive HTTP/1.1 over asyncio, one small pool per origin. Does I/O.

PTB's own `HTTPXRequest` costs about 1 ms of CPU per Bot API call (httpx, httpcore, h11 and anyio layers), and
an elicitation makes eight or nine calls, so it was most of the bot's CPU (bench/, issue 5). This client does
what the Bot API needs and nothing else: POST with a JSON body (multipart for files), GET for file downloads,
Content-Length or chunked responses, TLS, connect/read/write/pool timeouts with PTB's meanings, and a retry of
a request that met a keep-alive connection the server had just closed (it was never processed).
Proxies are not spoken here: `bot.telegram.app` uses PTB's `HTTPXRequest` when the environment names one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import BaseRequest, RequestData

from bot.telegram._http11 import ProtocolError, Response, ResponseParser, multipart, request_head

IDLE_EXPIRY_S: Final = 30.0
"""An idle connection older than this is closed rather than reused (servers drop idle ones on their own)."""
POOL_TIMEOUT_S: Final = 20.0
"""How long a request may wait for a free connection; it has not been sent while it waits, so waiting is
cheaper than failing (PTB's httpx default is 1 s)."""
# `json.dumps(..., separators=...)` builds a new encoder per call; one kept here does the same work.
_JSON: Final = json.JSONEncoder(separators=(",", ":"))


def default_ssl_context() -> ssl.SSLContext:
    """The system's trust store plus certifi's bundle (what httpx trusts), so minimal images verify too."""
    context = ssl.create_default_context()
    with contextlib.suppress(ImportError, OSError):
        import certifi

        context.load_verify_locations(certifi.where())
    return context


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one URL goes: the pool's key and the request target (path and query)."""

    origin: tuple[str, str, int]
    host_header: str
    path: str


class BotApiRequest(BaseRequest):
    """A PTB `BaseRequest` on asyncio streams with a bounded keep-alive pool per origin."""

    __slots__ = (
        "_connections",
        "_media_write_timeout",
        "_pools",
        "_ssl",
        "_targets",
        "_timeouts",
    )

    def __init__(
        self,
        *,
        connections: int = 32,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = POOL_TIMEOUT_S,
        media_write_timeout: float | None = 20.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        if connections < 1:
            raise ValueError(f"connections must be at least 1, not {connections}")
        self._connections = connections
        self._timeouts = _Timeouts(read_timeout, write_timeout, connect_timeout, pool_timeout)
        self._media_write_timeout = media_write_timeout
        self._ssl = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._targets: dict[str, _Target] = {}

    @property
    def read_timeout(self) -> float | None:
        return self._timeouts.read

    async def initialize(self) -> None:
        """Nothing to open ahead: connections are made on first use."""

    async def shutdown(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        content_type, body = _body(request_data)
        defaults = self._timeouts
        if write_timeout is BaseRequest.DEFAULT_NONE:
            media = request_data is not None and request_data.contains_files
            write_timeout = self._media_write_timeout if media else defaults.write
        timeouts = _Timeouts(
            read=defaults.read if read_timeout is BaseRequest.DEFAULT_NONE else read_timeout,
            write=write_timeout,
            connect=defaults.connect if connect_timeout is BaseRequest.DEFAULT_NONE else connect_timeout,
            pool=defaults.pool if pool_timeout is BaseRequest.DEFAULT_NONE else pool_timeout,
        )
        response = await self._exchange(url, method, content_type, body, timeouts)
        return response.status, response.body

    async def post_json(
        self, url: str, payload: dict[str, Any], read: Callable[[bytes], Any] | None = None
    ) -> Any:
        """POST `payload` (plain JSON values) with the default timeouts; the Bot API's `result`.

        What `post` does for a `RequestData`, without building one: failures are the same PTB exceptions
        (`BadRequest`, `RetryAfter`, `Forbidden`, `TimedOut`, ...), mapped by PTB's own code. `read`, when
        given, takes a success's raw body instead and returns what the caller needs from it, or None to have
        the body decoded as usual (decoding the message Telegram echoes is most of the cost of a call).
        """
        body = _JSON.encode(payload).encode()
        try:
            response = await self._exchange(url, "POST", "application/json", body, self._timeouts)
        except TelegramError:
            raise
        except Exception as exc:  # as BaseRequest.post wraps what an HTTP implementation lets escape
            raise NetworkError(f"Unknown error in HTTP implementation: {exc!r}") from exc
        if 200 <= response.status <= 299:
            if read is not None and (value := read(response.body)) is not None:
                return value
            return self.parse_json_payload(response.body)["result"]
        return await _Answered(response).post(url)  # raises what PTB raises for this status and body

    async def _exchange(
        self, url: str, method: str, content_type: str | None, body: bytes, timeouts: _Timeouts
    ) -> Response:
        target = self._target(url)
        head = request_head(method, target.path, target.host_header, self.USER_AGENT, content_type, len(body))
        pool = self._pools.get(target.origin)
        if pool is None:
            pool = self._pools[target.origin] = _Pool(target.origin, self._connections, self._context_for)
        return await pool.exchange(head + body, method, timeouts)

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme not in ("http", "https") or not parts.hostname:
                raise NetworkError(f"not an http(s) URL: scheme {scheme!r}")
            default_port = 443 if scheme == "https" else 80
            port = parts.port or default_port
            host = parts.hostname
            host_header = host if port == default_port else f"{host}:{port}"
            if ":" in host:  # an IPv6 literal keeps its brackets in the Host header
                host_header = f"[{host}]" if port == default_port else f"[{host}]:{port}"
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            target = _Target((scheme, host, port), host_header, path)
            if len(self._targets) < 1024:  # Bot API URLs are a few dozen methods; file URLs vary
                self._targets[url] = target
        return target

    def _context_for(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = default_ssl_context()
        return self._ssl


class _Answered(BaseRequest):
    """A request whose answer is already here: its `post` is PTB's mapping of a status and body to a result
    or an exception, so `post_json` raises exactly what a PTB call would."""

    __slots__ = ("_response",)

    def __init__(self, response: Response) -> None:
        self._response = response

    @property
    def read_timeout(self) -> float | None:
        return None

    async def initialize(self) -> None:
        pass

    async def shutdown(self) -> None:
        pass

    async def do_request(self, *args: Any, **kwargs: Any) -> tuple[int, bytes]:
        return self._response.status, self._response.body


def _body(request_data: RequestData | None) -> tuple[str | None, bytes]:
    if request_data is None:
        return None, b""
    if request_data.contains_files:
        files = {
            name: (filename, content if isinstance(content, bytes) else content.read(), mimetype)
            for name, (filename, content, mimetype) in request_data.multipart_data.items()
        }
        return multipart(request_data.json_parameters, files)
    # The Bot API takes JSON bodies with nested objects; no per-field encoding as in form posts.
    return "application/json", _JSON.encode(request_data.parameters).encode()


@dataclass(frozen=True, slots=True)
class _Timeouts:
    read: float | None
    write: float | None
    connect: float | None
    pool: float | None


class _StaleConnection(NetworkError):
    """A reused connection was closed by the server before any byte of the response: never processed."""


class _Pool:
    """At most `size` connections to one origin; idle ones are reused newest first."""

    def __init__(
        self, origin: tuple[str, str, int], size: int, ssl_context: Callable[[], ssl.SSLContext]
    ) -> None:
        self._origin = origin
        self._slots = asyncio.Semaphore(size)
        self._idle: list[_Connection] = []
        self._ssl_context = ssl_context
        self._closed = False

    async def exchange(self, request: bytes, method: str, timeouts: _Timeouts) -> Response:
        await self._acquire(timeouts.pool)
        try:
            connection = self._reusable()
            if connection is not None:
                try:
                    return self._done(connection, await connection.exchange(request, method, timeouts))
                except _StaleConnection:
                    connection.close()
            connection = await self._connect(timeouts.connect)
            return self._done(connection, await connection.exchange(request, method, timeouts))
        finally:
            self._slots.release()

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _acquire(self, limit_s: float | None) -> None:
        if not self._slots.locked():
            await self._slots.acquire()  # does not suspend when a slot is free
            return
        try:
            async with asyncio.timeout(limit_s):
                await self._slots.acquire()
        except TimeoutError:
            raise TimedOut(
                "Pool timeout: every connection to the Bot API is busy; the request was not sent"
            ) from None

    def _reusable(self) -> _Connection | None:
        loop_time = asyncio.get_running_loop().time()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable and loop_time - connection.idle_since < IDLE_EXPIRY_S:
                return connection
            connection.close()
        return None

    def _done(self, connection: _Connection, response: Response) -> Response:
        if response.keep_alive and connection.usable and not self._closed:
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle.append(connection)
        else:
            connection.close()
        return response

    async def _connect(self, limit_s: float | None) -> _Connection:
        scheme, host, port = self._origin
        loop = asyncio.get_running_loop()
        tls = self._ssl_context() if scheme == "https" else None
        try:
            async with asyncio.timeout(limit_s):
                _, connection = await loop.create_connection(
                    lambda: _Connection(loop), host, port, ssl=tls, server_hostname=host if tls else None
                )
        except TimeoutError:
            raise TimedOut(f"Timed out connecting to {host}:{port}") from None
        except (OSError, ssl.SSLError) as exc:
            raise NetworkError(f"Could not connect to {host}:{port}: {exc}") from exc
        return connection


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._parser: ResponseParser | None = None
        self._waiter: asyncio.Future[Response] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._read_timeout: float | None = None
        self._lost = False
        self._used = False
        self._last_read = 0.0
        self.idle_since = 0.0

    @property
    def usable(self) -> bool:
        return not self._lost and self._transport is not None and not self._transport.is_closing()

    async def exchange(self, request: bytes, method: str, timeouts: _Timeouts) -> Response:
        assert self._transport is not None and self._waiter is None
        reused, self._used = self._used, True
        parser = self._parser = ResponseParser(head_request=method == "HEAD")
        waiter = self._waiter = self._loop.create_future()
        try:
            self._transport.write(request)
            if self._writable is not None:
                await self._drain(timeouts.write)
            self._last_read = self._loop.time()
            self._arm(timeouts.read)
            return await waiter
        except _StaleConnection:
            self.close()
            if reused and not parser.started:
                raise
            raise NetworkError("The Bot API server closed the connection without answering") from None
        except BaseException:
            self.close()  # a request cut off mid-way leaves the connection in an unknown state
            raise
        finally:
            self._waiter = self._parser = None

    def close(self) -> None:
        self._lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol -----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        parser, waiter = self._parser, self._waiter
        if parser is None or waiter is None or waiter.done():
            self.close()  # bytes nobody asked for: the server is out of step with us
            return
        self._last_read = self._loop.time()
        try:
            complete = parser.feed(data)
        except ProtocolError as exc:
            waiter.set_exception(NetworkError(f"Bad response from the Bot API server: {exc}"))
            self.close()
            return
        if complete:
            waiter.set_result(parser.response)

    def eof_received(self) -> bool:
        self._lost = True
        parser, waiter = self._parser, self._waiter
        if parser is not None and waiter is not None and not waiter.done():
            try:
                waiter.set_result(parser.eof())
            except ProtocolError:
                waiter.set_exception(_StaleConnection("closed before the response was complete"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(_StaleConnection(f"connection lost: {exc or 'closed'}"))
        self._wake_writer()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    # -- internals -------------------------------------------------------------------------------------

    async def _drain(self, limit_s: float | None) -> None:
        writable = self._writable
        if writable is None:
            return
        try:
            async with asyncio.timeout(limit_s):
                await asyncio.shield(writable)
        except TimeoutError:
            raise TimedOut("Timed out sending the request") from None
        if self._lost:
            raise _StaleConnection("connection lost while sending")

    def _wake_writer(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def _arm(self, timeout: float | None) -> None:
        """Watch this request's read timeout with the connection's one timer.

        A timer per request would be made and cancelled eight times an elicitation, and cancelled timers stay
        in the event loop's heap until they are due; one timer per connection, moved only when it fires, is
        nearly free.
        """
        self._read_timeout = timeout
        if timeout is None:
            return
        due = self._last_read + timeout
        if self._timer is None or self._timer_at > due:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at, self._timer = due, self._loop.call_at(due, self._read_timer)

    def _read_timer(self) -> None:
        # A read timeout is the longest silence between bytes (httpx's meaning), not a total deadline.
        self._timer = None
        waiter, timeout = self._waiter, self._read_timeout
        if waiter is None or waiter.done() or timeout is None:
            return  # idle (or answered): the next request arms it again
        due = self._last_read + timeout
        if self._loop.time() < due:
            self._timer_at, self._timer = due, self._loop.call_at(due, self._read_timer)
            return
        waiter.set_exception(TimedOut("Timed out waiting for the Bot API server"))

"""The HTTP client under PTB: a `telegram.request.BaseRequest` on aiohttp. Does I/O.

One `aiohttp.ClientSession` per request object (PTB keeps two: Bot API calls, and getUpdates). Proxies come from
the environment, as aiohttp's `trust_env=True` finds them (the same `urllib.request` functions): `HTTP_PROXY`
for http:// Bot API servers, `HTTPS_PROXY` for https:// ones (tunnelled with CONNECT), `NO_PROXY` to bypass;
lowercase names too; credentials in the proxy URL are sent as Proxy-Authorization. Like aiohttp, `ALL_PROXY`
and proxies given as https:// URLs are not used. The lookup is made once per origin, not per request:
`trust_env=True` would make it, and read ~/.netrc, in a worker thread for every request.

PTB's four timeouts, as far as aiohttp has them:

- `connect_timeout`: aiohttp's `sock_connect`, making a new connection (to the server or the proxy).
- `pool_timeout`: aiohttp has no wait of its own for a free connection; its `connect` timeout covers that
  wait *and* making the connection, so it is set to `pool_timeout + connect_timeout`, and running out of
  either is the same `TimedOut`. The request was not sent.
- `read_timeout`: aiohttp's `sock_read`, the longest silence between bytes of the answer (httpx's meaning),
  counted from when the request was written.
- `write_timeout`: aiohttp has none. Bot API calls here are a few KB and go out at once.
- On top of these, a whole exchange has a deadline (`total`): the pool wait and connect, plus twice the read
  timeout. A server that drips its answer a byte at a time within the read timeout, or stops reading an
  upload, cannot hold a request (and so a shutdown) for longer.

A request is sent at most once: aiohttp re-sends a request that met a keep-alive connection the server had
just closed only for idempotent methods (`aiohttp.client.IDEMPOTENT_METHODS`: GET, HEAD, ...), and every Bot
API call is a POST; redirects are not followed. When the connection drops after a request went out, the
caller gets `NetworkError` (Telegram may or may not have acted on it; a second `sendMessage` would be a
duplicate). Answers are read up to `max_response_bytes`, counted as they arrive. Errors are PTB's `TimedOut`
and `NetworkError` and never carry the URL, which holds the bot token.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final
from urllib.parse import quote, urlsplit

import aiohttp
import orjson
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import BaseRequest, RequestData

logger = logging.getLogger(__name__)

__all__ = ["MAX_RESPONSE_BYTES", "POOL_TIMEOUT_S", "AiohttpRequest", "default_ssl_context"]

POOL_TIMEOUT_S: Final = 20.0
"""How long a request may wait for a free connection; it has not been sent while it waits, so waiting is
cheaper than failing (PTB's httpx default is 1 s)."""
MAX_RESPONSE_BYTES: Final = 20 * 1024 * 1024
"""The largest answer read: Telegram's limit for a file a bot downloads, far above any JSON answer."""
_CHUNK: Final = 64 * 1024


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The system's trust store plus certifi's bundle (what httpx trusts), so minimal images verify too. Built
    once per process (reading both bundles costs about 50 ms of CPU) and shared: nothing changes it once made."""
    context = ssl.create_default_context()
    with contextlib.suppress(ImportError, OSError):
        import certifi

        context.load_verify_locations(certifi.where())
    return context


_ON_WRITTEN: ContextVar[Callable[[], None] | None] = ContextVar("request_on_written", default=None)


@contextmanager
def on_written(callback: Callable[[], None]) -> Iterator[None]:
    """Requests made inside this block call `callback` as their body is written to the connection (each time
    a part of it is). aiohttp writes a body from a task of its own, which on Python 3.11 starts in the event
    loop's next pass: under load, tens of milliseconds after the request was made."""
    token = _ON_WRITTEN.set(callback)
    try:
        yield
    finally:
        _ON_WRITTEN.reset(token)


def report_written() -> None:
    """Called as a request's body is written: the `on_written` callback of the block it was made in runs."""
    callback = _ON_WRITTEN.get()  # aiohttp starts the body's task inside the request's context
    if callback is not None:
        callback()


async def _body_written(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
    report_written()


class AiohttpRequest(BaseRequest):
    """A PTB `BaseRequest` on one `aiohttp.ClientSession` with at most `connections` connections."""

    __slots__ = (
        "_connections",
        "_defaults",
        "_max_response_bytes",
        "_proxies",
        "_session",
        "_ssl",
        "_written_hook",
    )

    def __init__(
        self,
        *,
        connections: int = 32,
        read_timeout: float | None = 5.0,
        write_timeout: float | None = 5.0,
        connect_timeout: float | None = 5.0,
        pool_timeout: float | None = POOL_TIMEOUT_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        ssl_context: ssl.SSLContext | None = None,
        written_hook: bool = True,
    ) -> None:
        """`written_hook` False: a client whose requests are never made inside `on_written` (getUpdates),
        without aiohttp's trace hook, which costs every request its trace signals."""
        if connections < 1:
            raise ValueError(f"connections must be at least 1, not {connections}")
        if max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be at least 1, not {max_response_bytes}")
        self._connections = connections
        self._defaults = (read_timeout, write_timeout, connect_timeout, pool_timeout)
        self._max_response_bytes = max_response_bytes
        self._ssl = ssl_context
        self._written_hook = written_hook
        self._session: aiohttp.ClientSession | None = None
        self._proxies: dict[str, str | None] = {}

    @property
    def read_timeout(self) -> float | None:
        return self._defaults[0]

    async def initialize(self) -> None:
        """Open the session (connections are made on first use)."""
        if self._session is None or self._session.closed:
            if self._ssl is None:
                self._ssl = default_ssl_context()
            connector = aiohttp.TCPConnector(limit=self._connections, ssl=self._ssl)
            self._proxies = {}  # the environment is read again after a restart
            traces = []
            if self._written_hook:
                trace = aiohttp.TraceConfig()
                trace.on_request_chunk_sent.append(_body_written)
                traces.append(trace)
            self._session = aiohttp.ClientSession(
                connector=connector,
                trace_configs=traces,
                headers={"User-Agent": self.USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=None),
            )

    async def shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        """Telegram's JSON answer, decoded by orjson; `TelegramError` when it is not a JSON object."""
        try:
            decoded = orjson.loads(payload)
        except orjson.JSONDecodeError:
            decoded = None
        if not isinstance(decoded, dict):
            logger.warning("the Bot API server's answer is not a JSON object (%d bytes)", len(payload))
            raise TelegramError("Invalid server response")
        return decoded

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
        if self._session is None or self._session.closed:
            await self.initialize()
        assert self._session is not None
        read, _, connect, pool = (
            default if given is BaseRequest.DEFAULT_NONE else given
            for given, default in zip(
                (read_timeout, write_timeout, connect_timeout, pool_timeout), self._defaults, strict=True
            )
        )
        timeout = aiohttp.ClientTimeout(
            total=None if read is None else (connect or 0.0) + (pool or 0.0) + 2 * read,
            connect=None if connect is None or pool is None else connect + pool,
            sock_connect=connect,
            sock_read=read,
        )
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in self._proxies:
            self._proxies[origin] = _environment_proxy(origin)
        proxy = self._proxies[origin]
        try:
            async with self._session.request(
                method,
                url,
                timeout=timeout,
                allow_redirects=False,
                proxy=proxy,
                **_body(request_data),
            ) as response:
                return response.status, await self._read(response)
        except TelegramError:
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _translate(exc, url) from None

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The whole body, refused as soon as it is longer than the cap (declared or counted)."""
        cap = self._max_response_bytes
        declared = response.content_length
        if declared is not None and declared > cap:
            response.close()
            raise NetworkError(f"The Bot API server's answer is too large ({declared} bytes; at most {cap})")
        chunks, size = [], 0
        async for chunk in response.content.iter_chunked(_CHUNK):
            size += len(chunk)
            if size > cap:
                response.close()
                raise NetworkError(f"The Bot API server's answer is too large (over {cap} bytes)")
            chunks.append(chunk)
        return b"".join(chunks)


def _environment_proxy(origin: str) -> str | None:
    """The proxy the environment names for `origin` (`scheme://host[:port]`), or None. Credentials in its URL
    stay there: aiohttp sends them to the proxy as Proxy-Authorization."""
    parts = urlsplit(origin)
    named = urllib.request.getproxies().get(parts.scheme)
    if not named or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    if urlsplit(named).scheme != "http":
        logger.warning("only http:// proxies are supported; going to %s without one", parts.hostname)
        return None
    return named


def _body(request_data: RequestData | None) -> dict[str, Any]:
    """aiohttp's arguments for the body: JSON (nested objects as they are), or multipart for files."""
    if request_data is None:
        return {}
    if not request_data.contains_files:
        return {
            "data": orjson.dumps(request_data.parameters),
            "headers": {"Content-Type": "application/json"},
        }
    form = aiohttp.FormData()
    for name, value in request_data.json_parameters.items():
        form.add_field(name, value)
    for name, (filename, content, mimetype) in request_data.multipart_data.items():
        form.add_field(name, content, filename=filename, content_type=mimetype)
    return {"data": form}


def _translate(exc: BaseException, url: str) -> NetworkError:
    """PTB's exception for what aiohttp raised, with a message that names no URL (the token is in it)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        error: NetworkError = TimedOut(
            "Timed out connecting to the Bot API server or waiting for a free connection; "
            "the request was not sent"
        )
    elif isinstance(exc, TimeoutError):  # aiohttp's read timeouts are TimeoutErrors too
        error = TimedOut("Timed out waiting for the Bot API server to answer")
    elif isinstance(exc, aiohttp.ClientConnectorCertificateError):
        error = NetworkError(f"The Bot API server's TLS certificate was refused: {exc.certificate_error}")
    elif isinstance(exc, aiohttp.ClientConnectorError):
        what = "the proxy" if isinstance(exc, aiohttp.ClientProxyConnectionError) else "the Bot API server"
        reason = exc.os_error.strerror or type(exc.os_error).__name__
        error = NetworkError(f"Could not connect to {what} at {exc.host}:{exc.port}: {reason}")
    elif isinstance(exc, aiohttp.ClientHttpProxyError):
        error = NetworkError(f"The proxy refused to forward the request: HTTP {exc.status}")
    elif isinstance(exc, aiohttp.ServerDisconnectedError):
        error = NetworkError(
            "The Bot API server closed the connection without answering; "
            "the request may have been processed and is not sent again"
        )
    elif isinstance(exc, aiohttp.ClientPayloadError):
        error = NetworkError("The Bot API server's answer was cut off")
    else:
        error = NetworkError(f"Bot API request failed: {type(exc).__name__}: {exc}")
    return _without_url(error, url)


def _without_url(error: NetworkError, url: str) -> NetworkError:
    """`error`, or its like with the URL, its path and its `bot<token>` part cut out of the message."""
    path = urlsplit(url).path
    tokens = [part for part in path.split("/") if part.startswith("bot")]
    message = error.message
    for secret in (url, path, *tokens, *(quote(part) for part in tokens)):
        if secret and secret in message:
            message = message.replace(secret, "<Bot API URL>")
    return error if message == error.message else type(error)(message)

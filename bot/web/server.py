"""Serving the ASGI app with uvicorn in the bot's own task group, with limits on slow clients. Does I/O.

uvicorn closes a connection that stays idle after a response (`timeout_keep_alive`), but nothing closes one
that sends a request's headers or body too slowly, or never finishes them: 1,000 such connections would stay
open for good. `_DeadlineH11` (uvicorn's h11 protocol, given to uvicorn as `Config(http=...)`) adds one
deadline: from the moment a connection opens or a response ends, the client has `REQUEST_TIMEOUT_S` to send
its next request in full, or the connection is closed. A request that has arrived is never cut short while
the app answers it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import anyio
import h11
import uvicorn
from anyio.abc import TaskStatus
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["REQUEST_TIMEOUT_S", "WebServer"]

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_S: Final = 5.0
"""A client's time to send a whole request (headers and body) after connecting or after a response."""
SHUTDOWN_GRACE_S: Final = 2
"""On stop, requests still being answered get this long before they are cancelled."""
BACKLOG: Final = 2048


class _DeadlineH11(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose client takes too long to send a request."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = self.loop.call_later(REQUEST_TIMEOUT_S, self._expire)

    def _expire(self) -> None:
        # IDLE: no request (or only part of its headers) yet; SEND_BODY: its body has not all arrived.
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self.transport.close()


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the bot owns SIGINT/SIGTERM and stops it in order."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


Service = Callable[..., Coroutine[Any, Any, None]]
"""Something the app needs running while it serves (`async def run(*, task_status)`), e.g. the gateway's sessions."""


class WebServer:
    """One uvicorn server for `app` on `listen:port`; `run` in a task group, `stop` to end it.

    `services` start (each `tg.start`ed) before the first request is taken and are cancelled once the server has
    stopped, so requests being answered at `stop` still find them."""

    def __init__(self, app: ASGIApp, listen: str, port: int, services: Sequence[Service] = ()) -> None:
        self.listen = listen
        self.port = port
        self.services = tuple(services)
        config = uvicorn.Config(
            app,
            http=_DeadlineH11,
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            server_header=False,
            timeout_keep_alive=int(REQUEST_TIMEOUT_S),
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            backlog=BACKLOG,
        )
        self._server = _Server(config)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen, report started, serve until `stop`.

        Raises:
            OSError: the address cannot be listened on (in use, not local, no permission).
        """
        try:
            listener = _listener(self.listen, self.port)
        except OSError as exc:
            where = f"{self.listen}:{self.port}"
            raise OSError(exc.errno, f"[web] cannot listen on {where}: {exc.strerror or exc}") from None
        self.port = listener.getsockname()[1]
        with listener:  # uvicorn closes it when it shuts down, but not when it is cancelled
            async with anyio.create_task_group() as tg:
                for service in self.services:
                    await tg.start(service)

                async def serve() -> None:
                    await self._server.serve([listener])
                    tg.cancel_scope.cancel()  # the services end with the server

                tg.start_soon(serve)
                await self._server.listening.wait()
                logger.info("web endpoint listening on %s:%s", self.listen, self.port)
                task_status.started()

    def stop(self) -> None:
        """Stop accepting connections, let requests being answered finish (briefly), then return from `run`."""
        self._server.should_exit = True


def _listener(host: str, port: int) -> socket.socket:
    # A socket made with IPPROTO_TCP (not 0) gets TCP_NODELAY from asyncio, on each accepted connection too.
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock

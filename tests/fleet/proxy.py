"""A round-robin HTTP proxy in front of a fleet's instances, as a load balancer is: a test fixture on 127.0.0.1.

Every path goes to any instance, in turn. An instance that refuses the connection (dead, or not started yet) is
skipped for the next one, as a load balancer's passive health check does; a request that reached an instance
and got no answer (it died while handling it) gets 502, so Telegram delivers the update again. Whatever an
instance answers (503 while it drains included) goes back to the caller unchanged.

Tests steer it: `duplicate_next()` sends the next request to two instances at once (a load balancer that retried
a request it thought lost), `send_next_to(i)` sends the next one to instance i. Every forwarded request is
listed in `deliveries` with the update it carried. Does I/O (HTTP both ways).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import anyio
import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Delivery", "RoundRobinProxy", "round_robin_proxy"]

_HOP_BY_HOP: Final = frozenset({
    "connection", "keep-alive", "transfer-encoding", "content-length", "host", "te", "trailer", "upgrade",
})  # fmt: skip
REFUSED: Final = -1
"""`Delivery.status` when the instance refused the connection (skipped for the next one)."""
NO_ANSWER: Final = -2
"""`Delivery.status` when the instance took the request and gave no answer (it died while handling it)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One request forwarded to one instance: which, the update it carried (None elsewhere), the answer."""

    instance: int
    path: str
    update_id: int | None
    status: int
    """The instance's HTTP status, or `REFUSED` / `NO_ANSWER`."""
    kind: str | None = None
    """The update's kind ("message", "callback_query"), for a webhook delivery."""
    sender: int | None = None
    """The id of the person whose action the update is, for a webhook delivery."""


@dataclass
class RoundRobinProxy:
    """The proxy's state; `url` once it listens. `backends` are the instances' base URLs (http://127.0.0.1:port)."""

    backends: list[str]
    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    _next: int = 0
    _duplicates: int = 0
    _pinned: list[int] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)
    _client: httpx.AsyncClient | None = None

    def duplicate_next(self, times: int = 1) -> None:
        """The next `times` requests each go to two instances at once (the one in turn and the next one)."""
        self._duplicates += times

    def send_next_to(self, instance: int) -> None:
        """The next request goes to `instance` first (then on in turn if it refuses the connection)."""
        self._pinned.append(instance)

    def handled_by(self, update_id: int) -> list[int]:
        """The instances that answered 200 to a delivery of this update."""
        return [d.instance for d in self.deliveries if d.update_id == update_id and d.status == 200]

    async def wait_for(
        self,
        predicate: Callable[[Delivery], bool],
        timeout: float = 30,  # noqa: ASYNC109 - like FakeTelegram.wait_for
    ) -> Delivery:
        """The first delivery matching `predicate`, now or once it happens."""
        with anyio.fail_after(timeout):
            while True:
                found = next((d for d in self.deliveries if predicate(d)), None)
                if found is not None:
                    return found
                await self._changed.wait()

    def _note(self, delivery: Delivery) -> None:
        self.deliveries.append(delivery)
        self._changed.set()
        self._changed = anyio.Event()

    def _first_choice(self) -> int:
        if self._pinned:
            return self._pinned.pop(0) % len(self.backends)
        chosen = self._next % len(self.backends)
        self._next += 1
        return chosen

    async def _forward(self, instance: int, request: Request, body: bytes) -> Response | None:
        """The instance's answer, or None when it refused the connection."""
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        target = self.backends[instance] + request.url.path
        if request.url.query:
            target += "?" + request.url.query
        update_id, kind, sender = _update(body) if request.url.path == "/telegram" else (None, None, None)
        try:
            answer = await self._client.request(request.method, target, content=body, headers=headers)
        except httpx.ConnectError:
            self._note(Delivery(instance, request.url.path, update_id, REFUSED, kind, sender))
            return None
        except httpx.TransportError:
            self._note(Delivery(instance, request.url.path, update_id, NO_ANSWER, kind, sender))
            return Response("Bad Gateway: the instance gave no answer", status_code=502)
        self._note(Delivery(instance, request.url.path, update_id, answer.status_code, kind, sender))
        kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
        return Response(answer.content, status_code=answer.status_code, headers=kept)

    async def _to_one(self, first: int, request: Request, body: bytes) -> Response:
        """From `first` on in turn until an instance takes the connection (502 when none does)."""
        for step in range(len(self.backends)):
            answer = await self._forward((first + step) % len(self.backends), request, body)
            if answer is not None:
                return answer
        return Response("Bad Gateway: no instance is listening", status_code=502)

    async def handle(self, request: Request) -> Response:
        body = await request.body()
        first = self._first_choice()
        if self._duplicates <= 0 or len(self.backends) < 2:
            return await self._to_one(first, request, body)
        self._duplicates -= 1
        answers: list[Response] = []

        async def one(instance: int) -> None:
            answers.append(await self._to_one(instance, request, body))

        async with anyio.create_task_group() as tg:  # both at once: the instances race on the same update
            tg.start_soon(one, first)
            tg.start_soon(one, (first + 1) % len(self.backends))
        return next((a for a in answers if a.status_code == 200), answers[0])


def _update(body: bytes) -> tuple[int | None, str | None, int | None]:
    """An update's id, kind and sender, as far as the body says them."""
    try:
        data = json.loads(body)
    except ValueError:
        return None, None, None
    if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
        return None, None, None
    kind = next((k for k in data if k != "update_id"), None)
    event = data.get(kind) if kind is not None else None
    sender = event.get("from", {}).get("id") if isinstance(event, dict) else None
    return data["update_id"], kind, sender if isinstance(sender, int) else None


@asynccontextmanager
async def round_robin_proxy(backends: list[str]) -> AsyncIterator[RoundRobinProxy]:
    """The proxy listening on a free 127.0.0.1 port for as long as the block runs."""
    proxy = RoundRobinProxy(list(backends))
    methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
    app = Starlette(routes=[Route("/{path:path}", proxy.handle, methods=methods)])
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_keep_alive=75)
    server = uvicorn.Server(config)
    # Listening before uvicorn starts, so the fake can deliver at once (no waiting for `server.started`).
    with socket.create_server(("127.0.0.1", 0)) as listener:
        proxy.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        # No pooled connection outlives an instance's restart: a reused socket to a dead process would be
        # a read error (502) where a fresh one is refused (skipped), as a load balancer sees it.
        limits = httpx.Limits(max_keepalive_connections=0)
        async with (
            httpx.AsyncClient(trust_env=False, timeout=30, limits=limits) as client,
            anyio.create_task_group() as tg,
        ):
            proxy._client = client
            tg.start_soon(server.serve, [listener])
            try:
                yield proxy
            finally:
                server.should_exit = True

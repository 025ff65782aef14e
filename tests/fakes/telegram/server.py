"""`FakeTelegram`: the fake Bot API's HTTP side (starlette + uvicorn, 127.0.0.1, free port), fault injection.

I/O: serves PTB's requests in the test's own event loop, decodes params like Telegram, records calls/errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Final, Self

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .api import BotApi
from .faults import Fault, Faults, FloodLimiter, RateLimits, default_description
from .model import JSON, ApiReject, ErrorReply, PollTerminated, ScriptError
from .state import World

# PTB form-encodes str params raw and everything else as JSON, so these must never be JSON-decoded
# (text "123" would become an int). Unlisted fields are decoded as JSON when they parse.
_STRING_PARAMS: Final = frozenset({
    "text", "parse_mode", "callback_query_id", "url", "secret_token", "action", "language_code",
    "inline_message_id", "caption", "ip_address", "emoji", "title", "description", "short_description",
    "name", "query_id", "business_connection_id", "message_effect_id", "custom_title",
})  # fmt: skip
SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
WEBHOOK_RETRY_S: Final = 0.2
"""Between attempts to deliver an update the webhook did not take (`deliver_via_webhook(retry=True)`)."""


class FakeTelegram(World):
    """A fake Telegram Bot API server for end-to-end tests; see the package docstring for the contract."""

    def __init__(
        self,
        *,
        bot_id: int = 123456,
        bot_username: str = "fake_test_bot",
        rate_limit: bool | RateLimits = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(bot_id=bot_id, bot_username=bot_username)
        self.token = f"{bot_id}:TEST-fake-token-for-tests"
        limits = RateLimits() if rate_limit is True else rate_limit or None
        self.flood = FloodLimiter(limits, clock) if limits else None
        """The rate limits enforced (`rate_limit`), with the times of the messages they let through."""
        self._api = BotApi(self, self.flood)
        self._clock = clock
        self.call_times: list[float] = []
        """When each of `calls` was received (by `clock`), in the same order: rates counted as Telegram would."""
        self._faults = Faults()
        self._call_counts: Counter[str] = Counter()
        self._server: uvicorn.Server | None = None
        self.port = 0
        self.abandoned: list[tuple[str, JSON]] = []
        """Held (`hang`) calls whose client gave up (closed the connection) before the fake answered."""
        self.webhook_attempts: list[tuple[int, int | None]] = []
        """Webhook deliveries with `retry`: (update_id, HTTP status, or None when nobody answered), in order."""
        self._holding: set[str] = set()
        self.held: Counter[str] = Counter()
        """Calls held now (`hold`), by method (lower case)."""
        self._outbox: list[JSON] = []
        self._outbox_changed = asyncio.Event()
        self._outbox_task: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        """For `ApplicationBuilder().base_url(...)`: PTB appends the token and the method name."""
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        """For `ApplicationBuilder().base_file_url(...)`; the fake serves no files (404)."""
        return f"http://127.0.0.1:{self.port}/file/bot"

    # --- lifecycle ------------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        app = Starlette(
            routes=[
                Route("/bot{token}/{method}", self._endpoint, methods=["GET", "POST"]),
                Route("/file/bot{token}/{path:path}", self._no_file, methods=["GET"]),
            ]
        )
        # uvicorn binds the socket itself: its sockets have proto IPPROTO_TCP, so asyncio sets TCP_NODELAY
        # (a hand-made proto-0 socket costs ~44 ms per keep-alive request; telegram.md §4).
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            # httpx (PTB) keeps idle connections for 5 s, uvicorn's default too: a request sent as uvicorn
            # closes one fails with ReadError. Telegram keeps them far longer; so does the fake.
            timeout_keep_alive=75,
        )
        config.load()
        server = uvicorn.Server(config)
        # Server.serve() would add a 0.1 s tick loop and signal handlers; startup() alone just listens.
        server.lifespan = config.lifespan_class(config)
        await server.startup()
        self._server = server
        self.port = server.servers[0].sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._outbox_task is not None:
            self._outbox_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._outbox_task
        server, self._server = self._server, None
        if server is None:
            return
        self.closing = True
        self.notify()  # releases long polls and hung requests, so in-flight tasks finish now
        for listener in server.servers:
            listener.close()
        for connection in list(server.server_state.connections):
            connection.shutdown()
        if server.server_state.tasks:
            _, stuck = await asyncio.wait(list(server.server_state.tasks), timeout=5)
            for task in stuck:  # e.g. a method blocked on something the test never provided
                task.cancel()
        for listener in server.servers:
            await listener.wait_closed()

    # --- fault injection ------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        status: int = 429,
        description: str | None = None,
        *,
        retry_after: int | None = None,
        times: int = 1,
        hang: bool = False,
    ) -> None:
        """Make the next `times` calls of `method` fail with `status` (recorded as injected errors).

        429 carries {"parameters": {"retry_after": N}} (default 1). With `hang`, each call is held
        unanswered until the next call of the same method or the fake stops (the client sees a timeout).
        """
        if status == 429 and retry_after is None:
            retry_after = 1
        text = description or default_description(status, retry_after)
        self._faults.add(method, Fault(status, text, retry_after, hang, times))

    # --- webhooks -------------------------------------------------------------------------------------

    def hold(self, method: str) -> None:
        """A Bot API server slow to answer: from now on every call of `method` is held, neither carried out nor
        answered, until `release` (then each is carried out and answered in turn) or until its client gives up
        (closes the connection: the call never happened, and is listed in `abandoned`). `held` counts them."""
        self._holding.add(method.lower())

    def release(self, method: str) -> None:
        """Carry out and answer the calls of `method` held so far (`hold`), and hold no more."""
        self._holding.discard(method.lower())
        self.notify()

    async def _held(self, method: str, params: JSON, request: Request) -> bool:
        """Hold a call (`hold`) until released (True) or given up by its client (False)."""
        key = method.lower()
        gone = asyncio.ensure_future(_disconnected(request))
        self.held[key] += 1
        self.notify()
        try:
            while not self.closing and key in self._holding:
                if gone.done():
                    self.abandoned.append((method, params))
                    return False
                changed = asyncio.ensure_future(self.next_change())
                await asyncio.wait({gone, changed}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
            return True
        finally:
            self.held[key] -= 1
            gone.cancel()
            self.notify()

    async def post_update_to(self, url: str, update: JSON, *, secret_token: str | None = None) -> int:
        """POST an Update as Telegram does to a webhook; returns the HTTP status."""
        headers = {SECRET_HEADER: secret_token} if secret_token else {}
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.post(url, json=update, headers=headers, timeout=5)
        return response.status_code

    def deliver_via_webhook(
        self,
        url: str | None,
        *,
        secret_token: str | None = None,
        retry: bool = False,
        connections: int = 1,
    ) -> None:
        """Send users' future updates to `url` instead of queueing them for getUpdates (None: queue again).

        A delivery the webhook does not answer with 200 raises ScriptError in the user action. With `retry`, as
        Telegram does: updates are delivered in order by a task of the fake's, and one answered with anything
        but 2xx (or not answered: nobody listens) is delivered again every `WEBHOOK_RETRY_S` until it is taken;
        every attempt is listed in `webhook_attempts` as (update_id, HTTP status or None). With `retry` and
        `connections` over 1 (Telegram's `max_connections`, 40 by default), up to that many updates are
        delivered at once, each retried on its own: no order between them, as for a fleet under load.
        """
        if url is None:
            self._deliver = None
            return
        if retry and connections > 1:
            self._deliver = self._delivering_at_once(url, secret_token, connections)
            return
        if retry:
            self._outbox_task = asyncio.get_running_loop().create_task(
                self._deliver_in_order(url, secret_token)
            )

            async def queue(update: JSON) -> None:
                self._outbox.append(update)
                self._outbox_changed.set()

            self._deliver = queue
            return

        async def deliver(update: JSON) -> None:
            status = await self.post_update_to(url, update, secret_token=secret_token)
            if status != 200:
                raise ScriptError(f"webhook {url} answered {status} to update {update['update_id']}")

        self._deliver = deliver

    async def wait_for_attempt(
        self,
        predicate: Callable[[int, int | None], bool],
        timeout: float = 5.0,  # noqa: ASYNC109 - like wait_for
    ) -> tuple[int, int | None]:
        """Wait for a webhook delivery attempt (update_id, status) matching `predicate` (`retry` mode)."""

        def check() -> tuple[int, int | None] | None:
            return next((a for a in self.webhook_attempts if predicate(*a)), None)

        return await self._until(check, timeout, "no webhook delivery attempt matched")

    def _delivering_at_once(
        self, url: str, secret_token: str | None, connections: int
    ) -> Callable[[JSON], Awaitable[None]]:
        headers = {SECRET_HEADER: secret_token} if secret_token else {}
        limits = httpx.Limits(max_connections=connections)
        client = httpx.AsyncClient(trust_env=False, limits=limits)
        slots = asyncio.Semaphore(connections)
        tasks: set[asyncio.Task[None]] = set()

        async def one(update: JSON) -> None:
            while not self.closing:
                status: int | None
                async with slots:
                    try:
                        status = (
                            await client.post(url, json=update, headers=headers, timeout=30)
                        ).status_code
                    except httpx.TransportError:
                        status = None
                self.webhook_attempts.append((update["update_id"], status))
                self.notify()
                if status is not None and 200 <= status < 300:
                    return
                await asyncio.sleep(WEBHOOK_RETRY_S)

        async def deliver_all() -> None:
            try:
                await asyncio.Event().wait()  # until the fake stops: then the deliveries still going end
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await client.aclose()

        self._outbox_task = asyncio.get_running_loop().create_task(deliver_all())

        async def queue(update: JSON) -> None:
            task = asyncio.get_running_loop().create_task(one(update))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        return queue

    async def _deliver_in_order(self, url: str, secret_token: str | None) -> None:
        headers = {SECRET_HEADER: secret_token} if secret_token else {}
        async with httpx.AsyncClient(trust_env=False) as client:
            while True:
                if not self._outbox:
                    self._outbox_changed.clear()
                    await self._outbox_changed.wait()
                    continue
                update = self._outbox[0]
                status: int | None
                try:
                    status = (await client.post(url, json=update, headers=headers, timeout=5)).status_code
                except httpx.TransportError:
                    status = None
                self.webhook_attempts.append((update["update_id"], status))
                self.notify()
                if status is not None and 200 <= status < 300:
                    self._outbox.pop(0)
                else:
                    await asyncio.sleep(WEBHOOK_RETRY_S)  # Telegram's back-off, shortened

    # --- HTTP -----------------------------------------------------------------------------------------

    async def _endpoint(self, request: Request) -> JSONResponse:
        method = request.path_params["method"]
        params = await _read_params(request)
        self.calls.append((method, params))
        self.call_times.append(self._clock())
        self._call_counts[method.lower()] += 1
        self.notify()
        try:
            if request.path_params["token"] != self.token:
                raise ApiReject(401, "Unauthorized")
            implementation = self._api.lookup(method)
            if implementation is None:
                raise ApiReject(404, "Not Found: method not found")
            if method.lower() in self._holding and not await self._held(method, params, request):
                return JSONResponse({"ok": False, "error_code": 499, "description": "abandoned"})
            fault = self._faults.take(method)
            if fault is not None:
                if fault.hang:
                    await self._hold(method, params, request)
                return self._error(method, params, fault.reject(), injected=True)
            result = await implementation(params)
        except PollTerminated as rejected:
            if await request.is_disconnected():  # abandoned by its bot: nobody reads the answer
                return JSONResponse({"ok": True, "result": []})
            return self._error(method, params, rejected, injected=False)
        except ApiReject as rejected:
            return self._error(method, params, rejected, injected=False)
        return JSONResponse({"ok": True, "result": result})

    async def _no_file(self, request: Request) -> JSONResponse:
        return self._error("file", dict(request.path_params), ApiReject(404, "Not Found"), injected=False)

    async def wait_for_abandoned(self, method: str, timeout: float = 10.0) -> JSON:  # noqa: ASYNC109 - like wait_for
        """Wait until the client gave up on a held call of `method` (see `fail_next(hang=True)`); its params."""

        def check() -> JSON | None:
            return next((p for m, p in self.abandoned if m.lower() == method.lower()), None)

        return await self._until(check, timeout, f"no held {method} call was given up by the client")

    async def _hold(self, method: str, params: JSON, request: Request) -> None:
        """Hold the call until the next call of `method`, the fake stops, or the client gives up on it."""
        seen = self._call_counts[method.lower()]
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            while not self.closing and self._call_counts[method.lower()] == seen:
                if gone.done():
                    self.abandoned.append((method, params))
                    self.notify()
                    return
                changed = asyncio.ensure_future(self.next_change())
                await asyncio.wait({gone, changed}, return_when=asyncio.FIRST_COMPLETED)
                changed.cancel()
        finally:
            gone.cancel()

    def _error(self, method: str, params: JSON, rejected: ApiReject, *, injected: bool) -> JSONResponse:
        self.errors.append(ErrorReply(method, rejected.status, rejected.description, params, injected))
        body: JSON = {"ok": False, "error_code": rejected.status, "description": rejected.description}
        if rejected.retry_after is not None:
            body["parameters"] = {"retry_after": rejected.retry_after}
        return JSONResponse(body, status_code=rejected.status)


async def _disconnected(request: Request) -> None:
    """Return once the client closed the connection (the body is read already, so nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _read_params(request: Request) -> JSON:
    params: JSON = {k: _decode(k, v) for k, v in request.query_params.items()}
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        body = await request.json()
        if isinstance(body, dict):
            params.update(body)
    elif content_type.startswith(("application/x-www-form-urlencoded", "multipart/form-data")):
        async with request.form() as form:
            for k, v in form.items():
                params[k] = _decode(k, v) if isinstance(v, str) else await v.read()  # a file: its bytes
    return params


def _decode(key: str, value: str) -> Any:
    if key in _STRING_PARAMS:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value

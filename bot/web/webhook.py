"""`POST /telegram`: Telegram's webhook delivery, checked and handed to PTB's update queue. Does I/O.

The secret header is compared in constant time before a byte of the body is read, so a stranger's request
costs its headers and no more. The body is refused over `MAX_BODY` bytes, by its Content-Length first and
then by counting what arrives (a chunked body has no length). An answer of 200 tells Telegram the update
arrived; anything else makes Telegram deliver it again later, so only a well-formed update gets 200. An update
the bot will not take now (`takes`: it is draining, and the update is new work) gets 503: Telegram delivers it
again, to the next process.

With a database (`inbox`), the update's id is recorded, committed, before the 200 and before PTB gets the
update: a redelivery (Telegram did not see the 200 in time, or delivers again after a restart, to this process or
another) finds its row and gets 200 without being handled again. When the database cannot be written the answer is
503, so Telegram delivers the update again later, rather than the bot handling an update it could not record.

In a fleet (`Routing`) an update is handled by the instance that owns its user's partition (`bot.store.fleet`):
the receiving instance records it; if it owns the user it handles it at once, as above; otherwise the update waits
in the inbox with its partition, the owner is woken through the fleet bus (topic "inbox", in the recording
transaction), and the answer is 200. The owner claims the waiting updates of its partitions and hands them to PTB;
it also looks for them after every (re)connect of the bus and whenever partitions it took are taken up (updates
that came while their old owner was dead). A partition just taken is not handled, even by its new owner, until
its people's kept cards are placed again (`Partitions.handles`): until then its updates wait in the inbox too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hmac
import json
import logging
from collections.abc import Callable, Collection
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskStatus
from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from telegram import Bot, Update

from bot.core.fleet import Bus
from bot.store.errors import StoreUnavailable
from bot.store.fleet import Partitions, partition_of
from bot.store.inbox import InboxStore, Waiting
from bot.web.bounded_json import TooDeep, loads

logger = logging.getLogger(__name__)

SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY: Final = 1 << 20
"""Bytes; Telegram's updates are a few kilobytes."""


class Router(Protocol):
    """Which instance handles an update: this one (None), or the owner of its user, for whom it waits."""

    def waiting(self, update: Update, body: bytes) -> Waiting | None:
        """How `update` waits for its owner, or None when this process handles it now."""
        ...


class _HandledHere:
    """A process alone handles every update it receives."""

    def waiting(self, update: Update, body: bytes) -> Waiting | None:
        return None


HANDLED_HERE: Final[Router] = _HandledHere()
"""The router of a process alone (the webhook's default)."""


class Webhook:
    """The endpoint: `Route("/telegram", Webhook(...).handle, methods=["POST"])`."""

    def __init__(
        self,
        secret: str,
        bot: Bot,
        queue: asyncio.Queue[Any],
        takes: Callable[[Update], bool] = lambda u: True,
        inbox: InboxStore | None = None,
        bot_id: int = 0,
        routing: Router = HANDLED_HERE,
        lean: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """`lean` cuts, in place, what the bot never reads out of an update before PTB builds it (the Telegram
        host's `bot.telegram.updates.Lean`, passed in by `bot.compose`)."""
        self._secret = secret.encode()
        self._bot = bot
        self._queue = queue
        self._takes = takes
        self._inbox = inbox
        self._bot_id = bot_id
        self._routing = routing
        self.routed = 0
        """Updates recorded for another instance (the owner of their user) to handle."""
        self._lean = lean
        self.redelivered = 0
        """Deliveries answered 200 without being handled: their update was recorded before (`/metrics`)."""

    async def handle(self, request: Request) -> Response:
        # Starlette decodes header values as latin-1, so any bytes a client sends compare as bytes.
        given = request.headers.get(SECRET_HEADER, "").encode("latin-1")
        if not hmac.compare_digest(given, self._secret):
            return PlainTextResponse("Forbidden", status_code=403)
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            return _too_large() if length.isdigit() else PlainTextResponse("Bad Request", status_code=400)
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_BODY:
                    return _too_large()
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is left to read it
        update = self._update(bytes(body))
        if update is None:
            return PlainTextResponse("Bad Request: not a Telegram update", status_code=400)
        if not self._takes(update):
            return PlainTextResponse("Service Unavailable: the bot is restarting", status_code=503)
        # Recorded only once taken: an update refused while draining must find no row at the next process.
        waiting = self._routing.waiting(update, bytes(body))
        if self._inbox is not None:
            try:
                first = await self._inbox.first(self._bot_id, update.update_id, waiting)
            except StoreUnavailable as exc:
                logger.warning(
                    "webhook: update %d not taken (503, Telegram retries): %s", update.update_id, exc
                )
                return PlainTextResponse("Service Unavailable: the database is unavailable", status_code=503)
            if not first:
                self.redelivered += 1
                logger.debug("webhook: update %d was delivered before; not handled again", update.update_id)
                return Response(status_code=200)
            if waiting is not None:
                self.routed += 1
                return Response(status_code=200)  # its owner handles it
        await self._queue.put(update)
        return Response(status_code=200)

    def _update(self, body: bytes) -> Update | None:
        try:
            data = loads(body)
        except TooDeep as exc:
            logger.warning("webhook: refused a body of %d bytes: %s", len(body), exc)
            return None
        except ValueError:  # also not UTF-8
            return None
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            return None
        try:
            if self._lean is not None:
                self._lean(data)
            return Update.de_json(data, self._bot)
        except (TypeError, ValueError, KeyError, AttributeError):
            # PTB builds objects from whatever the JSON holds; a malformed part fails in one of these ways.
            logger.warning("webhook: update %s is not a valid Telegram update", data["update_id"])
            return None


class Routing:
    """In a fleet: which updates this instance hands to PTB itself, and the updates waiting for it in the inbox.

    `run` (in a task group) claims waiting updates whenever the bus says some came for a partition this instance
    owns, after every (re)connect of the bus, and when partitions are taken; while draining, nothing is claimed
    (what waits goes to the next owner)."""

    def __init__(
        self,
        partitions: Partitions,
        bus: Bus,
        inbox: InboxStore,
        bot: Bot,
        queue: asyncio.Queue[Any],
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._partitions = partitions
        self._bus = bus
        self._inbox = inbox
        self._bot = bot
        self._queue = queue
        self._clock = clock
        self._wanted: set[int] = set()
        self._poked = anyio.Event()
        self.claimed = 0
        """Updates recorded by another instance and handled here."""
        self.lag_s = 0.0
        """Seconds the last claimed update waited in the inbox (`/metrics`)."""
        self.lag_total_s = 0.0
        """Seconds all claimed updates waited, summed (with `claimed`: the mean)."""
        bus.subscribe("inbox", self._heard, self.sweep)
        partitions.on_taken_up(self._taken)  # once their cards are placed again: not at the take itself

    def waiting(self, update: Update, body: bytes) -> Waiting | None:
        """How `update` waits for its owner, or None when this instance owns its user and has taken up what was kept
        for them (it handles it now)."""
        partition = partition_of(_user_of(update))
        if self._partitions.handles(partition):
            self._partitions.touch(partition)
            return None
        return Waiting(partition, body.decode(), self._wake)

    async def _wake(self, conn: Any, partition: int) -> None:
        await self._bus.publish(conn, "inbox", str(partition))

    def sweep(self) -> None:
        """Look for updates waiting for any partition owned (the bus (re)connected: a wake-up may be lost)."""
        self._want(self._partitions.owned)

    def _taken(self, partitions: Collection[int]) -> None:
        self._want(partitions)

    def _heard(self, payload: str) -> None:
        if payload.isdigit():
            self._want([int(payload)])

    def _want(self, partitions: Any) -> None:
        self._wanted.update(partitions)
        self._poked.set()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self._poked.wait()
            self._poked = anyio.Event()
            wanted, self._wanted = self._wanted, set()
            mine = {p for p in wanted if self._partitions.handles(p)}  # the rest: at `taken_up`
            if self._partitions.draining or not mine:
                continue
            try:
                await self.claim(mine)
            except StoreUnavailable as exc:
                logger.warning("webhook: could not claim the updates waiting for this instance: %s", exc)
                self._want(mine)  # looked for again at the next wake-up or heartbeat's take

    async def claim(self, partitions: set[int]) -> int:
        """Hand the updates waiting for `partitions` to PTB; how many."""
        handed = 0
        while True:
            with self._partitions.held(partitions):  # not given back while the inbox is read
                batch = await self._inbox.claim(self._partitions.bot_id, partitions)
                for claimed in batch:
                    self._partitions.touch(claimed.partition)
            now = self._clock()
            for claimed in batch:
                update = Update.de_json(json.loads(claimed.payload), self._bot)
                self.lag_s = max(0.0, (now - claimed.received).total_seconds())
                self.lag_total_s += self.lag_s
                self.claimed += 1
                await self._queue.put(update)
            handed += len(batch)
            if len(batch) < 100:
                return handed


def _user_of(update: Update) -> int:
    """Whose update it is: its user's, else its chat's (as the partitions split them)."""
    if update.effective_user is not None:
        return update.effective_user.id
    if update.effective_chat is not None:
        return update.effective_chat.id
    return 0


def _too_large() -> Response:
    return PlainTextResponse(f"Payload Too Large (over {MAX_BODY} bytes)", status_code=413)

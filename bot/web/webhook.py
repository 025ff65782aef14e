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
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable
from typing import Any, Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from telegram import Bot, Update

from bot.store.errors import StoreUnavailable
from bot.store.inbox import InboxStore
from bot.web.bounded_json import TooDeep, loads

logger = logging.getLogger(__name__)

SECRET_HEADER: Final = "X-Telegram-Bot-Api-Secret-Token"
MAX_BODY: Final = 1 << 20
"""Bytes; Telegram's updates are a few kilobytes."""


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
        if self._inbox is not None:
            try:
                first = await self._inbox.first(self._bot_id, update.update_id)
            except StoreUnavailable as exc:
                logger.warning(
                    "webhook: update %d not taken (503, Telegram retries): %s", update.update_id, exc
                )
                return PlainTextResponse("Service Unavailable: the database is unavailable", status_code=503)
            if not first:
                self.redelivered += 1
                logger.debug("webhook: update %d was delivered before; not handled again", update.update_id)
                return Response(status_code=200)
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


def _too_large() -> Response:
    return PlainTextResponse(f"Payload Too Large (over {MAX_BODY} bytes)", status_code=413)

"""The PTB bot the Telegram host runs on, and the HTTP client under it. Does I/O (Bot API calls).

`CardBot` is PTB's `ExtBot` (so the flood limiter and every PTB method still apply) plus the four calls the
surface makes hundreds of times: send, edit, delete, answer a tap. PTB's own `send_message` and
`edit_message_text` rebuild the whole echoed message as objects (chat, sender, entities, every button),
about 0.1 ms of CPU each, to be thrown away; these return only the message id, and the answer to an edit, a
deletion or a tap answer is not even decoded. Their parameters are plain JSON already, so they go through the
flood limiter straight to the HTTP client, not through PTB's generic path that wraps every parameter in an
object first (that path was 7% of the bot's instructions per elicitation, decoding the answers 5%; bench/,
issue 5).
"""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from telegram.constants import ParseMode
from telegram.ext import BaseRateLimiter, ExtBot
from telegram.request import BaseRequest, HTTPXRequest

from bot.telegram.http import BotApiRequest
from bot.telegram.render import Keyboard

logger = logging.getLogger(__name__)

_NO_PREVIEW: Final = {"is_disabled": True}
POOL_CONNECTIONS: Final = 32
"""Connections for Bot API calls at once (the flood limiter keeps far fewer in flight); getUpdates has its own."""


# The Bot API writes every success as `{"ok":true,"result":...}` and a sent message's id first; a body that
# does not start so (a proxy that re-encodes JSON, say) is decoded in full instead.
_SUCCESS: Final = b'{"ok":true,'
_SENT: Final = re.compile(rb'\{"ok":true,"result":\{"message_id":([0-9]{1,18})[,}]')


def _succeeded(body: bytes) -> bool | None:
    """For calls whose result is never read (edits, deletions, tap answers): True, without decoding."""
    return True if body.startswith(_SUCCESS) else None


def _sent_message_id(body: bytes) -> int | None:
    found = _SENT.match(body)
    return int(found[1]) if found else None


class CardBot(ExtBot[Any]):
    """`ExtBot` with id-only sends and edits of HTML text messages (link previews off)."""

    __slots__ = ()

    async def _post(self, endpoint: str, data: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        result = await super()._post(endpoint, data, **kwargs)
        if endpoint == "getUpdates" and isinstance(result, list):
            for update in result:
                _drop_unread(update)
        return result

    async def _call(
        self, endpoint: str, data: dict[str, Any], read: Callable[[bytes], Any] = _succeeded
    ) -> Any:
        """One Bot API call with JSON parameters, through the flood limiter; what `read` takes from a success
        (by default nothing: True), else its decoded result."""
        data = {key: value for key, value in data.items() if value is not None}
        request, limiter = self._request[1], self.rate_limiter
        if not isinstance(request, BotApiRequest) or limiter is None:
            return await self._post(endpoint, data)  # the httpx fallback (a proxy): PTB's path does it all
        return await limiter.process_request(
            callback=request.post_json,
            args=(f"{self.base_url}/{endpoint}", data, read),
            kwargs={},
            endpoint=endpoint,
            data=data,
            rate_limit_args=None,
        )

    async def send_html(
        self, chat_id: int, text: str, keyboard: Keyboard | None = None, reply_to: int | None = None
    ) -> int:
        """Send a message; its id. A reply whose original is gone is sent as a plain message."""
        data: dict[str, Any] = {
            "chat_id": chat_id,
            "text": text,
            "parse_mode": ParseMode.HTML,
            "link_preview_options": _NO_PREVIEW,
            "reply_markup": _markup(keyboard),
        }
        if reply_to is not None:
            data["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
        result = await self._call("sendMessage", data, _sent_message_id)
        return result if isinstance(result, int) else int(result["message_id"])

    async def edit_html(
        self, chat_id: int, message_id: int, text: str, keyboard: Keyboard | None = None
    ) -> None:
        """Replace a message's text and buttons (no `keyboard`: no buttons)."""
        await self._call(
            "editMessageText",
            {
                "chat_id": chat_id,
                "message_id": message_id,
                "text": text,
                "parse_mode": ParseMode.HTML,
                "link_preview_options": _NO_PREVIEW,
                "reply_markup": _markup(keyboard),
            },
        )

    async def answer_tap(self, query_id: str, text: str | None = None, alert: bool = False) -> None:
        """Answer a callback query (stops the button's spinner), with an optional toast or alert."""
        await self._call(
            "answerCallbackQuery", {"callback_query_id": query_id, "text": text, "show_alert": alert or None}
        )

    async def delete(self, chat_id: int, message_id: int) -> None:
        await self._call("deleteMessage", {"chat_id": chat_id, "message_id": message_id})


def _drop_unread(update: dict[str, Any]) -> None:
    """Leave out of an update what this bot never reads, before PTB builds objects from it.

    A tap's update echoes the whole message the button was on: its text, entities and every button. The bot
    finds what was tapped by the button's token alone (a card, or a /tools entry that keeps its own chat), so
    the echo is never read, and PTB building it into a `Message` was an eighth of the bot's instructions per
    elicitation (bench/). Handlers therefore see `callback_query.message` as None.
    """
    query = update.get("callback_query")
    if isinstance(query, dict):
        query.pop("message", None)


def _markup(keyboard: Keyboard | None) -> dict[str, Any] | None:
    return {"inline_keyboard": keyboard} if keyboard else None


def build_bot(token: str, base_url: str, rate_limiter: BaseRateLimiter[Any]) -> CardBot:
    """The bot for `base_url` (`.../bot`), on the lean HTTP client unless a proxy is configured."""
    return CardBot(
        token,
        base_url=base_url,
        base_file_url=base_url.replace("/bot", "/file/bot"),
        request=_request(base_url, POOL_CONNECTIONS),
        get_updates_request=_request(base_url, 1),
        rate_limiter=rate_limiter,
    )


def _request(base_url: str, connections: int) -> BaseRequest:
    if _proxied(base_url):
        # httpx reads HTTPS_PROXY/ALL_PROXY (and NO_PROXY) itself; our client does not speak proxies.
        logger.info("a proxy is configured for the Bot API: using PTB's httpx client")
        return HTTPXRequest(connection_pool_size=connections)
    return BotApiRequest(connections=connections)


def _proxied(base_url: str) -> bool:
    parts = urlsplit(base_url)
    proxies = urllib.request.getproxies()
    if not (proxies.get(parts.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(parts.hostname or "")

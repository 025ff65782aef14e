"""The PTB bot the Telegram host runs on, over the aiohttp client. Does I/O (Bot API calls).

`CardBot` is PTB's `ExtBot` (the flood limiter and every PTB method apply) plus the three card calls the surface
makes: send, edit and delete an HTML message (link previews off). Their parameters are plain Bot API values
already (`bot.telegram.render` builds keyboards as JSON), and the answer is read for a message id at most, so
they go through PTB's public `Bot.do_api_request` rather than its object layer, which would build every
button and the whole echoed message as objects only to throw them away. Taps are answered with PTB's
`CallbackQuery.answer` everywhere. getUpdates has a client of its own (`bot.telegram.updates.UpdatesRequest`),
which cuts what the bot never reads out of the updates before PTB builds them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any, Final

import anyio
from telegram import Update
from telegram.constants import ParseMode
from telegram.ext import BaseRateLimiter, ExtBot
from telegram.warnings import PTBUserWarning

from bot.telegram.access import Access
from bot.telegram.flood import IN_FLIGHT
from bot.telegram.render import Keyboard
from bot.telegram.request import AiohttpRequest
from bot.telegram.updates import UpdatesRequest

__all__ = ["POOL_CONNECTIONS", "CardBot", "build_bot", "file_url"]

POOL_CONNECTIONS: Final = IN_FLIGHT
"""Connections for Bot API calls at once, as many as the flood limiter lets be in flight (a burst waits there, in
its order); getUpdates has its own."""
_NO_PREVIEW: Final = {"is_disabled": True}
_CARD_CALLS: Final = ("sendMessage", "editMessageText", "deleteMessage")


class CardBot(ExtBot[Any]):
    """`ExtBot` with the card calls: HTML text messages with inline buttons, link previews off."""

    __slots__ = ("_clients", "_on_polled")

    def __init__(
        self,
        token: str,
        *,
        clients: tuple[AiohttpRequest, ...] = (),
        on_polled: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(token, **kwargs)
        self._clients = clients
        self._on_polled = on_polled

    async def get_updates(self, *args: Any, **kwargs: Any) -> tuple[Update, ...]:
        """PTB's; `on_polled` is told once a poll was answered (a 409 Conflict before that: another bot polls)."""
        updates = await super().get_updates(*args, **kwargs)
        if self._on_polled is not None:
            self._on_polled()
        return updates

    async def initialize(self) -> None:
        """PTB's, and the HTTP clients closed again when it fails (a rejected token, Telegram unreachable):
        PTB shuts down only a bot whose initialisation completed."""
        try:
            await super().initialize()
        except BaseException:
            with anyio.CancelScope(shield=True):
                for client in self._clients:
                    await client.shutdown()
            raise

    async def send_html(
        self,
        chat_id: int,
        text: str,
        keyboard: Keyboard | None = None,
        reply_to: int | None = None,
        placeholder: str | None = None,
    ) -> int:
        """Send a message; its id. A reply whose original is gone is sent as a plain message. `placeholder`
        (without `keyboard`): the person's app opens a reply to the message, with this hint in the input field
        (ForceReply)."""
        params = _html(text, keyboard, chat_id=chat_id)
        if placeholder is not None and not keyboard:
            params["reply_markup"] = {"force_reply": True, "input_field_placeholder": placeholder}
        if reply_to is not None:
            params["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
        sent = await self.do_api_request("sendMessage", api_kwargs=params)
        return int(sent["message_id"])

    async def edit_html(
        self, chat_id: int, message_id: int, text: str, keyboard: Keyboard | None = None
    ) -> None:
        """Replace a message's text and buttons (no `keyboard`: no buttons)."""
        params = _html(text, keyboard, chat_id=chat_id, message_id=message_id)
        await self.do_api_request("editMessageText", api_kwargs=params)

    async def delete(self, chat_id: int, message_id: int) -> None:
        await self.do_api_request("deleteMessage", api_kwargs={"chat_id": chat_id, "message_id": message_id})


def _html(text: str, keyboard: Keyboard | None, **target: int) -> dict[str, Any]:
    """The parameters of an HTML text message with inline buttons (none without `keyboard`), previews off."""
    params: dict[str, Any] = {
        **target,
        "text": text,
        "parse_mode": ParseMode.HTML,
        "link_preview_options": _NO_PREVIEW,
    }
    if keyboard:
        params["reply_markup"] = {"inline_keyboard": keyboard}
    return params


def file_url(base_url: str) -> str:
    """The file download base for a Bot API base: `https://host/bot` -> `https://host/file/bot`.

    Only the last `/bot` is the Bot API's (a host or a path before it may contain `/bot` as well).
    """
    head, bot, tail = base_url.rpartition("/bot")
    return f"{head}/file{bot}{tail}" if bot else f"{base_url.rstrip('/')}/file/bot"


def build_bot(
    token: str,
    base_url: str,
    rate_limiter: BaseRateLimiter[Any],
    access: Access | None = None,
    on_polled: Callable[[], None] | None = None,
) -> CardBot:
    """The bot for `base_url` (`.../bot`), on the aiohttp client (proxies from the environment); `access` is
    whose taps on cards arrive without their echoed message (`bot.telegram.updates`; None: nobody's);
    `on_polled`: told of each answered getUpdates."""
    # PTB nudges callers of `do_api_request` towards its typed method for a known endpoint; the card calls
    # choose the plain one on purpose (see the module docstring), and only their nudge is silenced.
    for endpoint in _CARD_CALLS:
        warnings.filterwarnings("ignore", message=f"Please use 'Bot.{endpoint}'", category=PTBUserWarning)
    calls, updates = (
        AiohttpRequest(connections=POOL_CONNECTIONS),
        UpdatesRequest(connections=1, written_hook=False, access=access),
    )
    return CardBot(
        token,
        clients=(calls, updates),
        base_url=base_url,
        base_file_url=file_url(base_url),
        request=calls,
        get_updates_request=updates,
        rate_limiter=rate_limiter,
        on_polled=on_polled,
    )

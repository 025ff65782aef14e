"""The PTB bot the Telegram host runs on, over the aiohttp client. Does I/O (Bot API calls).

`CardBot` is PTB's `ExtBot` (the flood limiter and every PTB method apply) plus the three card calls the surface
makes: send, edit and delete an HTML message (link previews off), built on PTB's own methods. Taps are
answered with PTB's `CallbackQuery.answer` everywhere.
"""

from __future__ import annotations

from typing import Any, Final

from telegram import (
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    LinkPreviewOptions,
    ReplyParameters,
)
from telegram.constants import ParseMode
from telegram.ext import BaseRateLimiter, ExtBot

from bot.telegram.render import Keyboard
from bot.telegram.request import AiohttpRequest

__all__ = ["POOL_CONNECTIONS", "CardBot", "build_bot", "file_url"]

POOL_CONNECTIONS: Final = 32
"""Connections for Bot API calls at once (the flood limiter keeps far fewer in flight); getUpdates has its own."""
_NO_PREVIEW: Final = LinkPreviewOptions(is_disabled=True)


class CardBot(ExtBot[Any]):
    """`ExtBot` with the card calls: HTML text messages with inline buttons, link previews off."""

    __slots__ = ()

    async def send_html(
        self, chat_id: int, text: str, keyboard: Keyboard | None = None, reply_to: int | None = None
    ) -> int:
        """Send a message; its id. A reply whose original is gone is sent as a plain message."""
        message = await self.send_message(
            chat_id,
            text,
            parse_mode=ParseMode.HTML,
            link_preview_options=_NO_PREVIEW,
            reply_markup=_markup(keyboard),
            reply_parameters=(
                None
                if reply_to is None
                else ReplyParameters(message_id=reply_to, allow_sending_without_reply=True)
            ),
        )
        return message.message_id

    async def edit_html(
        self, chat_id: int, message_id: int, text: str, keyboard: Keyboard | None = None
    ) -> None:
        """Replace a message's text and buttons (no `keyboard`: no buttons)."""
        await self.edit_message_text(
            text,
            chat_id=chat_id,
            message_id=message_id,
            parse_mode=ParseMode.HTML,
            link_preview_options=_NO_PREVIEW,
            reply_markup=_markup(keyboard),
        )

    async def delete(self, chat_id: int, message_id: int) -> None:
        await self.delete_message(chat_id, message_id)


def _markup(keyboard: Keyboard | None) -> InlineKeyboardMarkup | None:
    if not keyboard:
        return None
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton(b["text"], url=b.get("url"), callback_data=b.get("callback_data"))
                for b in row
            ]
            for row in keyboard
        ]
    )


def file_url(base_url: str) -> str:
    """The file download base for a Bot API base: `https://host/bot` -> `https://host/file/bot`.

    Only the last `/bot` is the Bot API's (a host or a path before it may contain `/bot` as well).
    """
    head, bot, tail = base_url.rpartition("/bot")
    return f"{head}/file{bot}{tail}" if bot else f"{base_url.rstrip('/')}/file/bot"


def build_bot(token: str, base_url: str, rate_limiter: BaseRateLimiter[Any]) -> CardBot:
    """The bot for `base_url` (`.../bot`), on the aiohttp client (proxies from the environment)."""
    return CardBot(
        token,
        base_url=base_url,
        base_file_url=file_url(base_url),
        request=AiohttpRequest(connections=POOL_CONNECTIONS),
        get_updates_request=AiohttpRequest(connections=1),
        rate_limiter=rate_limiter,
    )

"""A scripted Telegram user: sends messages and presses inline buttons, each action becoming an Update.

Drives the fake's in-memory world (no I/O of its own); `press` awaits the bot's answerCallbackQuery.
"""

from __future__ import annotations

import asyncio
import html
from typing import TYPE_CHECKING

from .formatting import command_entities
from .model import JSON, CallbackAnswer, Label, Msg, ScriptError, Version

if TYPE_CHECKING:
    from .state import World


class FakeUser:
    """A user; create with `fake.user(...)`. `has_started_bot` and `blocked_bot` may be flipped by tests."""

    def __init__(
        self,
        world: World,
        id: int,  # mirrors Telegram's field name
        first_name: str,
        username: str | None,
        last_name: str | None,
        language_code: str,
        has_started_bot: bool,
    ) -> None:
        self._world = world
        self.id = id
        self.first_name = first_name
        self.username = username
        self.last_name = last_name
        self.language_code = language_code
        self.has_started_bot = has_started_bot
        """False: the bot may not message this user first (403), as before the user pressed Start."""
        self.blocked_bot = False
        """True: every send to the private chat fails with 403 "bot was blocked by the user"."""

    def __repr__(self) -> str:
        return f"<FakeUser {self.id} {self.first_name!r}>"

    def to_dict(self, *, names_only: bool = False) -> JSON:
        """The Bot API `User` object (or, with names_only, the name fields a private `Chat` repeats)."""
        names = {"first_name": self.first_name, "last_name": self.last_name, "username": self.username}
        data = {k: v for k, v in names.items() if v is not None}
        if names_only:
            return data
        return {"id": self.id, "is_bot": False, **data, "language_code": self.language_code}

    async def send(self, text: str, *, chat: int | None = None, reply_to: Msg | None = None) -> Msg:
        """Send a text message (to the private chat unless `chat` or `reply_to` says otherwise).

        /commands get bot_command entities as in Telegram. Returns the user's message.
        """
        chat_id = chat if chat is not None else reply_to.chat_id if reply_to is not None else self.id
        self._check_member(chat_id)
        if reply_to is not None and reply_to.chat_id != chat_id:
            raise ScriptError(f"cannot reply in chat {chat_id} to a message of chat {reply_to.chat_id}")
        if chat_id == self.id:
            self.has_started_bot = True  # the client shows "Start" until the user has talked to the bot
        version = Version(text=text, html=html.escape(text, quote=False), entities=command_entities(text))
        msg = self._world.add_message(chat_id, self.id, version, reply_to)
        await self._world.enqueue("message", self._world.message_dict(msg))
        return msg

    async def press(self, msg: Msg, label: Label, *, timeout: float = 5.0) -> CallbackAnswer:  # noqa: ASYNC109 - part of the contract
        """Press the inline button matching `label` (text, regex or predicate) and return the bot's answer.

        Raises:
            ScriptError: no such button, or a URL or Mini App button (a client opens those without an update).
            TimeoutError: the bot did not call answerCallbackQuery in time.
        """
        button = msg.button(label)
        if button.callback_data is None:
            kind = "a Mini App" if button.web_app is not None else "a URL"
            where = button.web_app or button.url
            raise ScriptError(f"{button.text!r} is {kind} button ({where}); pressing it sends no update")
        return await self.press_data(msg, button.callback_data, timeout=timeout)

    async def press_data(self, msg: Msg, data: str | None, *, timeout: float = 5.0) -> CallbackAnswer:  # noqa: ASYNC109 - part of the contract
        """Send a callback query with arbitrary `data` for `msg`, as a forged or stale client could.

        Raises:
            ScriptError: `data` is None (a `Button.callback_data` of a URL or Mini App button).
        """
        if data is None:
            raise ScriptError(f"no callback data to send for {msg!r}")
        if not msg.from_bot or msg.deleted:
            raise ScriptError(f"cannot press a button on {msg!r}")
        self._check_member(msg.chat_id)
        query_id, query = self._world.new_query()
        payload = {
            "id": query_id,
            "from": self.to_dict(),
            "message": self._world.message_dict(msg),
            "chat_instance": str(abs(msg.chat_id) * 7919),
            "data": data,
        }
        await self._world.enqueue("callback_query", payload)
        try:
            async with asyncio.timeout(timeout):
                return await query.answer
        except TimeoutError:
            query.answered = True  # a late answer now gets Telegram's "query is too old" 400
            raise TimeoutError(
                f"the bot did not answer callback query {data!r} within {timeout}s;"
                f" errors: {self._world.errors}"
            ) from None

    def _check_member(self, chat_id: int) -> None:
        if not self._world.has_chat(chat_id) or not self._world.is_member(chat_id, self):
            raise ScriptError(f"{self!r} is not in chat {chat_id}")

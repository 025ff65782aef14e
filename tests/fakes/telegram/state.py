"""The fake Telegram's world: users, chats, messages, the update queue, pending callback queries, and the
observation API tests use (`messages`, `wait_for`, `next_message`). In-memory; waits are asyncio events.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from .model import JSON, CallbackAnswer, ErrorReply, Msg, ScriptError, Version
from .user import FakeUser

ChatRef = int | FakeUser
"""A chat as tests name it: its id, or a user for that user's private chat."""
T = TypeVar("T")
DEFAULT_SCOPE = "default"


@dataclass(slots=True)
class PendingQuery:
    """A callback query the bot has not answered yet; `press()` awaits `answer`."""

    answer: asyncio.Future[CallbackAnswer] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    answered: bool = False


class World:
    """State shared by the HTTP side (the bot's calls) and the test side (users' actions, observation)."""

    def __init__(self, *, bot_id: int, bot_username: str) -> None:
        self.bot_id = bot_id
        self.bot_username = bot_username
        self.calls: list[tuple[str, JSON]] = []
        """Every request received, in order: (method as sent, decoded params)."""
        self.errors: list[ErrorReply] = []
        """Every error response sent (4xx and 5xx), in order."""
        self.command_sets: dict[tuple[str, str], list[tuple[str, str]]] = {}
        """setMyCommands by (scope type, or the scope JSON when it names a chat; language_code)."""
        self.webhook: JSON = {"url": ""}
        self._users: dict[int, FakeUser] = {}
        self._chats: dict[int, JSON] = {}
        self._members: dict[int, set[int]] = {}
        self._messages: dict[int, list[Msg]] = {}
        self._cursors: dict[int, int] = {}
        self.pending_updates: list[JSON] = []
        """Updates not yet confirmed by a getUpdates offset."""
        self._update_ids = itertools.count(1)
        self._query_ids = itertools.count(1)
        self._queries: dict[str, PendingQuery] = {}
        self._seq = itertools.count(1)
        self._changed = asyncio.Event()
        self.closing = False
        """Set when the fake stops: every wait ends."""
        self._deliver: Callable[[JSON], Awaitable[object]] | None = None

    # --- setting the scene -------------------------------------------------------------------------

    def user(
        self,
        id: int,  # mirrors Telegram's field name
        first_name: str,
        *,
        username: str | None = None,
        last_name: str | None = None,
        language_code: str = "en",
        has_started_bot: bool = True,
    ) -> FakeUser:
        """Create a user; their private chat with the bot exists at once (chat id == user id)."""
        if id <= 0 or id in self._users:
            raise ScriptError(f"user id {id} must be positive and new")
        user = FakeUser(self, id, first_name, username, last_name, language_code, has_started_bot)
        self._users[id] = user
        self._chats[id] = {"id": id, "type": "private", **user.to_dict(names_only=True)}
        self._messages[id] = []
        return user

    def private_chat(self, user: FakeUser) -> int:
        """The id of `user`'s private chat with the bot."""
        return user.id

    def group(
        self, chat_id: int, title: str, members: Iterable[FakeUser] = (), *, supergroup: bool = False
    ) -> int:
        """Create a group the bot is in; returns its id (negative, as in Telegram)."""
        if chat_id >= 0 or chat_id in self._chats:
            raise ScriptError(f"group id {chat_id} must be negative and new")
        self._chats[chat_id] = {
            "id": chat_id,
            "type": "supergroup" if supergroup else "group",
            "title": title,
        }
        self._members[chat_id] = {m.id for m in members}
        self._messages[chat_id] = []
        return chat_id

    # --- observing -----------------------------------------------------------------------------------

    @property
    def commands(self) -> list[tuple[str, str]]:
        """(command, description) pairs from setMyCommands for the default scope, no language."""
        return list(self.command_sets.get((DEFAULT_SCOPE, ""), []))

    @property
    def unexpected_errors(self) -> list[ErrorReply]:
        """Errors the test did not inject with `fail_next` (assert this is empty at the end of a test)."""
        return [e for e in self.errors if not e.injected]

    def messages(
        self, chat: ChatRef, *, from_bot: bool | None = None, include_deleted: bool = False
    ) -> list[Msg]:
        """Messages in a chat in sending order (bot's and users'); filter with `from_bot`."""
        return [
            m
            for m in self._messages[self.chat_id_of(chat)]
            if (from_bot is None or m.from_bot == from_bot) and (include_deleted or not m.deleted)
        ]

    async def wait_for(self, predicate: Callable[[Msg], bool], timeout: float = 5.0) -> Msg:  # noqa: ASYNC109 - part of the contract
        """Wait until a live bot message satisfies `predicate` (sent or edited); the latest changed wins.

        Raises:
            TimeoutError: with the bot's recent messages and the errors so far, to explain what happened.
        """

        def check() -> Msg | None:
            live = (m for chat in self._messages.values() for m in chat if m.from_bot and not m.deleted)
            return max((m for m in live if predicate(m)), key=lambda m: m.seq, default=None)

        return await self._until(check, timeout, "no bot message matched the predicate")

    async def next_message(self, chat: ChatRef, containing: str | None = None, timeout: float = 5.0) -> Msg:  # noqa: ASYNC109 - part of the contract
        """The bot's next new message in `chat` after the one this returned last (a per-chat cursor).

        With `containing`, skip messages whose current text lacks it. Edits are not new: use `wait_for`.
        """
        chat_id = self.chat_id_of(chat)

        def check() -> Msg | None:
            msgs = self._messages[chat_id]
            for index in range(self._cursors.get(chat_id, 0), len(msgs)):
                msg = msgs[index]
                if msg.from_bot and (containing is None or containing in msg.text):
                    self._cursors[chat_id] = index + 1
                    return msg
            return None

        return await self._until(
            check, timeout, f"no new bot message in chat {chat_id} containing {containing!r}"
        )

    async def wait_for_call(
        self,
        method: str,
        predicate: Callable[[JSON], bool] | None = None,
        timeout: float = 5.0,  # noqa: ASYNC109 - part of the contract
    ) -> JSON:
        """Wait until the bot has called `method` (any case) with params matching `predicate`; return them."""

        def check() -> JSON | None:
            calls = (p for m, p in self.calls if m.lower() == method.lower())
            return next((p for p in calls if predicate is None or predicate(p)), None)

        return await self._until(check, timeout, f"no {method} call matched")

    async def _until(self, check: Callable[[], T | None], timeout: float, what: str) -> T:  # noqa: ASYNC109 - part of the contract
        try:
            async with asyncio.timeout(timeout):
                while (found := check()) is None:
                    await self.next_change()
                return found
        except TimeoutError:
            recent = [m for chat in self._messages.values() for m in chat if m.from_bot]
            recent.sort(key=lambda m: m.seq)
            raise TimeoutError(
                f"{what} within {timeout}s.\n  bot messages: {recent[-5:]}\n  errors: {self.errors}"
            ) from None

    # --- used by the Bot API methods and by FakeUser ----------------------------------------------------

    def notify(self) -> None:
        """Wake every waiter (long polls, wait_for, next_message); they re-check their condition."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def next_change(self) -> None:
        """Return at the next `notify()`."""
        await self._changed.wait()

    def chat_id_of(self, chat: ChatRef) -> int:
        chat_id = chat.id if isinstance(chat, FakeUser) else chat
        if chat_id not in self._chats:
            raise ScriptError(f"unknown chat {chat!r}: create it with fake.user() or fake.group()")
        return chat_id

    def has_chat(self, chat_id: object) -> bool:
        return isinstance(chat_id, int) and chat_id in self._chats

    def chat_dict(self, chat_id: int) -> JSON:
        return dict(self._chats[chat_id])

    def user_by_id(self, user_id: int) -> FakeUser | None:
        return self._users.get(user_id)

    def is_member(self, chat_id: int, user: FakeUser) -> bool:
        return chat_id == user.id or user.id in self._members.get(chat_id, set())

    def bot_dict(self) -> JSON:
        return {"id": self.bot_id, "is_bot": True, "first_name": "Fake Bot", "username": self.bot_username}

    def find_message(self, chat_id: int, message_id: object) -> Msg | None:
        for msg in self._messages.get(chat_id, []):
            if msg.message_id == message_id:
                return msg
        return None

    def add_message(self, chat_id: int, sender_id: int, version: Version, reply_to: Msg | None = None) -> Msg:
        msgs = self._messages[chat_id]
        msg = Msg(
            chat_id=chat_id,
            message_id=len(msgs) + 1,
            from_bot=sender_id == self.bot_id,
            sender_id=sender_id,
            versions=[version],
            date=int(time.time()),
            reply_to_message_id=reply_to.message_id if reply_to else None,
        )
        msgs.append(msg)
        self.touch(msg)
        return msg

    def touch(self, msg: Msg) -> None:
        """Record that `msg` changed (sent, edited, deleted) and wake waiters."""
        msg.seq = next(self._seq)
        self.notify()

    def message_dict(self, msg: Msg, *, nested: bool = False) -> JSON:
        """The Bot API `Message` object for `msg` as it is now."""
        sender = self.bot_dict() if msg.from_bot else self._users[msg.sender_id].to_dict()
        data: JSON = {
            "message_id": msg.message_id,
            "from": sender,
            "chat": self.chat_dict(msg.chat_id),
            "date": msg.date,
        }
        if msg.photo is not None:  # a picture's text is its caption
            size = {"file_id": f"photo-{msg.message_id}", "file_unique_id": f"p{msg.message_id}"}
            data["photo"] = [{**size, "width": 320, "height": 320, "file_size": len(msg.photo)}]
            data["caption"] = msg.text
            if msg.entities:
                data["caption_entities"] = [dict(e) for e in msg.entities]
        else:
            data["text"] = msg.text
            if msg.entities:
                data["entities"] = [dict(e) for e in msg.entities]
        if msg.reply_markup:  # Telegram echoes inline keyboards only, never ForceReply
            data["reply_markup"] = {
                "inline_keyboard": [[b.to_dict() for b in row] for row in msg.reply_markup]
            }
        if msg.edit_dates:
            data["edit_date"] = msg.edit_dates[-1]
        target = None if nested else self.find_message(msg.chat_id, msg.reply_to_message_id)
        if target is not None:
            data["reply_to_message"] = self.message_dict(target, nested=True)
        return data

    async def enqueue(self, kind: str, payload: JSON) -> JSON:
        """Make an Update of `kind` and queue it for getUpdates (or deliver it to the webhook target)."""
        update = {"update_id": next(self._update_ids), kind: payload}
        if self._deliver is not None:
            await self._deliver(update)
        else:
            self.pending_updates.append(update)
            self.notify()
        return update

    def new_query(self) -> tuple[str, PendingQuery]:
        query_id = str(next(self._query_ids) + 4_000_000_000_000_000)  # Telegram's ids are long digit strings
        self._queries[query_id] = query = PendingQuery()
        return query_id, query

    def pending_query(self, query_id: object) -> PendingQuery | None:
        """The unanswered query with this id; None if unknown, answered, or given up on by `press()`."""
        query = self._queries.get(str(query_id))
        return None if query is None or query.answered else query

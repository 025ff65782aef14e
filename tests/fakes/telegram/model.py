"""Values the fake Bot API stores and shows to tests: buttons, messages and their versions, errors.

Pure data, no I/O. `Msg` is the one mutable object: an edit appends a `Version`, a delete sets `deleted`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]
Label = str | re.Pattern[str] | Callable[[str], bool]
"""How a test names a button: the exact text, a regex searched in the text, or a predicate on the text."""


class ScriptError(AssertionError):
    """The test script asked for something a real user could not do (press a missing or URL button, ...)."""


class ApiReject(Exception):
    """Raised by a method implementation; the server turns it into Telegram's error JSON."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status = status
        self.description = description
        self.retry_after = retry_after


class PollTerminated(ApiReject):
    """A long poll ended by a newer getUpdates for the same token: Telegram answers the older one 409. Sent only
    to a client still waiting (a bot restarting its own poll abandoned the older request, and never reads it)."""

    def __init__(self) -> None:
        super().__init__(
            409,
            "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
        )


def bad_request(detail: str) -> ApiReject:
    """Telegram's 400: every description starts with "Bad Request: "."""
    return ApiReject(400, f"Bad Request: {detail}")


@dataclass(frozen=True, slots=True)
class Button:
    """One inline keyboard button as the bot sent it (exactly one of callback_data/url/web_app is set)."""

    text: str
    callback_data: str | None = None
    url: str | None = None
    web_app: str | None = None
    """A Mini App button's `WebAppInfo.url`."""

    def to_dict(self) -> JSON:
        if self.web_app is not None:
            return {"text": self.text, "web_app": {"url": self.web_app}}
        action = {"callback_data": self.callback_data} if self.url is None else {"url": self.url}
        return {"text": self.text, **action}


Keyboard = tuple[tuple[Button, ...], ...]


@dataclass(frozen=True, slots=True)
class Version:
    """What a message looked like after one send or edit."""

    text: str
    """Plain text: tags stripped, entities unescaped (what the user sees)."""
    html: str
    """The raw HTML as sent with parse_mode=HTML; otherwise the plain text, HTML-escaped."""
    entities: tuple[JSON, ...] = ()
    """Formatting entities (UTF-16 offsets), as Telegram returns them."""
    reply_markup: Keyboard = ()
    """Inline keyboard rows; empty when there is none."""
    raw_markup: JSON | None = None
    """The reply_markup object as received (inline keyboard, ForceReply, reply keyboard) or None."""

    def same_content(self, other: Version) -> bool:
        """Telegram's "message is not modified" test: text, formatting and inline keyboard all equal."""
        return (self.text, self.entities, self.reply_markup) == (
            other.text,
            other.entities,
            other.reply_markup,
        )


@dataclass(eq=False, slots=True)
class Msg:
    """A message in a chat, from the bot or from a scripted user; `versions[-1]` is the current state."""

    chat_id: int
    message_id: int
    from_bot: bool
    sender_id: int
    versions: list[Version]
    date: int
    reply_to_message_id: int | None = None
    deleted: bool = False
    seq: int = 0
    """Global change counter: bumped on send, edit and delete (orders "most recently changed")."""
    edit_dates: list[int] = field(default_factory=list)
    photo: bytes | None = None
    """A picture the bot sent (`sendPhoto`); the text is then its caption."""

    @property
    def current(self) -> Version:
        return self.versions[-1]

    @property
    def text(self) -> str:
        return self.current.text

    @property
    def html(self) -> str:
        return self.current.html

    @property
    def entities(self) -> tuple[JSON, ...]:
        return self.current.entities

    @property
    def reply_markup(self) -> Keyboard:
        return self.current.reply_markup

    @property
    def force_reply(self) -> bool:
        raw = self.current.raw_markup
        return bool(raw and raw.get("force_reply"))

    @property
    def edit_count(self) -> int:
        return len(self.versions) - 1

    @property
    def history(self) -> tuple[Version, ...]:
        return tuple(self.versions)

    @property
    def buttons(self) -> list[str]:
        """The labels of the current inline keyboard, row by row, flattened."""
        return [b.text for row in self.reply_markup for b in row]

    def button(self, label: Label) -> Button:
        """The one current button matching `label`.

        Raises:
            ScriptError: no button or several buttons match.
        """
        found = [b for row in self.reply_markup for b in row if _matches(label, b.text)]
        if len(found) != 1:
            what = "no button" if not found else f"{len(found)} buttons"
            raise ScriptError(
                f"{what} matching {label!r} in message {self.message_id}; buttons: {self.buttons}"
            )
        return found[0]

    def __repr__(self) -> str:
        who = "bot" if self.from_bot else f"user {self.sender_id}"
        flags = " deleted" if self.deleted else ""
        edits = f" edits={self.edit_count}" if self.edit_count else ""
        where = f"{self.chat_id}/{self.message_id}"
        return f"<Msg {where} from {who}{edits}{flags}: {self.text[:60]!r} {self.buttons}>"


def _matches(label: Label, text: str) -> bool:
    if isinstance(label, str):
        return text == label
    if isinstance(label, re.Pattern):
        return label.search(text) is not None
    return label(text)


@dataclass(frozen=True, slots=True)
class CallbackAnswer:
    """What the bot passed to answerCallbackQuery for a press."""

    text: str = ""
    """The notification or alert shown; empty when the bot sent none."""
    show_alert: bool = False
    url: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """One error response the fake sent (4xx or 5xx), kept in `FakeTelegram.errors`."""

    method: str
    status: int
    description: str
    params: JSON
    injected: bool = False
    """True when the test asked for it with `fail_next`; rate-limit 429s are not injected."""

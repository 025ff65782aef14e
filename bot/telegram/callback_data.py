"""The only place that knows the `callback_data` format. Pure.

`<kind>:<token>:<version>:<action>[:<arg>]` — the token is a short random handle looked up server-side
(never the server's ids, never trusted, never a counter of one process: a kept question's token is saved with
it, so its buttons work again after a restart), `version` ties a button to the card state it was drawn for, so
a tap on an outdated keyboard is refused instead of being applied to a different question.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from telegram.constants import InlineKeyboardButtonLimit

MAX_BYTES: Final = int(InlineKeyboardButtonLimit.MAX_CALLBACK_DATA)
"""Telegram's limit on callback data, in bytes."""


class Kind(enum.StrEnum):
    PROMPT = "p"
    """A button on an elicitation card."""
    TOOL = "t"
    """A tool button of /tools."""
    APPROVAL = "a"
    """Approve (`YES`) or Reject (`NO`) on an approval card; the token is the request's durable id."""
    RERUN = "r"
    """**Run again** on a legacy card whose question was lost in a restart."""
    AGENT = "g"
    """**Revoke** on the `/agents` list (`REVOKE`): the token is the agent token's id in the store, the arg the
    user id of the person whose list it is; **Forget** (`FORGET`) the same for a remembered decision's id. Neither
    is trusted: a tap revokes only a token, or forgets only a decision, of the tapper's own."""
    CONSENT = "o"
    """**Allow** (`YES`) or **Deny** (`NO`) on an OAuth client's consent card: the token is the consent request's
    id, the arg the user id of the person it was shown to. Neither is trusted: the store decides only the tapper's
    own request."""


class Action(enum.StrEnum):
    CHOOSE = "c"
    YES = "y"
    NO = "n"
    TOGGLE = "t"
    DONE = "d"
    SKIP = "s"
    KEEP = "k"
    PAGE = "g"
    EDIT = "e"
    SUBMIT = "u"
    DECLINE = "x"
    CANCEL = "z"
    CONSENT = "o"
    FINISHED = "f"
    CALL = "r"
    REVOKE = "v"
    FORGET = "m"


@dataclass(frozen=True, slots=True)
class Button:
    """A decoded button press."""

    kind: Kind
    token: str
    version: int
    action: Action
    arg: int | None = None

    def pack(self) -> str:
        """Encode; raises ValueError when the result would not fit Telegram's 64 bytes."""
        if ":" in self.token or not self.token:
            raise ValueError(f"bad token {self.token!r}")
        parts = [self.kind.value, self.token, str(self.version), self.action.value]
        if self.arg is not None:
            parts.append(str(self.arg))
        data = ":".join(parts)
        if len(data.encode()) > MAX_BYTES:
            raise ValueError(f"callback data over {MAX_BYTES} bytes: {data!r}")
        return data


def unpack(data: str | None) -> Button | None:
    """Decode, or None for anything that is not one of ours (forged, truncated, from an old build)."""
    if not data or len(data.encode()) > MAX_BYTES:
        return None
    parts = data.split(":")
    if len(parts) not in (4, 5):
        return None
    try:
        kind, action = Kind(parts[0]), Action(parts[3])
        version = int(parts[2])
        arg = int(parts[4]) if len(parts) == 5 else None
    except ValueError:
        return None
    if not parts[1] or version < 0 or (arg is not None and arg < 0):
        return None
    return Button(kind, parts[1], version, action, arg)


FOUND_BY_TOKEN: Final = frozenset({Kind.PROMPT, Kind.TOOL, Kind.RERUN})
"""Kinds whose tap is handled from its data and its sender alone: the token finds the card, list or call, and
with it the chat. The /agents list (`AGENT`) is edited where it was tapped, by the tap's message, and an
approval card (`APPROVAL`) is redrawn where it was tapped too when its place was not stored (in a fleet, its
poster may have died between sending it and storing where it is)."""


def kind_of(data: object) -> Kind | None:
    """The kind a button's data names, from its prefix alone (None: not ours). A cheap look, not a check:
    `unpack` decides whether the data is valid."""
    if not isinstance(data, str):
        return None
    prefix, colon, _ = data.partition(":")
    return _KINDS.get(prefix) if colon else None


_KINDS: Final = {kind.value: kind for kind in Kind}


def is_approval(data: object) -> bool:
    """A tap on an approval card (the one kind of tap an approver who may not use the bot gets through)."""
    button = unpack(data) if isinstance(data, str) else None
    return button is not None and button.kind is Kind.APPROVAL


def matches(data: object) -> bool:
    """For `CallbackQueryHandler(pattern=...)`."""
    return isinstance(data, str) and unpack(data) is not None

"""Who may use the bot (`Access`) and how often a stranger is told no (`Refusals`). Pure: no I/O, the clock
is injected.

Every place that lets a person act asks `Access.allows`: the gate in front of all handlers, every handler
again, the start of a tool run, and a tap or a typed answer on a card. One forgotten path cannot open the door.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from bot.config import TelegramConfig

REFUSAL_PERIOD_S: Final = 60.0
"""A stranger is told no at most once per this many seconds in one chat."""
REFUSALS_PER_CHAT: Final = 3
"""Refusals one chat gets per `REFUSAL_PERIOD_S`, whoever they are for: a crowd of strangers in a group must not
use up the group's 20 messages a minute, which the allowed people's cards need."""
K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Access:
    """The allow-list decision: deny by default."""

    allowed: frozenset[int] = frozenset()
    """Telegram user ids that may use the bot."""
    everyone: bool = False
    """Anyone may use the bot (`allow_everyone = true`, for a public demo)."""

    @classmethod
    def of(cls, telegram: TelegramConfig) -> Access:
        return cls(telegram.allowed_users, telegram.allow_everyone)

    def allows(self, user_id: int | None) -> bool:
        """Whether this person may use the bot; an update without a person (`None`) never may."""
        return user_id is not None and (self.everyone or user_id in self.allowed)


@dataclass(slots=True)
class Refusals:
    """Which refusals are worth sending: one per stranger per chat per period, and `per_chat` per chat."""

    per_chat: int = REFUSALS_PER_CHAT
    period_s: float = REFUSAL_PERIOD_S
    clock: Callable[[], float] = time.monotonic
    _last: dict[tuple[int, int], float] = field(default_factory=dict)
    _chats: dict[int, deque[float]] = field(default_factory=dict)

    def take(self, chat_id: int, user_id: int) -> bool:
        """Book a refusal to `user_id` in `chat_id` now, or False: send none (it was told, or the chat had
        its share)."""
        now = self.clock()
        since = now - self.period_s
        _drop_older(self._last, since, lambda at: at)
        _drop_older(self._chats, since, lambda stamps: stamps[-1])
        if (chat_id, user_id) in self._last:
            return False
        stamps = self._chats.get(chat_id, deque())
        while stamps and stamps[0] <= since:
            stamps.popleft()
        if len(stamps) >= self.per_chat:
            return False
        stamps.append(now)
        self._chats.pop(chat_id, None)
        self._chats[chat_id] = stamps  # (re)inserted last: both dicts stay in order of their latest refusal
        self._last[(chat_id, user_id)] = now
        return True


def _drop_older(entries: dict[K, V], since: float, latest: Callable[[V], float]) -> None:
    """Forget the entries (kept in order of their latest time) whose latest time is not after `since`."""
    while entries:
        key, value = next(iter(entries.items()))
        if latest(value) > since:
            return
        del entries[key]

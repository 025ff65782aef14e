"""Flood control: Telegram's limits applied before sending, and 429s waited out so nothing is dropped.

PTB's `AIORateLimiter` spaces requests to about 30/s overall and 20/min per group, and retries a
`RetryAfter`. It has no limit per private chat, where Telegram allows a short burst and then about one
message a second; `FloodLimiter` adds that bucket for new messages (edits only count overall).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final

from aiolimiter import AsyncLimiter
from telegram.ext import AIORateLimiter

CHAT_BURST: Final = 10
"""New messages one private chat may get at once; after that about one per `CHAT_PERIOD_S / CHAT_BURST`."""
CHAT_PERIOD_S: Final = 10.0
MAX_RETRIES: Final = 8
OVERALL_PER_S: Final = 25
"""A margin under Telegram's ~30/s: a leaky bucket at exactly 30 still trips a sliding window, and every
429 pauses all sending for its retry_after."""
_BUCKETED: Final = frozenset({"sendMessage", "sendPhoto", "sendDocument", "copyMessage", "forwardMessage"})


class FloodLimiter(AIORateLimiter):
    """`AIORateLimiter` plus a per-private-chat bucket for new messages."""

    def __init__(self, *, chat_burst: int = CHAT_BURST, chat_period_s: float = CHAT_PERIOD_S) -> None:
        super().__init__(overall_max_rate=OVERALL_PER_S, overall_time_period=1, max_retries=MAX_RETRIES)
        self._chat_burst = chat_burst
        self._chat_period_s = chat_period_s
        self._chats: dict[int, AsyncLimiter] = {}

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        chat_id = _int(data.get("chat_id"))
        if endpoint not in _BUCKETED or chat_id is None or chat_id < 0:
            return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)
        async with self._bucket(chat_id):
            return await super().process_request(callback, args, kwargs, endpoint, data, rate_limit_args)

    def _bucket(self, chat_id: int) -> AsyncLimiter:
        if len(self._chats) > 1024:
            # Forget chats whose bucket has fully drained: they behave exactly like a new one.
            self._chats = {k: v for k, v in self._chats.items() if not v.has_capacity(v.max_rate)}
        bucket = self._chats.get(chat_id)
        if bucket is None:
            bucket = self._chats[chat_id] = AsyncLimiter(self._chat_burst, self._chat_period_s)
        return bucket


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None

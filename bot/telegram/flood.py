"""Flood control: Telegram's limits applied before sending, and 429s waited out so nothing is dropped.

Telegram lets a bot send about 30 messages a second overall, 20 a minute to one group, and to one private
chat a short burst, then about one a second. Each limit is a bucket here; a request is sent once every bucket
that applies to it has room, in the order requests arrive. A 429 all the same (Telegram keeps its own count)
pauses every request for its `retry_after`; then the refused request is sent again, up to MAX_RETRIES times.

Ours rather than PTB's `AIORateLimiter` because that one has no bucket for a private chat's own limit (about
one message a second); with room in its buckets, a request here costs a few comparisons.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

import anyio
from telegram.error import RetryAfter
from telegram.ext import BaseRateLimiter

logger = logging.getLogger(__name__)

OVERALL_PER_S: Final = 25
"""A margin under Telegram's ~30/s: a bucket at exactly 30 still trips its sliding window, and every 429
pauses all sending for its retry_after."""
GROUP_BURST: Final = 20
GROUP_PERIOD_S: Final = 60.0
CHAT_BURST: Final = 10
"""New messages one private chat may get at once; after that about one per `CHAT_PERIOD_S / CHAT_BURST`."""
CHAT_PERIOD_S: Final = 10.0
MAX_RETRIES: Final = 8
RETRY_MARGIN_S: Final = 0.1
"""Added to a 429's retry_after, which Telegram rounds down to whole seconds."""
_BUCKETED: Final = frozenset({"sendMessage", "sendPhoto", "sendDocument", "copyMessage", "forwardMessage"})
"""What counts against a private chat's bucket: new messages (edits and tap answers count only overall)."""
_FORGET_AFTER: Final = 1024
"""Group and chat buckets kept before the refilled ones are forgotten (a refilled bucket is a new one)."""


class _Bucket:
    """`burst` requests at once, refilled evenly over `period_s`.

    Kept as the time the bucket would be empty again (the generic cell rate algorithm): booking a request is
    one addition, and the time a request may go is known when it arrives, so requests go in arrival order.
    """

    __slots__ = ("_full_at", "_interval", "_tolerance")

    def __init__(self, burst: int, period_s: float) -> None:
        self._interval = period_s / burst
        self._tolerance = period_s - self._interval
        self._full_at = 0.0

    def earliest(self, now: float) -> float:
        """When a request arriving `now` may be sent."""
        return max(now, self._full_at - self._tolerance)

    def book(self, at: float) -> None:
        """Count a request sent at `at` (not before `earliest`)."""
        self._full_at = max(self._full_at, at) + self._interval

    def refilled(self, now: float) -> bool:
        return self._full_at <= now


class FloodLimiter(BaseRateLimiter[int]):
    """Telegram's flood limits for every Bot API call except getUpdates (PTB never limits that one).

    Requests with a `chat_id` count overall; those to a group or channel (a negative id or an `@name`) also
    count against that chat's bucket, and new messages to a private chat against that chat's. A limit of 0
    turns its buckets off. `rate_limit_args`, where PTB passes it, overrides `max_retries` for one call.
    `clock` and `sleep` are the time it goes by (tests pass in a virtual one).
    """

    def __init__(
        self,
        *,
        overall_per_s: int = OVERALL_PER_S,
        group_burst: int = GROUP_BURST,
        group_period_s: float = GROUP_PERIOD_S,
        chat_burst: int = CHAT_BURST,
        chat_period_s: float = CHAT_PERIOD_S,
        max_retries: int = MAX_RETRIES,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._overall = _Bucket(overall_per_s, 1.0) if overall_per_s else None
        self._group_limit = (group_burst, group_period_s) if group_burst else None
        self._chat_limit = (chat_burst, chat_period_s) if chat_burst else None
        self._groups: dict[int | str, _Bucket] = {}
        self._chats: dict[int, _Bucket] = {}
        self._max_retries = max_retries
        self._clock = clock
        self._sleep = sleep
        self._resume_at = 0.0
        """After a 429: no request is sent before this."""

    async def initialize(self) -> None:
        """Nothing to set up: buckets are made as chats appear."""

    async def shutdown(self) -> None:
        """Nothing to release."""

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        buckets = self._buckets(endpoint, data.get("chat_id"))
        retries = self._max_retries if rate_limit_args is None else rate_limit_args
        refused = 0
        while True:
            await self._turn(buckets)
            try:
                return await callback(*args, **kwargs)
            except RetryAfter as exc:
                refused += 1
                if refused > retries:
                    logger.error("%s refused with 429 %d times in a row; giving up on it", endpoint, refused)
                    raise
                pause = _seconds(exc.retry_after) + RETRY_MARGIN_S
                logger.info("Telegram asks to wait %.1f s (429 on %s): every request waits", pause, endpoint)
                self._resume_at = max(self._resume_at, self._clock() + pause)

    async def _turn(self, buckets: list[_Bucket]) -> None:
        """Wait until this request may go, booking its place in each bucket in turn (the overall one last: a
        chat's own wait can be long, and a place booked overall would hold up every other chat meanwhile)."""
        for bucket in buckets:
            await self._book(bucket)
        while (pause := self._resume_at - self._clock()) > 0:  # a 429 came: wait it out, then space again
            await self._sleep(pause)
            if buckets:
                await self._book(buckets[-1])

    async def _book(self, bucket: _Bucket) -> None:
        now = self._clock()
        at = max(now, self._resume_at, bucket.earliest(now))
        bucket.book(at)
        if at > now:
            await self._sleep(at - now)

    def _buckets(self, endpoint: str, chat_id: object) -> list[_Bucket]:
        if chat_id is None:
            return []
        buckets = []
        chat = _int(chat_id)
        if chat is None or chat < 0:
            if self._group_limit is not None:
                key: int | str = chat if chat is not None else str(chat_id)
                buckets.append(self._bucket(self._groups, key, self._group_limit))
        elif endpoint in _BUCKETED and self._chat_limit is not None:
            buckets.append(self._bucket(self._chats, chat, self._chat_limit))
        if self._overall is not None:
            buckets.append(self._overall)
        return buckets

    def _bucket(self, buckets: dict[Any, _Bucket], key: Any, limit: tuple[int, float]) -> _Bucket:
        bucket = buckets.get(key)
        if bucket is None:
            if len(buckets) >= _FORGET_AFTER:
                now = self._clock()
                for stale in [k for k, b in buckets.items() if b.refilled(now)]:
                    del buckets[stale]
            bucket = buckets[key] = _Bucket(*limit)
        return bucket


def _seconds(delay: dt.timedelta | float) -> float:
    return delay.total_seconds() if isinstance(delay, dt.timedelta) else float(delay)


def _int(value: object) -> int | None:
    if not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None

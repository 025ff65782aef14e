"""What the bot's Bot API calls did: counts for /metrics and whether Telegram answers, for /healthz. Does I/O.

`ApiWatch` is a rate limiter that wraps the real one (`FloodLimiter`): every Bot API call but getUpdates
passes PTB's rate limiter, so wrapping it sees each HTTP attempt (a 429 retried by the flood limiter is a
second attempt) without touching the HTTP client. Polls report their failures through `poll_failed`.

"Telegram answers" means: the last Bot API exchange seen got an HTTP answer from the Bot API (a 429 or a
400 counts; a connection error, a timeout or a 5xx, which PTB raises as `NetworkError`, does not). When the
last exchange failed, or none was seen for `FRESH_S`, `reachable()` asks again with one `getMe`. Only one
probe is in flight at a time, and health checks that waited for it take its answer, so however often
/healthz is asked the bot makes at most one probe per round trip to Telegram, and a busy healthy bot none.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any, Final

import anyio
from telegram import Bot
from telegram.error import Conflict, NetworkError, RetryAfter, TelegramError
from telegram.ext import BaseRateLimiter

logger = logging.getLogger(__name__)

FRESH_S: Final = 60.0
"""A Bot API answer younger than this vouches for Telegram; older, `reachable()` asks with getMe."""
PROBE_TIMEOUT_S: Final = 5.0
"""How long a getMe probe may take before Telegram counts as unreachable."""
CONFLICT_EVERY_S: Final = 60.0
"""A run of 409 Conflicts from getUpdates once the bot polls is one warning per this many seconds."""
ANOTHER_POLLER: Final = (
    "another process polls Telegram for updates with this bot token (getUpdates answered 409 Conflict): "
    "stop that bot, or give this one a token of its own from @BotFather"
)
"""Why the bot stops when a 409 Conflict comes before its first poll was answered."""


class ApiWatch(BaseRateLimiter[int]):
    """Wraps a rate limiter; counts Bot API calls and 429s per method, and remembers whether Telegram answered."""

    def __init__(self, inner: BaseRateLimiter[int], clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        """HTTP attempts per Bot API method (getUpdates not included)."""
        self.refused: Counter[str] = Counter()
        """429 answers per Bot API method."""
        self.answered: bool | None = None
        """Whether the last exchange got Telegram's answer; None before the first."""
        self._seen_at = 0.0
        self._clock = clock
        self._probe = anyio.Lock()
        self._exchanges = 0
        self.another_poller = anyio.Event()
        """Set when getUpdates is refused with 409 Conflict before any poll was answered: another bot polls."""
        self._polled = False
        self._conflicts = 0
        self._conflict_said_at: float | None = None

    async def initialize(self) -> None:
        await self.inner.initialize()

    async def shutdown(self) -> None:
        await self.inner.shutdown()

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        async def attempt(*a: Any, **kw: Any) -> Any:
            self.calls[endpoint] += 1
            try:
                result = await callback(*a, **kw)
            except RetryAfter:
                self.refused[endpoint] += 1
                self._saw(answered=True)
                raise
            except NetworkError:
                self._saw(answered=False)
                raise
            except TelegramError:
                self._saw(answered=True)
                raise
            self._saw(answered=True)
            return result

        return await self.inner.process_request(attempt, args, kwargs, endpoint, data, rate_limit_args)

    def polled(self) -> None:
        """A getUpdates was answered (`CardBot.get_updates`): from now on a 409 Conflict is a warning."""
        self._polled = True

    def poll_failed(self, error: TelegramError) -> None:
        """`Updater.start_polling(error_callback=...)`: a failed getUpdates, logged as PTB would.

        A 409 Conflict means another process polls with the token: before this bot's first answered poll it
        sets `another_poller` (the bot stops with `ANOTHER_POLLER`); later a run of them (each bot's poll ends
        the other's) is one warning every `CONFLICT_EVERY_S`, not a line every few seconds."""
        if isinstance(error, Conflict):
            if not self._polled:
                self.another_poller.set()
                return
            self._conflicts += 1
            now = self._clock()
            if self._conflict_said_at is None or now - self._conflict_said_at >= CONFLICT_EVERY_S:
                logger.warning(
                    "polling for updates: %d x 409 Conflict (%s) since the last warning: another process polls "
                    "with this bot token; stop it",
                    self._conflicts,
                    error,
                )
                self._conflicts, self._conflict_said_at = 0, now
            return
        logger.error("polling for updates failed: %s", error)
        if isinstance(error, NetworkError):
            self._saw(answered=False)

    async def reachable(self, bot: Bot) -> bool:
        """Whether Telegram answers: the last exchange, or a getMe made now if that one failed or is stale."""
        if self.answered and self._clock() - self._seen_at < FRESH_S:
            return True
        seen = self._exchanges
        async with self._probe:
            if self._exchanges == seen:  # nobody probed (or called) while this check waited its turn
                # A TelegramError was seen by `attempt`; what it says is all the probe wants.
                with anyio.move_on_after(PROBE_TIMEOUT_S) as scope, contextlib.suppress(TelegramError):
                    await bot.get_me()
                if scope.cancelled_caught:
                    self._saw(answered=False)
        return bool(self.answered)

    def _saw(self, *, answered: bool) -> None:
        self.answered = answered
        self._seen_at = self._clock()
        self._exchanges += 1

"""Fault injection for the fake Bot API: scripted failures per method and an optional flood limiter.

Pure bookkeeping; the clock is injected so limiter tests need not wait.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from .model import ApiReject


@dataclass(slots=True)
class Fault:
    """A scripted failure for the next `times` calls of one method."""

    status: int
    description: str
    retry_after: int | None
    hang: bool
    times: int

    def reject(self) -> ApiReject:
        return ApiReject(self.status, self.description, self.retry_after)


def default_description(status: int, retry_after: int | None) -> str:
    """Telegram's wording for common injected statuses."""
    if status == 429:
        return f"Too Many Requests: retry after {retry_after}"
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"Error {status}"


class Faults:
    """Scripted failures, consumed in the order they were added, per method (case-insensitive)."""

    def __init__(self) -> None:
        self._pending: dict[str, deque[Fault]] = {}

    def add(self, method: str, fault: Fault) -> None:
        self._pending.setdefault(method.lower(), deque()).append(fault)

    def take(self, method: str) -> Fault | None:
        queue = self._pending.get(method.lower())
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.popleft()
        return fault


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Sliding-window flood limits: (messages, seconds). Defaults follow Telegram's Bot FAQ."""

    overall: tuple[int, float] = (30, 1.0)
    """~30 messages per second across all chats."""
    per_chat: tuple[int, float] = (5, 5.0)
    """~1 message per second in one chat, with a short burst allowed."""
    per_group: tuple[int, float] = (20, 60.0)
    """20 messages per minute in one group (chat_id < 0)."""


class FloodLimiter:
    """Counts sent/edited messages and answers how long to wait when a limit is exceeded."""

    def __init__(self, limits: RateLimits, clock: Callable[[], float]) -> None:
        self._limits = limits
        self._clock = clock
        self._overall: deque[float] = deque()
        self._chats: dict[int, deque[float]] = {}
        self._groups: dict[int, deque[float]] = {}
        self.accepted: list[float] = []
        """When each message it let through was sent (the clock's time), in order."""
        self.tried: list[float] = []
        """When each message was sent, let through or refused with 429, in order."""

    def check(self, chat_id: int) -> int | None:
        """Record one message to `chat_id`, or return retry_after (whole seconds, ≥ 1) if over a limit."""
        now = self._clock()
        self.tried.append(now)
        windows = [(self._overall, self._limits.overall)]
        windows.append((self._chats.setdefault(chat_id, deque()), self._limits.per_chat))
        if chat_id < 0:
            windows.append((self._groups.setdefault(chat_id, deque()), self._limits.per_group))
        waits = []
        for stamps, (limit, seconds) in windows:
            while stamps and stamps[0] <= now - seconds:
                stamps.popleft()
            if len(stamps) >= limit:
                waits.append(stamps[0] + seconds - now)
        if waits:
            return max(1, math.ceil(max(waits)))
        for stamps, _ in windows:
            stamps.append(now)
        self.accepted.append(now)
        return None

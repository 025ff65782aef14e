"""Per-person limits for a public bot, checked where a call or a question starts. No I/O; the clock is injected.

`Limits.start_call` refuses a call past `calls_per_minute` or `concurrent_calls` (an agent's call through the
gateway also past its own share of them, `agent_share`), `question` a server's question
past `open_questions`, and `process` a new unshared stdio session past `stdio_processes` (the pool asks).
A `Refusal` carries one line for the person, marked not to be told when that person heard about that limit
less than `TELL_EVERY_S` ago: a stranger looping `/call` costs the bot at most one message a minute. Every refusal is
counted in `refused`, which /metrics reads at scrape time.
"""

from __future__ import annotations

import enum
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from bot.config import LimitsConfig

__all__ = ["TELL_EVERY_S", "WINDOW_S", "Key", "Limit", "Limits", "Refusal", "agent_share"]

WINDOW_S: Final = 60.0
"""`calls_per_minute` counts the calls started in the last this many seconds."""
TELL_EVERY_S: Final = 60.0
"""A person hears about one limit at most once in this many seconds; refusals in between are silent."""


class Limit(enum.StrEnum):
    """Which limit refused; the values are the `[limits]` keys."""

    CALLS_PER_MINUTE = "calls_per_minute"
    CONCURRENT_CALLS = "concurrent_calls"
    OPEN_QUESTIONS = "open_questions"
    STDIO_PROCESSES = "stdio_processes"


@dataclass(frozen=True, slots=True)
class Refusal:
    """Something was not started because of `limit`."""

    limit: Limit
    reason: str
    """One line for the person."""
    tell: bool = True
    """False when they were told about this limit recently: say nothing this time."""


Key = tuple[int, str | None]
"""Whose calls a count is of: (person, None) for all of a person's calls, (person, agent) for one agent's."""


def agent_share(limit: int) -> int:
    """An agent's own limit when its person's is `limit`: half, rounded up (0 stays no limit)."""
    return math.ceil(limit / 2)


def _keys(user_id: int, agent: str | None) -> list[Key]:
    """The counts a call of `user_id` (by `agent`, when an agent's) goes under: the person's, and the agent's own."""
    return [(user_id, None)] if agent is None else [(user_id, None), (user_id, agent)]


class Limits:
    """The limits of one bot process; one instance per hub. `LimitsConfig` zeros are no limit."""

    def __init__(self, config: LimitsConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.refused: Counter[Limit] = Counter()
        """Refusals so far, by limit (read by /metrics)."""
        self._now = clock
        self._started: dict[Key, deque[float]] = {}
        self._running: Counter[Key] = Counter()
        self._told: dict[tuple[Key, Limit], float] = {}
        self._next_sweep = clock() + WINDOW_S

    def start_call(self, user_id: int, agent: str | None = None) -> Refusal | None:
        """Admit a call of `user_id` (then `end_call` with the same arguments must follow), or refuse it.

        An agent's call (`agent`: its token's name) counts against its person's limits like a chat call, so the
        person's calls of every kind never pass `[limits]`; and against the agent's own, half the person's
        (`agent_share`), so one runaway agent stops there and leaves the person the other half.
        """
        now = self._now()
        if now >= self._next_sweep:
            self._sweep(now)
        keys = _keys(user_id, agent)
        for key in keys:
            refusal = self._full(key, now)
            if refusal is not None:
                return refusal
        for key in keys:
            if self._per_minute(key):
                self._started.setdefault(key, deque()).append(now)
            self._running[key] += 1
        return None

    def end_call(self, user_id: int, agent: str | None = None) -> None:
        """A call admitted by `start_call` ended."""
        for key in _keys(user_id, agent):
            self._running[key] -= 1
            if self._running[key] <= 0:
                del self._running[key]

    def _per_minute(self, key: Key) -> int:
        limit = self.config.calls_per_minute
        return limit if key[1] is None else agent_share(limit)

    def _full(self, key: Key, now: float) -> Refusal | None:
        """The refusal of one more call counted under `key`, or None when there is room."""
        agent = key[1]
        per_minute = self._per_minute(key)
        at_once = self.config.concurrent_calls if agent is None else agent_share(self.config.concurrent_calls)

        def whose(limit: Limit) -> str:
            """An agent reads its refusal in a result: it names the `[limits]` key its limit is half of."""
            return "each" if agent is None else f"for agent {agent} (half of [limits] {limit})"

        started = self._started.get(key)
        if started is not None:
            while started and started[0] <= now - WINDOW_S:
                started.popleft()
        if per_minute and started and len(started) >= per_minute:
            wait = max(1, math.ceil(started[0] + WINDOW_S - now))
            return self._refuse(
                key,
                Limit.CALLS_PER_MINUTE,
                f"at most {per_minute} calls a minute {whose(Limit.CALLS_PER_MINUTE)}; try again in {wait} s",
            )
        if at_once and self._running[key] >= at_once:
            return self._refuse(
                key,
                Limit.CONCURRENT_CALLS,
                f"at most {at_once} calls at once {whose(Limit.CONCURRENT_CALLS)}; wait for one to end (or "
                "/cancel it)",
            )
        return None

    def question(self, user_id: int, open_now: int) -> Refusal | None:
        """Whether a server may ask `user_id` one more question while `open_now` of theirs are open."""
        limit = self.config.open_questions
        if limit and open_now >= limit:
            return self._refuse(
                (user_id, None),
                Limit.OPEN_QUESTIONS,
                f"at most {limit} open questions each; answer one (or /cancel) first",
            )
        return None

    def processes_full(self, running: int) -> bool:
        """Whether `running` server processes are as many as the bot may run (counts nothing)."""
        return bool(self.config.stdio_processes) and running >= self.config.stdio_processes

    def process(self, user_id: int, running: int) -> Refusal | None:
        """Whether one more server process may start for `user_id` while `running` run for everyone."""
        limit = self.config.stdio_processes
        if self.processes_full(running):
            return self._refuse(
                (user_id, None),
                Limit.STDIO_PROCESSES,
                f"the bot already runs the {limit} server processes it may; try again in a few minutes",
            )
        return None

    def _refuse(self, key: Key, limit: Limit, line: str) -> Refusal:
        self.refused[limit] += 1
        now = self._now()
        told = self._told.get((key, limit))
        if told is not None and now - told < TELL_EVERY_S:
            return Refusal(limit, line, tell=False)
        self._told[(key, limit)] = now
        return Refusal(limit, line)

    def _sweep(self, now: float) -> None:
        """Forget people whose last call and last refusal are over a minute old (strangers come and go)."""
        self._next_sweep = now + WINDOW_S
        self._started = {u: s for u, s in self._started.items() if s and s[-1] > now - WINDOW_S}
        self._told = {k: t for k, t in self._told.items() if now - t < TELL_EVERY_S}

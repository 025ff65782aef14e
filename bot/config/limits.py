"""`[run]`, `[elicitation]`, `[sessions]` and `[limits]`: how long the process, a question and a session
last, and how much one person (and everyone's server processes) may take at once. No I/O.
"""

from __future__ import annotations

from typing import Final

from bot.config._table import Limit, Positive, PositiveInt, Table

DRAIN_S: Final = 20.0
"""`[run] drain_s` when not set."""


class ElicitationConfig(Table):
    """`[elicitation]`."""

    timeout_s: Positive = 600.0
    """An unanswered prompt is cancelled after this long."""


class RunConfig(Table):
    """`[run]`: the process's own lifetime."""

    drain_s: Positive = DRAIN_S
    """On SIGTERM, how long running calls (and 2025-era questions) get to finish before the bot exits;
    what the store keeps (2026-07-28 questions, approvals) stays open for the next process."""


class SessionsConfig(Table):
    """`[sessions]`: the per-(server, chat, user) MCP sessions."""

    idle_timeout_s: Positive = 900.0
    """A session unused this long is closed (it is reopened on demand)."""
    max_open: PositiveInt = 100
    """At most this many sessions at once; to open another, the least recently used idle one is closed."""


class LimitsConfig(Table):
    """`[limits]`: what one person may start, and the server processes of everyone; 0 means no limit.

    All off unless set, except under `allow_everyone`, where the `public()` values are the defaults.
    """

    calls_per_minute: Limit = 0
    """Tool calls one person may start in any 60 seconds."""
    concurrent_calls: Limit = 0
    """Tool calls of one person running at once."""
    open_questions: Limit = 0
    """Servers' questions waiting for one person's answer at once."""
    stdio_processes: Limit = 0
    """Server processes (stdio sessions) the bot runs in total; past it, unshared stdio sessions are refused."""

    @classmethod
    def public(cls) -> LimitsConfig:
        """The defaults for a bot open to everyone."""
        return cls(**PUBLIC_LIMITS)


PUBLIC_LIMITS: Final = {
    "calls_per_minute": 10,
    "concurrent_calls": 2,
    "open_questions": 3,
    "stdio_processes": 20,
}

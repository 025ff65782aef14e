"""An agent's own permission prompt, as its hook or permission-prompt tool puts it, and the answers a person can
give it on the phone. No I/O.

Claude Code and Codex ask before they run a command, edit a file or call an MCP tool; with their hook (or Claude
Code's `--permission-prompt-tool`) the ask reaches the bot instead of the terminal, as a `Permission`, and the
person answers with one `Choice`: the ones the `[[approvals]]` rules covering the ask let be remembered
(`choices`, from `bot.core.remembered.spans_offered`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bot.core.remembered import UNRULED, Span

__all__ = ["ANSWERED_BY", "CHOICE_TITLES", "Choice", "Client", "Permission"]

ANSWERED_BY: Final = "answered_by"
"""The key, in a permission prompt's answer, of the first name of the person who tapped (the answer says who)."""


class Client(enum.StrEnum):
    """Which agent's hook asks (the last part of its URL: `/hooks/<client>`)."""

    CLAUDE_CODE = "claude-code"
    CODEX = "codex"
    PROMPT_TOOL = "prompt-tool"
    """Claude Code's `--permission-prompt-tool`, through the gateway's `/mcp`."""


class Choice(enum.StrEnum):
    """A person's answer to a permission prompt."""

    ALLOW = "allow"
    DENY = "deny"
    SESSION = "session"
    """Allow, and the same ask again in the same agent session."""
    HOUR = "hour"
    """Allow, and the same ask again from this agent for an hour."""
    ALWAYS = "always"
    """Allow, and exactly the same ask again from this agent until the person forgets it (only where the rules
    covering it say `remember = "always"`)."""

    @property
    def allows(self) -> bool:
        return self is not Choice.DENY

    @property
    def span(self) -> Span:
        return _SPANS.get(self, Span.ONCE)


_SPANS: Final = {Choice.SESSION: Span.SESSION, Choice.HOUR: Span.HOUR, Choice.ALWAYS: Span.ALWAYS}


CHOICE_TITLES: Final = {
    Choice.ALLOW: "✅ Allow",
    Choice.DENY: "❌ Deny",
    Choice.SESSION: "Allow for this session",
    Choice.HOUR: "Allow for an hour",
    Choice.ALWAYS: "Always for exactly this",
}


@dataclass(frozen=True, slots=True)
class Permission:
    """What an agent asks leave to do, as the person reads it on the card."""

    client: Client
    tool: str
    """The agent's own tool name: `Bash`, `Edit`, `Write`, `apply_patch`, `mcp__<server>__<tool>`."""
    input: Mapping[str, Any] = field(default_factory=dict)
    cwd: str = ""
    """The agent's working directory ("" when it names none)."""
    session: str = ""
    """The agent's session id ("" when it names none)."""
    fallback: str = ""
    """What the agent does itself when its hook gets no answer in time (said on the card then)."""

    def choices(self, offered: tuple[Span, ...] = UNRULED) -> tuple[Choice, ...]:
        """The answers the card offers, given the spans the rules covering the ask let an answer be remembered
        for (`spans_offered`): Allow and Deny always; "for this session" only when the agent names its session."""
        kept = tuple(
            choice
            for choice in (Choice.SESSION, Choice.HOUR, Choice.ALWAYS)
            if choice.span in offered and (choice is not Choice.SESSION or self.session)
        )
        return (Choice.ALLOW, Choice.DENY, *kept)

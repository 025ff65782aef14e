"""What happens to calls and questions, as the hub and the prompt registry report it. No I/O here.

An `Observer` (the audit log is one) is told of each event before the person or the server hears of it,
so a record that must exist is written first. Observers never raise for their own failures.
"""

from __future__ import annotations

from typing import Any, Protocol

from bot.core.prompt import Prompt
from bot.core.values import Origin, Outcome, ToolOutcome
from mapping import Answer


class Observer(Protocol):
    """Told of every call and every question, in order, and awaited each time."""

    async def call_started(
        self, origin: Origin, server: str, tool: str, arguments: dict[str, Any] | None
    ) -> None:
        """A tool call is about to be sent."""
        ...

    async def call_ended(self, origin: Origin, server: str, tool: str, outcome: ToolOutcome) -> None:
        """A tool call ended; the surface is told next."""
        ...

    async def prompt_shown(self, prompt: Prompt) -> None:
        """A question is about to be shown to its person."""
        ...

    async def prompt_ended(self, prompt: Prompt, outcome: Outcome, answer: Answer | None) -> None:
        """A question ended (`answer` is what goes back to the server; None when the server withdrew it)."""
        ...

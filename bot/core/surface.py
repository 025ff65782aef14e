"""What a chat surface (Telegram, terminal) implements so the MCP side can reach a person. No I/O here.

No MCP or Telegram type crosses this seam: a surface sees `mapping` types (`Request`, `Answer`, `FormSpec`), the
values in `bot.core.values` and `Prompt`s; answers go back through the prompt itself (`Prompt.answer`).
"""

from __future__ import annotations

from typing import Protocol

from bot.core.prompt import Prompt
from bot.core.values import Origin, Outcome


class Surface(Protocol):
    """What a chat surface implements so the hub can reach a person."""

    async def show_prompt(self, prompt: Prompt) -> None:
        """Show a newly pending prompt. Answers come back through `PromptRegistry.answer`.

        A surface that cannot show it at all answers it itself (e.g. `reason="undeliverable"`).
        """
        ...

    async def settle_prompt(self, prompt: Prompt, outcome: Outcome) -> None:
        """Mark a prompt's card as ended (buttons removed), or, for URL consent, as consented/completed."""
        ...

    async def report_unsupported(self, origin: Origin, server: str, message: str, reason: str) -> None:
        """Tell the person a server asked something that cannot be shown (the server gets a JSON-RPC error)."""
        ...

    async def notify(self, origin: Origin, text: str) -> None:
        """Tell the person one plain line about their call (e.g. why it waits); never raises for delivery."""
        ...

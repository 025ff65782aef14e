"""Where a long form's Mini App page is. No I/O.

Built from the config alone, before the cards and the Mini App: the cards (`bot.telegram.surface`) take it at
construction to put a form's link on its card, and the Mini App serves the page at the same address.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import MiniAppConfig
from bot.core import Prompt
from bot.web.miniapp.app import APP_PATH
from bot.web.miniapp.forms import wants_page

__all__ = ["FormLinks"]


@dataclass(frozen=True, slots=True)
class FormLinks:
    """The page of a prompt when it is a long form in a private chat (`wants_page`), else None."""

    config: MiniAppConfig
    public_url: str

    def __call__(self, prompt: Prompt) -> str | None:
        base = self.public_url.rstrip("/") + APP_PATH
        return f"{base}/{prompt.token}" if wants_page(prompt, self.config) else None

"""The explicit dependencies every handler closes over (no module globals, nothing in bot_data)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.config import TelegramConfig
from bot.core import PromptRegistry
from bot.servers.hub import Hub
from bot.telegram.access import Access
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner


@dataclass(frozen=True, slots=True)
class Deps:
    telegram: TelegramConfig
    access: Access
    hub: Hub
    prompts: PromptRegistry
    surface: TelegramSurface
    runner: ToolRunner
    tool_buttons: ToolButtons

"""Wires the console host: registry, hub and the terminal surface. Does I/O."""

from __future__ import annotations

import sys

from bot.config import Config
from bot.console.host import Console, LineReader
from bot.core import PromptRegistry
from bot.servers.hub import Hub


async def run_console(config: Config) -> int:
    """Run the console until /quit or end of input; 0."""
    reader = LineReader(sys.stdin)
    reader.start()
    console = Console(reader)
    prompts = PromptRegistry(console, config.elicitation.timeout_s)
    async with Hub(config, prompts) as hub:
        await console.run(hub, prompts)
    return 0

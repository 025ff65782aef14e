"""`toolnexus-bot check`: connect to every configured server and report one line each. Does I/O."""

from __future__ import annotations

from bot.config import Config
from bot.core import Origin, Outcome, Prompt, PromptRegistry
from bot.servers.hub import Hub

CHECK_ORIGIN = Origin(chat_id=0, user_id=0)


class _NoOne:
    """A surface with nobody behind it: `check` calls no tools, so nothing should ever be asked."""

    async def show_prompt(self, prompt: Prompt) -> None: ...

    async def settle_prompt(self, prompt: Prompt, outcome: Outcome) -> None: ...

    async def report_unsupported(self, origin: Origin, server: str, message: str, reason: str) -> None: ...


async def check(config: Config) -> int:
    """Print `name: ok (protocol, N tools)` or `name: FAILED: reason` per server; 0 when all are ok."""
    prompts = PromptRegistry(_NoOne(), config.elicitation.timeout_s)
    failed = 0
    async with Hub(config, prompts) as hub:
        for name in hub.server_names():
            status = await hub.probe(name, CHECK_ORIGIN)
            if status.connected:
                print(f"{name}: ok (protocol {status.protocol}, {status.tool_count} tools)", flush=True)
            else:
                failed += 1
                print(f"{name}: FAILED: {status.error}", flush=True)
    return 1 if failed else 0

"""Test support for the MCP side: a surface that records what it is asked to show, and a hub factory.

The surface is a fake at the seam (it implements `bot.core.values.Surface`), not a mock of our modules:
the hub, registry and mapping under it are the real ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

from bot.config import Config, ServerConfig, parse_config
from bot.core import Origin, Outcome, Prompt, PromptRegistry
from bot.servers.hub import Hub
from mapping import DECLINED, Answer, Finished, FormInput, apply, start
from tests.zygote import server_command

T = TypeVar("T")

ALICE = Origin(chat_id=1001, user_id=1001)
BOB = Origin(chat_id=1002, user_id=1002)


@dataclass
class RecordingSurface:
    """Shows nothing; records prompts, settlements and reports, and lets a test wait for each."""

    shown: list[Prompt] = field(default_factory=list)
    settled: list[tuple[Prompt, Outcome]] = field(default_factory=list)
    unsupported: list[tuple[Origin, str, str, str]] = field(default_factory=list)
    notices: list[tuple[Origin, str]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def show_prompt(self, prompt: Prompt) -> None:
        self.shown.append(prompt)
        self._notify()

    async def settle_prompt(self, prompt: Prompt, outcome: Outcome) -> None:
        self.settled.append((prompt, outcome))
        self._notify()

    async def report_unsupported(self, origin: Origin, server: str, message: str, reason: str) -> None:
        self.unsupported.append((origin, server, message, reason))
        self._notify()

    async def notify(self, origin: Origin, text: str) -> None:
        self.notices.append((origin, text))
        self._notify()

    async def wait_for(self, predicate: Callable[[], T | None], within: float = 10) -> T:
        """The first truthy value of `predicate`, checked after each change."""
        with anyio.fail_after(within):
            while not (value := predicate()):
                await self._changed.wait()
            return value

    async def next_prompt(self, origin: Origin | None = None, index: int = 0) -> Prompt:
        """The `index`-th prompt shown (to `origin`), waiting for it."""

        def found() -> Prompt | None:
            mine = [p for p in self.shown if origin is None or p.origin == origin]
            return mine[index] if len(mine) > index else None

        return await self.wait_for(found)

    async def outcome_of(self, prompt: Prompt) -> Outcome:
        return await self.wait_for(lambda: next((o for p, o in self.settled if p is prompt), None))

    def outcomes(self, prompt: Prompt) -> list[Outcome]:
        return [o for p, o in self.settled if p is prompt]


def fill(prompt: Prompt, *inputs: FormInput) -> Answer:
    """Walk the prompt's form with these inputs; the accepted Answer (the form must finish)."""
    assert prompt.form is not None
    state = start(prompt.form)
    for form_input in inputs:
        state = apply(state, form_input)
    assert isinstance(state.step, Finished), state.step
    return Answer(prompt.request.id, ok=True, data=dict(state.step.content))


def decline(prompt: Prompt) -> Answer:
    return Answer(prompt.request.id, ok=False, reason=DECLINED)


def cancel(prompt: Prompt) -> Answer:
    return Answer(prompt.request.id, ok=False, reason="cancelled")


def make_config(servers: dict[str, dict[str, Any]], **sections: Any) -> Config:
    return parse_config({"servers": servers, **sections}, {})


def stdio_server(module: str, **extra: Any) -> dict[str, Any]:
    """Config of a test server run as a stdio subprocess (`python -m <module>`, forked by the zygote)."""
    command, *args = server_command(module)
    return {"command": command, "args": args, **extra}


@asynccontextmanager
async def running_hub(
    config: Config,
    *,
    in_process: dict[str, Callable[[], Any]] | None = None,
    timeout_s: float | None = None,
) -> AsyncIterator[tuple[Hub, PromptRegistry, RecordingSurface]]:
    """A real hub and registry over a recording surface; `in_process` maps server names to server factories."""
    surface = RecordingSurface()
    prompts = PromptRegistry(surface, timeout_s if timeout_s is not None else config.elicitation.timeout_s)
    factories = in_process or {}

    def transport(server: ServerConfig) -> Any:
        if server.name in factories:
            return factories[server.name]()
        from bot.servers.connections import default_transport

        return default_transport(server)

    async with Hub(config, prompts, transport=transport) as hub:
        yield hub, prompts, surface


def placeholder(names: Sequence[str], **extra: Any) -> dict[str, dict[str, Any]]:
    """Server entries for in-process servers (the command is never run)."""
    return {name: {"command": "in-process", **extra} for name in names}

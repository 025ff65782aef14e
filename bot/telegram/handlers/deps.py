"""What the handlers depend on, and the one typed way they reach it: `context.deps` (no I/O).

PTB's way (its `contexttypesbot.py` example): the application is built with `CONTEXT_TYPES`, so every callback
gets a `Context`, whose `deps` reads the `Deps` the composition put into `bot_data` once (`provide`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from telegram.ext import Application, CallbackContext, ContextTypes

from bot.config import Config
from bot.core import AgentBook, PromptRegistry
from bot.core.remembered import Memory
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns
from bot.store import AuditLog
from bot.store.grants import GrantStore
from bot.telegram.access import Access, Refusals
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.bot import CardBot
from bot.telegram.second_factor import SecondFactors
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner

__all__ = ["CONTEXT_TYPES", "Context", "Deps", "provide"]

_KEY: Final = "deps"
"""The one `bot_data` key: where `provide` puts the `Deps` and `Context.deps` reads them."""


@dataclass(frozen=True, slots=True)
class Deps:
    """Everything a handler uses; a feature's part is None when the feature is off (no database, no
    `[[approvals]]`...), and then its handlers are not registered."""

    config: Config
    access: Access
    hub: Hub
    prompts: PromptRegistry
    surface: TelegramSurface
    runner: ToolRunner
    tool_buttons: ToolButtons
    refusals: Refusals
    """The ration of refusals to strangers (the access gate's)."""
    approvers: frozenset[int] = frozenset()
    """Everyone who may approve something (`Config.approvers`, worked out once: the gate asks on every update)."""
    approvals: TelegramApprovals | None = None
    signins: SignIns | None = None
    agents: AgentBook | None = None
    """The agent tokens (with a database)."""
    grants: GrantStore | None = None
    """The gateway's OAuth consent requests (with a database and `[gateway] oauth`)."""
    audit: AuditLog | None = None
    """The audit log (with a database)."""
    memory: Memory | None = None
    """Remembered answers to agents' permission prompts (`/agents` lists and revokes them)."""

    @property
    def codes(self) -> SecondFactors | None:
        """The approvers' second factor (with approvals, a database, and a rule asking for a code)."""
        return None if self.approvals is None else self.approvals.codes


class Context(CallbackContext[CardBot, dict[Any, Any], dict[Any, Any], dict[Any, Any]]):
    """PTB's callback context, with the bot's dependencies."""

    @property
    def deps(self) -> Deps:
        """The `Deps` the composition provided.

        Raises:
            LookupError: none were (`provide` was not called for this application).
        """
        deps = self.bot_data.get(_KEY)
        if not isinstance(deps, Deps):
            raise LookupError("the handlers' dependencies were not provided to this application")
        return deps


CONTEXT_TYPES: Final = ContextTypes(context=Context)
"""For `ApplicationBuilder().context_types(...)`: every callback gets a `Context`."""


def provide(app: Application[Any, Context, Any, Any, Any, Any], deps: Deps) -> None:
    """Put `deps` where every callback's `context.deps` finds them: once, by the composition.

    Raises:
        ValueError: some were provided already.
    """
    if _KEY in app.bot_data:
        raise ValueError("the handlers' dependencies were provided already")
    app.bot_data[_KEY] = deps

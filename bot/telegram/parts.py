"""The Telegram bot's parts, whole: what its lifecycle (`bot.telegram.app`) runs. No I/O.

They are built once, in order, above the hosts (`bot.compose.process` and `bot.compose.telegram`); the host
only registers handlers, starts, takes updates, drains and stops over them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from anyio.abc import TaskStatus
from telegram.ext import Application

from bot.config import Config
from bot.core import PromptRegistry
from bot.core.fleet import Fleet
from bot.core.remembered import Memory
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns
from bot.store import Store
from bot.store.fleet_state import Shares
from bot.telegram.access import Access, Refusals
from bot.telegram.api_watch import ApiWatch
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.fleet import FleetPart
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner

__all__ = ["BotParts", "Endpoint"]


class Endpoint(Protocol):
    """A server the bot runs beside PTB (the web endpoint of `[web]`): started once PTB takes updates, stopped
    first."""

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None: ...

    def stop(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BotParts:
    """Everything the Telegram bot runs, each part built whole before PTB starts."""

    config: Config
    store: Store | None
    app: Application  # type: ignore[type-arg]
    """PTB's Application (no updater in webhook mode: the web endpoint feeds its update queue)."""
    watch: ApiWatch
    allowed: Access
    refusals: Refusals
    """Which refusals to strangers are worth sending (rationed by the clock `serve` was given)."""
    surface: TelegramSurface
    prompts: PromptRegistry
    hub: Hub
    runner: ToolRunner
    buttons: ToolButtons
    signins: SignIns | None
    approvals: TelegramApprovals | None
    """The approval cards of `[[approvals]]` (they need the database)."""
    fleet: Fleet
    """This process's part in the bot's processes (alone, or an instance of a fleet): whom it owns, its bus."""
    shares: Shares
    """What the processes share besides the questions (alone, in memory): Mini App answers, sign-in returns."""
    place: FleetPart
    """What the host starts before updates: the kept questions taken back up (in a fleet, those of the
    partitions owned, with the partitions' heartbeats, the takeovers and the bus)."""
    memory: Memory
    """Remembered answers to agents' permission prompts (`/agents` lists and revokes them)."""

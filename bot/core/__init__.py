"""The seam between the MCP side (`bot.servers`) and the chat hosts (`bot.telegram`, `bot.console`).

Prompts, the registry that owns their lifecycle, the `Surface` protocol a host implements, and the plain values
that cross (`Origin`, `Outcome`, `ToolOutcome`, ...). Imports nothing else of `bot`; no I/O.
"""

from bot.core.agents import AgentBook, AgentToken
from bot.core.events import Observer
from bot.core.ownership import EVERYONE, Ownership
from bot.core.prompt import Keeper, Prompt
from bot.core.registry import PromptRegistry
from bot.core.rounds import Era, KeptQuestion, RoundBook
from bot.core.signins import Account, SignInBook, SignInRelay
from bot.core.surface import Surface
from bot.core.tasks import KeptTask, TaskBook
from bot.core.values import (
    MESSAGE_CLIP,
    OUTCOME_TEXT,
    CallStatus,
    Origin,
    Outcome,
    Progress,
    ServerStatus,
    ToolInfo,
    ToolOutcome,
    clip,
)

__all__ = [
    "EVERYONE",
    "MESSAGE_CLIP",
    "OUTCOME_TEXT",
    "Account",
    "AgentBook",
    "AgentToken",
    "CallStatus",
    "Era",
    "Keeper",
    "KeptQuestion",
    "KeptTask",
    "Observer",
    "Origin",
    "Outcome",
    "Ownership",
    "Progress",
    "Prompt",
    "PromptRegistry",
    "RoundBook",
    "ServerStatus",
    "SignInBook",
    "SignInRelay",
    "Surface",
    "TaskBook",
    "ToolInfo",
    "ToolOutcome",
    "clip",
]

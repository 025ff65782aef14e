"""The values that cross the seam between the MCP side and a chat surface. Plain data only, no I/O here.

No MCP or Telegram type crosses this seam: a surface sees `mapping` types (`Request`, `Answer`, `FormSpec`)
and the small values below; the hub sees only `Answer`s coming back through the prompt registry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Origin:
    """Who caused a tool call, and where: prompts go there and only this user may answer them."""

    chat_id: int
    user_id: int
    agent: str | None = None
    """The agent that called on this person's behalf through the gateway (its token's name); None: the
    person in the chat. An agent's questions still go to the person (`chat_id` is their private chat)."""
    task: str | None = None
    """The gateway task this agent's call runs as (kept in the store: its approval outlives the process, and
    whoever carries the approval out runs the call and keeps its result for the agent's poll); None: no task."""

    @property
    def is_private(self) -> bool:
        """Telegram private chats have the user's id as chat id (groups are negative)."""
        return self.chat_id == self.user_id


class Outcome(enum.StrEnum):
    """How a prompt ended; every card is settled with exactly one of these (URL prompts may add COMPLETED)."""

    ANSWERED = "answered"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    SERVER_CANCELLED = "server_cancelled"
    SERVER_GONE = "server_gone"
    SHUTDOWN = "shutdown"
    UNDELIVERABLE = "undeliverable"
    COMPLETED = "completed"
    """A URL prompt the server (or the person, for a retry) reported as done after consent."""
    EXPIRED_WHILE_DOWN = "expired_while_down"
    """A kept question whose deadline passed while the bot was not running."""
    LOST_IN_RESTART = "lost_in_restart"
    """A legacy question: it died with its connection when the bot restarted."""
    SIGN_IN_AGAIN = "sign_in_again"
    """A sign-in not finished when the bot restarted: its link no longer works; a new sign-in follows."""
    AGENT_CANCELLED = "agent_cancelled"
    """The agent whose call asked (through the gateway) cancelled it or went away: nobody waits for the answer."""
    AGENT_REVOKED = "agent_revoked"
    """The agent whose call asked lost its access (its token was revoked or expired, or its person may no longer
    use the bot): the call is ended."""


class CallStatus(enum.StrEnum):
    """How a tool call ended."""

    OK = "ok"
    TOOL_ERROR = "tool_error"
    """The tool ran and reported `isError`."""
    FAILED = "failed"
    """A protocol error (JSON-RPC error, bad arguments, unknown tool)."""
    UNAVAILABLE = "unavailable"
    """The server could not be reached or went away."""
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    REFUSED = "refused"
    """Not started: past one of the person's limits (`[limits]`); `text` is one line, or empty to say nothing."""


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """A tool as a surface lists it."""

    server: str
    name: str
    title: str | None
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    """The server's hints (`readOnlyHint`, `destructiveHint`, ...), wire-shaped; the gateway passes them on."""
    task_support: str | None = None
    """Whether a call to it may run as a task (2025-11-25 `execution.taskSupport`: "optional", "required"; None
    or "forbidden": never)."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """One configured server, as `/servers` and `check` show it."""

    name: str
    title: str | None
    transport: str
    connected: bool
    protocol: str | None = None
    tool_count: int | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A finished tool call, rendered to plain text by the MCP edge."""

    status: CallStatus
    text: str
    structured: dict[str, Any] | None = None
    blocks: tuple[str, ...] = field(default=())
    omitted: int | None = 0
    """Characters of a long result the MCP edge did not read into `text` (None: some, not counted)."""
    source: object = None
    """The server's own result (an SDK `CallToolResult`), for the gateway to hand an agent unchanged; surfaces
    read `text`, never this. None when the call did not return one (refused, failed, cancelled)."""
    again: bool = False
    """The call broke off after its person answered, and the bot cannot tell whether the server got the answer:
    a surface offers to run it again (never on its own: running a tool twice may do its work twice)."""


@dataclass(frozen=True, slots=True)
class Progress:
    """A progress notification for a running call."""

    progress: float
    total: float | None = None
    message: str | None = None

    @property
    def fraction(self) -> float | None:
        if not self.total or self.total <= 0:
            return None
        return max(0.0, min(1.0, self.progress / self.total))


OUTCOME_TEXT: dict[Outcome, str] = {
    Outcome.ANSWERED: "Answer sent",
    Outcome.DECLINED: "Declined",
    Outcome.CANCELLED: "Cancelled",
    Outcome.EXPIRED: "Expired: nobody answered in time",
    Outcome.SERVER_CANCELLED: "Cancelled by the server",
    Outcome.SERVER_GONE: "The server went away",
    Outcome.SHUTDOWN: "Cancelled: the bot is stopping",
    Outcome.UNDELIVERABLE: "Cancelled: could not be delivered",
    Outcome.COMPLETED: "Done",
    Outcome.EXPIRED_WHILE_DOWN: "Expired while the bot was down",
    Outcome.LOST_IN_RESTART: "The bot restarted; the server's question was lost",
    Outcome.SIGN_IN_AGAIN: "The bot restarted before you signed in: this link no longer works",
    Outcome.AGENT_CANCELLED: "Cancelled: your agent stopped waiting",
    Outcome.AGENT_REVOKED: "Cancelled: your agent's access was revoked",
}
"""How each outcome reads on a settled card (both hosts use the same words)."""

MESSAGE_CLIP: Final = 1500
"""Characters of a question's message a card shows; the question's audit row keeps as many (`clip`)."""


def clip(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: cut, and its last character "…", when it is longer."""
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"

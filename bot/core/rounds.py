"""Questions that outlive the process: what is kept of each, and who keeps it. Plain values and protocols, no I/O.

A question of a 2026-07-28 `input_required` round (era `MODERN`) is kept from before its card is sent until the
round's answers went back to the server; after a restart it is shown again as it stood and an answer resumes the
call. A legacy question (era `LEGACY`) is a live JSON-RPC request that dies with its connection: it is kept only
so that a restart can say so on its card and offer to run the call again.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol

from bot.core.values import Origin


class Era(enum.StrEnum):
    """Whether a kept question can be resumed after a restart."""

    MODERN = "2026-07-28"
    LEGACY = "legacy"
    SIGNIN = "signin"
    """Not a server's question: a sign-in card waiting for its browser (`bot.servers.oauth`). The SDK keeps a
    flow's PKCE verifier in its process, so after a restart the card says to sign in again and the next process
    starts a new sign-in, with a fresh link. (A process that does not know the era reads it as legacy.)"""


@dataclass(frozen=True, slots=True)
class KeptQuestion:
    """One open question as the store keeps it (one row)."""

    id: str
    """The question's `elc-...` id."""
    round_id: str
    """A uuid shared by the questions of one round."""
    input_key: str
    """Its key in the round's `inputRequests` (legacy: empty)."""
    era: Era
    server: str
    tool: str
    arguments: dict[str, Any] | None
    origin: Origin
    """Who may answer, and the chat the call was made in."""
    token: str
    """The card's callback-data token: the same buttons keep working after a restart."""
    deadline: float
    """Unix time after which the question expires."""
    input_requests: dict[str, Any] | None = None
    """The round's `inputRequests`, wire-shaped (legacy: this one `elicitation/create`'s params under "")."""
    request_state: str | None = None
    card_chat_id: int | None = None
    card_message_id: int | None = None
    progress: dict[str, Any] = field(default_factory=dict)
    """The card's form progress (`mapping.form.snapshot`) and version."""
    answer: dict[str, Any] | None = None
    """The wire `ElicitResult` once answered, until the round went back to the server."""


class RoundBook(Protocol):
    """Where open questions are kept (the store). Every write is committed when the call returns.

    Raises `Exception` subclasses of its own for database failures; callers log them and go on.
    """

    async def keep(self, question: KeptQuestion) -> None:
        """Save a question before its card is sent."""
        ...

    async def placed(self, question_id: str, chat_id: int, message_id: int) -> None:
        """Record where its card stands (again, when the card moves)."""
        ...

    async def progress(self, question_id: str, progress: dict[str, Any]) -> None:
        """Record the form's progress as fields are answered."""
        ...

    async def answered(self, question_id: str, answer: dict[str, Any]) -> None:
        """Record the answer that goes back to the server with the round."""
        ...

    async def close(self, *question_ids: str) -> None:
        """Forget questions that were answered (their round went back) or settled."""
        ...

    async def open_questions(self) -> list[KeptQuestion]:
        """Every kept question, oldest round first."""
        ...

"""Stand-ins for a person and a client UI when driving servers with the plain SDK `Client`.

Test support only: a scripted elicitation callback and a log of server notifications (no I/O of their own).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.client import ClientRequestContext, IncomingMessage

__all__ = ["Answer", "Inbox", "ScriptedUser", "accept", "cancel", "decline"]

Answer = types.ElicitResult | types.ErrorData | Callable[[dict[str, Any]], Awaitable[types.ElicitResult]]
"""A scripted reply: a fixed result or error, or a coroutine function of the wire-shaped params."""


def accept(**content: Any) -> types.ElicitResult:
    """Accept; URL mode carries no content, so `accept()` is the URL-mode answer."""
    return types.ElicitResult(action="accept", content=content or None)


def decline() -> types.ElicitResult:
    return types.ElicitResult(action="decline")


def cancel() -> types.ElicitResult:
    return types.ElicitResult(action="cancel")


@dataclass
class ScriptedUser:
    """An elicitation callback that answers from `answers` in order and records each question (wire shape)."""

    answers: list[Answer]
    asked: list[dict[str, Any]] = field(default_factory=list)
    request_ids: list[str | int] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.asked.append(wire)
        self.request_ids.append(context.request_id)
        if not self.answers:
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"unscripted question: {wire['message']}"
            )
        answer = self.answers.pop(0)
        return await answer(wire) if callable(answer) else answer


@dataclass
class Inbox:
    """A message handler that keeps every server notification and wakes waiters on each one."""

    notifications: list[types.ServerNotification] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            raise message
        self.notifications.append(message)
        self._arrived.set()
        self._arrived = anyio.Event()

    def completed_ids(self) -> list[str]:
        """Ids from `notifications/elicitation/complete`, in arrival order."""
        return [
            n.params.elicitation_id
            for n in self.notifications
            if isinstance(n, types.ElicitCompleteNotification)
        ]

    async def wait_for_completion(self, elicitation_id: str) -> None:
        while elicitation_id not in self.completed_ids():
            await self._arrived.wait()

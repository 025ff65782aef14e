"""A question's `Keeper` for the store's `RoundBook`: what the registry and the surface report, written. Does I/O.

Shared by the 2026-07-28 round driver (`bot.servers.rounds`), the legacy path (`bot.servers.elicitation`) and the
restore after a restart (`bot.telegram.restore`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from bot.core import Era, KeptQuestion, Prompt, RoundBook

__all__ = ["RoundKeeper"]

logger = logging.getLogger(__name__)


class RoundKeeper:
    """One question's `Keeper`: writes through a `RoundBook`; never raises (a database failure is logged, and the
    question goes on in memory)."""

    def __init__(self, book: RoundBook, question: KeptQuestion) -> None:
        self.book = book
        self.question = question

    @property
    def resumable(self) -> bool:
        return self.question.era is Era.MODERN

    async def _write(self, what: str, write: Callable[[], Awaitable[None]]) -> None:
        try:
            await write()
        except Exception:
            # The outermost store hook: an outage must not turn into a lost answer (the audit log does the same).
            logger.exception("could not record %s of question %s", what, self.question.id)

    async def shown(self, prompt: Prompt) -> None:
        self.question = replace(
            self.question,
            id=prompt.request.id,
            token=prompt.token,
            deadline=time.time() + prompt.seconds_left,
        )
        await self._write("the question", lambda: self.book.keep(self.question))
        # What a restart needs is on disk now; the rest of the question's life needs only its id and era.
        self.question = replace(self.question, arguments=None, input_requests=None, request_state=None)

    async def placed(self, prompt: Prompt, chat_id: int, message_id: int) -> None:
        await self._write("the card", lambda: self.book.placed(self.question.id, chat_id, message_id))

    async def progress(self, prompt: Prompt, progress: dict[str, Any]) -> None:
        if self.question.era is Era.LEGACY:
            return  # a restart settles a legacy question (its session is gone): its progress is never read
        await self._write("the progress", lambda: self.book.progress(self.question.id, progress))

    async def close(self) -> None:
        """Forget the question (a sign-in that is over, whatever its card's question did)."""
        await self._write("the end", lambda: self.book.close(self.question.id))

    async def ended(self, prompt: Prompt, answer: dict[str, Any] | None) -> None:
        if self.question.era is Era.SIGNIN:
            return  # consent ends the card's question, not the sign-in: `bot.servers.oauth` closes the row
        if self.question.era is Era.LEGACY or answer is None:
            await self._write("the end", lambda: self.book.close(self.question.id))
        else:
            # Kept until the round went back: a restart before then sends this answer with the others.
            await self._write("the answer", lambda: self.book.answered(self.question.id, answer))

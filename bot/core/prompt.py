"""A `Request` in flight: who may answer it, where, until when, and how it ended. Async values, no I/O.

A surface holds `Prompt`s and answers them through the prompt itself (`Prompt.answer`), like resolving a
future; the `PromptRegistry` (bot.core.registry) owns their lifecycle.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio

from bot.core.permission import Permission
from bot.core.values import Origin, Outcome
from mapping import DECLINED, Answer, FormSpec, Request


class Keeper(Protocol):
    """A prompt's link to where it is kept; the registry and the surface report to it (never raises)."""

    @property
    def resumable(self) -> bool:
        """Whether the question can still be answered after a restart (a 2026-07-28 round's); a 2025-era one
        dies with its connection and is kept only so that the next process can say so."""
        ...

    async def shown(self, prompt: Prompt) -> None:
        """The card is about to be sent: the question is saved first."""
        ...

    async def placed(self, prompt: Prompt, chat_id: int, message_id: int) -> None:
        """The card was sent (or moved) and stands there."""
        ...

    async def progress(self, prompt: Prompt, progress: dict[str, Any]) -> None:
        """The person answered a field (or paged); `progress` is what a restart restores."""
        ...

    async def ended(self, prompt: Prompt, answer: dict[str, Any] | None) -> None:
        """The question ended: `answer` is the wire `ElicitResult` going back (None: withdrawn)."""
        ...


@dataclass(eq=False, slots=True)
class Prompt:
    """A `Request` in flight, bound to the person whose call caused it."""

    request: Request
    origin: Origin
    server: str
    form: FormSpec | None = None
    """The parsed form of an input request (a surface walks it with `mapping.form`)."""
    elicitation_id: str | None = None
    """URL mode on 2025-11-25: what `notifications/elicitation/complete` names."""
    awaits_completion: bool = False
    """A -32042 authorization: the call is retried once this completes (the person may say so by hand)."""
    sign_in: bool = False
    """An OAuth sign-in card (the bot's own, not a server's question): settles "Signed in to <server>"."""
    scope: Hashable = None
    """The MCP session the request came from (completion notifications are matched within it)."""
    why_withdrawn: Callable[[], Outcome] | None = None
    """Asked when the waiting request is cancelled under us: the server withdrew it, or its session ended."""
    deadline: float = 0.0
    """`time.monotonic()` after which the prompt expires."""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(9))
    """Short, unguessable handle for surfaces (Telegram callback data); never the server's id."""
    keeper: Keeper | None = None
    """Where the question is kept so that it outlives the process (None: in memory only)."""
    permission: Permission | None = None
    """An agent's own permission prompt (its hook's): the card shows what it wants to do and one tap answers."""
    outcome: Outcome | None = None
    completed: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set once the surface has been told how the prompt ended."""
    _answer: Answer | None = None
    _answered: anyio.Event = field(default_factory=anyio.Event)
    _abort: Outcome | None = None
    _release: Callable[[Prompt], None] | None = None
    """While a consented URL prompt awaits completion (`await_completion`): takes it off the registry's list."""

    @property
    def pending(self) -> bool:
        """True while the person can still answer."""
        return self._answer is None and self.outcome is None

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def answer(self, answer: Answer) -> bool:
        """Deliver a person's answer; False when the prompt already ended (the surface says so)."""
        if not self.pending or answer.id != self.request.id:
            return False
        self._answer = answer
        self._answered.set()
        return True

    def abort(self, outcome: Outcome) -> bool:
        """End the prompt on the system's behalf (shutdown, server gone): its answer is `cancel` with `outcome`'s
        reason, and it ends as `outcome`; False when it already ended."""
        if not self.pending:
            return False
        self._abort = outcome
        return self.answer(Answer(id=self.request.id, ok=False, reason=outcome.value))

    @property
    def aborted(self) -> Outcome | None:
        """How the system ended the prompt (`abort`), or None."""
        return self._abort

    async def wait(self) -> None:
        """Wait until the prompt is answered (or aborted), at most until its deadline."""
        with anyio.move_on_after(self.seconds_left):
            await self._answered.wait()

    def conclude(self) -> tuple[Answer, Outcome]:
        """Once its wait is over: the answer the prompt ends with, and how it ended. Unanswered, it expires now
        (its answer is `timeout`: it is no longer pending)."""
        answer = self._answer
        if answer is None:
            self._answer = answer = Answer(id=self.request.id, ok=False, reason="timeout")
            return answer, Outcome.EXPIRED
        if self._abort is not None:
            return answer, self._abort
        if answer.ok:
            return answer, Outcome.ANSWERED
        if answer.reason == Outcome.UNDELIVERABLE:
            return answer, Outcome.UNDELIVERABLE
        return answer, Outcome.DECLINED if answer.reason == DECLINED else Outcome.CANCELLED

    def await_completion(self, release: Callable[[Prompt], None]) -> None:
        """The person consented to a URL flow: `release` takes the prompt off the registry's awaiting list once
        the flow completes (`complete_by_hand`)."""
        self._release = release

    def stop_awaiting(self) -> None:
        """No completion is awaited any more (its calls ended): `complete_by_hand` now returns False."""
        self._release = None

    def complete_by_hand(self) -> bool:
        """The person says a consented URL flow is finished (the spec's manual retry); False when it is not
        awaiting completion (any more)."""
        release, self._release = self._release, None
        if release is None:
            return False
        release(self)
        self.completed.set()
        return True

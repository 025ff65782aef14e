"""Pending prompts: each `Request` waiting for a person, who may answer it, and how it ended. Async, no I/O.

This is where the MCP side (which waits) meets a surface (which answers): the hub calls `ask()` from its
elicitation callback; a surface calls `answer()` when the person taps or types. Every prompt is settled
exactly once towards the surface, whatever ends it: an answer, the timeout, the server, or shutdown.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

import anyio

from bot.surface import Origin, Outcome, Surface
from mapping import DECLINED, Answer, FormSpec, Request

logger = logging.getLogger(__name__)

_OUTCOME_OF_REASON = {DECLINED: Outcome.DECLINED}


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
    scope: Hashable = None
    """The MCP session the request came from (completion notifications are matched within it)."""
    why_withdrawn: Callable[[], Outcome] | None = None
    """Asked when the waiting request is cancelled under us: the server withdrew it, or its session ended."""
    deadline: float = 0.0
    """`time.monotonic()` after which the prompt expires."""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(9))
    """Short, unguessable handle for surfaces (Telegram callback data); never the server's id."""
    outcome: Outcome | None = None
    completed: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)
    """Set once the surface has been told how the prompt ended."""
    _answer: Answer | None = None
    _answered: anyio.Event = field(default_factory=anyio.Event)
    _abort: Outcome | None = None

    @property
    def pending(self) -> bool:
        """True while the person can still answer."""
        return self._answer is None and self.outcome is None

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


class PromptRegistry:
    """All prompts of the process, by token; the only way answers reach a waiting server request."""

    def __init__(self, surface: Surface, timeout_s: float) -> None:
        self.surface = surface
        self.timeout_s = timeout_s
        self._pending: dict[str, Prompt] = {}
        self._awaiting: dict[tuple[Hashable, str], Prompt] = {}
        self._out: Counter[tuple[Origin, str]] = Counter()
        """Per person and server, how many places hold one of their prompts (`_pending`, `_awaiting`; a prompt
        may briefly be in both). `asking` is asked once a second for every running call, so it must not walk
        all pending prompts."""

    def get(self, token: str) -> Prompt | None:
        """The pending prompt with this token, or None when it has ended (or never existed)."""
        prompt = self._pending.get(token)
        return prompt if prompt is not None and prompt.pending else None

    def pending(self, *, chat_id: int | None = None, origin: Origin | None = None) -> list[Prompt]:
        """Pending prompts, optionally only those of one chat or one origin, oldest first."""
        return [
            p
            for p in self._pending.values()
            if p.pending
            and (chat_id is None or p.origin.chat_id == chat_id)
            and (origin is None or p.origin == origin)
        ]

    def asking(self, origin: Origin, server: str) -> bool:
        """Whether `server` has a card out for `origin`: asked and not settled yet, or a link the person
        consented to open whose flow is not complete yet."""
        return self._out[(origin, server)] > 0

    def __iter__(self) -> Iterator[Prompt]:
        return iter(list(self._pending.values()))

    def answer(self, prompt: Prompt, answer: Answer) -> bool:
        """Deliver a person's answer; False when the prompt already ended (the surface says so)."""
        if not prompt.pending or answer.id != prompt.request.id:
            return False
        prompt._answer = answer
        prompt._answered.set()
        return True

    def abort(self, prompt: Prompt, outcome: Outcome) -> bool:
        """End a prompt on the system's behalf (shutdown, server gone): the server gets `cancel`."""
        if not prompt.pending:
            return False
        prompt._abort = outcome
        return self.answer(prompt, Answer(id=prompt.request.id, ok=False, reason=outcome.value))

    def abort_all(self, outcome: Outcome, *, scope: Hashable = None) -> int:
        """Abort every pending prompt (of one MCP session, when `scope` is given); returns how many."""
        return sum(self.abort(p, outcome) for p in self if scope is None or p.scope == scope)

    async def ask(self, prompt: Prompt) -> Answer:
        """Show `prompt`, wait for the person (bounded by the timeout), settle the card, return the answer.

        Never raises for outcomes; a cancelled caller (the server withdrew the request, or its session is
        closing) still gets its card settled before the cancellation propagates.
        """
        prompt.deadline = time.monotonic() + self.timeout_s
        self._pending[prompt.token] = prompt
        self._count(prompt, +1)
        try:
            with anyio.CancelScope(shield=True):
                # A card on its way must land (and be known), or a request withdrawn meanwhile leaves it live.
                await self.surface.show_prompt(prompt)
            with anyio.move_on_after(prompt.seconds_left):
                await prompt._answered.wait()
            answer = prompt._answer
            if answer is None:
                prompt._answer = answer = Answer(id=prompt.request.id, ok=False, reason="timeout")
                outcome = Outcome.EXPIRED
            elif prompt._abort is not None:
                outcome = prompt._abort
            elif answer.ok:
                outcome = Outcome.ANSWERED
            else:
                outcome = _OUTCOME_OF_REASON.get(answer.reason or "", Outcome.CANCELLED)
                if answer.reason == Outcome.UNDELIVERABLE:
                    outcome = Outcome.UNDELIVERABLE
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                withdrawn = prompt.why_withdrawn() if prompt.why_withdrawn else Outcome.SERVER_CANCELLED
                await self._settle(prompt, prompt._abort or withdrawn)
            self._forget(prompt)
            raise
        with anyio.CancelScope(shield=True):
            if (
                outcome is Outcome.ANSWERED
                and prompt.request.url is not None
                and (prompt.elicitation_id or prompt.awaits_completion)
            ):
                self._awaiting[(prompt.scope, prompt.elicitation_id or prompt.token)] = prompt
                self._count(prompt, +1)
            await self._settle(prompt, outcome)
        self._forget(prompt)
        return answer

    def _forget(self, prompt: Prompt) -> None:
        del self._pending[prompt.token]
        self._count(prompt, -1)

    def _count(self, prompt: Prompt, delta: int) -> None:
        key = (prompt.origin, prompt.server)
        self._out[key] += delta
        if not self._out[key]:
            del self._out[key]

    def complete(self, scope: Hashable, elicitation_id: str) -> Prompt | None:
        """A URL elicitation was reported complete; unknown or finished ids are ignored (spec MUST)."""
        prompt = self._awaiting.pop((scope, elicitation_id), None)
        if prompt is not None:
            self._count(prompt, -1)
            prompt.completed.set()
        return prompt

    def complete_by_hand(self, prompt: Prompt) -> bool:
        """The person says a consented URL flow is finished (the spec's manual retry)."""
        for key, candidate in list(self._awaiting.items()):
            if candidate is prompt:
                del self._awaiting[key]
                self._count(prompt, -1)
                prompt.completed.set()
                return True
        return False

    def drop_awaiting(self, scope: Hashable) -> list[Prompt]:
        """Forget consented URL prompts of a scope whose calls have all ended; returns them for settling."""
        dropped = [p for key, p in self._awaiting.items() if key[0] == scope]
        self._awaiting = {k: p for k, p in self._awaiting.items() if k[0] != scope}
        for prompt in dropped:
            self._count(prompt, -1)
        return dropped

    async def settle_completed(self, prompt: Prompt) -> None:
        """Tell the surface a consented URL prompt is done."""
        with anyio.CancelScope(shield=True):
            await self._settle(prompt, Outcome.COMPLETED)

    async def wait_settled(self, scope: Hashable) -> None:
        """Wait until every prompt of one MCP session still in flight has been settled towards the surface."""
        for prompt in [p for p in self._pending.values() if p.scope == scope]:
            await prompt.settled.wait()

    async def _settle(self, prompt: Prompt, outcome: Outcome) -> None:
        prompt.outcome = outcome
        try:
            await self.surface.settle_prompt(prompt, outcome)
        except Exception:
            # A card that cannot be edited must not turn into a lost answer for the server.
            logger.exception("could not settle prompt %s", prompt.request.id)
        finally:
            prompt.settled.set()

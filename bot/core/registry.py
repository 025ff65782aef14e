"""Pending prompts: each waiting for a person, shown on a surface, settled exactly once. Async, no I/O.

This is where the MCP side (which waits) meets a surface (which answers): the hub calls `ask()` from its
elicitation callback; a surface answers a prompt it shows through `Prompt.answer`. Every prompt is settled
exactly once towards the surface, whatever ends it: an answer, the timeout, the server, or shutdown.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from functools import partial

import anyio

from bot.core.events import Observer
from bot.core.ownership import EVERYONE, Ownership
from bot.core.prompt import Prompt
from bot.core.surface import Surface
from bot.core.values import Origin, Outcome
from mapping import Answer, answer_to_elicit_result

logger = logging.getLogger(__name__)


class PromptRegistry:
    """All prompts of the process, by token; the only way answers reach a waiting server request."""

    def __init__(
        self,
        surface: Surface,
        timeout_s: float,
        observer: Observer | None = None,
        *,
        fence: Ownership = EVERYONE,
    ) -> None:
        self.surface = surface
        self.timeout_s = timeout_s
        self.observer = observer
        """Told of each question shown and ended, before the person or the server is (the audit log)."""
        self._pending: dict[str, Prompt] = {}
        self._awaiting: dict[tuple[Hashable, str], Prompt] = {}
        self._out: Counter[tuple[Origin, str]] = Counter()
        """Per person and server, how many places hold one of their prompts (`_pending`, `_awaiting`; a prompt
        may briefly be in both). `asking` is asked once a second for every running call, so it must not walk
        all pending prompts."""
        self._of_user: dict[int, dict[str, Prompt]] = {}
        """`_pending` by person: a question's limit check counts that person's open prompts, which under a
        flood of a thousand would otherwise walk all of them for each new question."""
        self.answers: Counter[str] = Counter()
        """Answers that went back to servers, by wire action (accept, decline, cancel)."""
        self._shields: set[anyio.CancelScope] = set()
        self._io_deadline = math.inf
        self.detached = False
        """Set when the process leaves what is kept to the next one (a drain's end): a kept prompt whose wait is
        cancelled then is neither settled nor recorded as ended; its row and card stay as they stand."""
        self.fence = fence
        """The people this process acts for (in a fleet, its partitions'): a prompt of someone it lost is left as
        it stands, and none ends for a person before `acts_for` said yes (no card edited, nothing recorded)."""

    def detach(self) -> None:
        """The process is leaving after a drain: from now on, kept prompts are left as they stand, as a crash
        leaves them (the next process restores them, or says the 2025-era ones were lost)."""
        self.detached = True

    def leave(self, prompt: Prompt) -> bool:
        """The process leaves after a drain, and `prompt`, kept, cannot wait for the next one (a 2025-era question
        lives on its connection): its server gets `cancel` now. It is neither recorded as ended nor settled: its
        row stays for the next process, which says on its card that it was lost (`Outcome.LOST_IN_RESTART`), as
        the caller already did. False when it is not pending, not kept, or the process is not leaving."""
        if not self.kept(prompt):
            return False
        return self.abort(prompt, Outcome.LOST_IN_RESTART)

    def kept(self, prompt: Prompt) -> bool:
        """Whether the prompt is left as it stands: for the next process once `detached`, or for the instance
        that took its person over (whatever its kind: this process does nothing more for them)."""
        return (self.detached and prompt.keeper is not None) or not self.fence.owns(prompt.origin.user_id)

    def leaves(self, user_id: int) -> bool:
        """Whether what is kept for the person is left as it stands (a drain's end, or they are another
        instance's now): no kept row is closed for them."""
        return self.detached or not self.fence.owns(user_id)

    @contextmanager
    def shielded_io(self) -> Iterator[anyio.CancelScope]:
        """A scope for surface I/O that the caller's cancellation must not cut short (a card on its way must
        land and be known), yet that shutdown abandons once its grace is over (`abandon_io_after`)."""
        with anyio.CancelScope(shield=True, deadline=self._io_deadline) as scope:
            self._shields.add(scope)
            try:
                yield scope
            finally:
                self._shields.discard(scope)

    def abandon_io_after(self, seconds: float) -> None:
        """Shutdown: shielded surface I/O still running (or starting) after `seconds` is abandoned, so a Bot API
        call that hangs or drips cannot hold the process."""
        self._io_deadline = anyio.current_time() + seconds
        for scope in self._shields:
            scope.deadline = min(scope.deadline, self._io_deadline)

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

    def open_for(self, user_id: int) -> int:
        """How many prompts of this person can still be answered (those of every chat and server)."""
        return sum(1 for p in self._of_user.get(user_id, {}).values() if p.pending)

    def asking(self, origin: Origin, server: str) -> bool:
        """Whether `server` has a card out for `origin`: asked and not settled yet, or a link the person
        consented to open whose flow is not complete yet."""
        return self._out[(origin, server)] > 0

    def __iter__(self) -> Iterator[Prompt]:
        return iter(list(self._pending.values()))

    def answer(self, prompt: Prompt, answer: Answer) -> bool:
        """Deliver an answer on the system's or a host's behalf (`Prompt.answer`)."""
        return prompt.answer(answer)

    def abort(self, prompt: Prompt, outcome: Outcome) -> bool:
        """End a prompt on the system's behalf (shutdown, server gone): the server gets `cancel`."""
        return prompt.abort(outcome)

    def abort_all(self, outcome: Outcome, *, scope: Hashable = None) -> int:
        """Abort every pending prompt (of one MCP session, when `scope` is given), except those left for the next
        process (`detach`); returns how many."""
        return sum(
            self.abort(p, outcome) for p in self if (scope is None or p.scope == scope) and not self.kept(p)
        )

    async def ask(self, prompt: Prompt, *, restored: bool = False) -> Answer:
        """Show `prompt`, wait for the person (bounded by the timeout), settle the card, return the answer.

        `restored`: the prompt was kept from before a restart and its card is already back on the surface (its
        deadline is the one it had); it is not shown again. Never raises for outcomes; a cancelled caller (the
        server withdrew the request, or its session is closing) still gets its card settled before the
        cancellation propagates.
        """
        if not restored:
            prompt.deadline = time.monotonic() + self.timeout_s
        self._pending[prompt.token] = prompt
        self._of_user.setdefault(prompt.origin.user_id, {})[prompt.token] = prompt
        self._count(prompt, +1)
        try:
            if not restored:
                with self.shielded_io():
                    await self._record_shown(prompt)  # kept (committed) before the card is sent
                    # A card on its way must land (and be known), or a request withdrawn meanwhile leaves it live.
                    await self.surface.show_prompt(prompt)
            await prompt.wait()
            # A process that was stalled wakes with every deadline due: its people may be another's by now.
            if not await self.fence.acts_for(prompt.origin.user_id):
                self._forget(prompt)  # neither settled nor recorded: the new owner has the question
                return Answer(id=prompt.request.id, ok=False, reason=Outcome.CANCELLED.value)
            answer, outcome = prompt.conclude()
            self.answers[answer_to_elicit_result(answer)["action"]] += 1
            if outcome is Outcome.LOST_IN_RESTART:  # `leave`: its row and card are the next process's
                prompt.outcome = outcome
                prompt.settled.set()
                self._forget(prompt)
                return answer
        except anyio.get_cancelled_exc_class():
            if self.kept(prompt):  # left as a crash leaves it: the next process takes it up
                self._forget(prompt)
                raise
            with self.shielded_io():
                withdrawn = prompt.why_withdrawn() if prompt.why_withdrawn else Outcome.SERVER_CANCELLED
                await self._record_ended(prompt, prompt.aborted or withdrawn, None)
                await self._settle(prompt, prompt.aborted or withdrawn)
            self._forget(prompt)
            raise
        with self.shielded_io():
            await self._record_ended(prompt, outcome, answer)
            if (
                outcome is Outcome.ANSWERED
                and prompt.request.url is not None
                and (prompt.elicitation_id or prompt.awaits_completion)
            ):
                self._awaiting[(prompt.scope, prompt.elicitation_id or prompt.token)] = prompt
                prompt.await_completion(self._release)
                self._count(prompt, +1)
            await self._settle(prompt, outcome)
        self._forget(prompt)
        return answer

    async def _record_shown(self, prompt: Prompt) -> None:
        """The question's audit row and its keeper's copy, written at once (each waits for a commit)."""
        writes: list[Callable[[], Awaitable[None]]] = []
        if self.observer is not None:
            writes.append(partial(self.observer.prompt_shown, prompt))
        if prompt.keeper is not None:
            writes.append(partial(prompt.keeper.shown, prompt))
        await _together(writes)

    async def _record_ended(self, prompt: Prompt, outcome: Outcome, answer: Answer | None) -> None:
        """How the question ended, in the audit and to its keeper, written at once."""
        writes: list[Callable[[], Awaitable[None]]] = []
        if self.observer is not None:
            writes.append(partial(self.observer.prompt_ended, prompt, outcome, answer))
        if prompt.keeper is not None:
            result = None if answer is None else answer_to_elicit_result(answer)
            writes.append(partial(prompt.keeper.ended, prompt, result))
        await _together(writes)

    def _forget(self, prompt: Prompt) -> None:
        del self._pending[prompt.token]
        mine = self._of_user[prompt.origin.user_id]
        del mine[prompt.token]
        if not mine:
            del self._of_user[prompt.origin.user_id]
        self._count(prompt, -1)

    def _count(self, prompt: Prompt, delta: int) -> None:
        key = (prompt.origin, prompt.server)
        self._out[key] += delta
        if not self._out[key]:
            del self._out[key]

    def complete(self, scope: Hashable, elicitation_id: str) -> Prompt | None:
        """A URL elicitation was reported complete; unknown or finished ids are ignored (spec MUST)."""
        prompt = self._awaiting.get((scope, elicitation_id))
        if prompt is not None and prompt.complete_by_hand():
            return prompt
        return None

    def complete_by_hand(self, prompt: Prompt) -> bool:
        """The person says a consented URL flow is finished (`Prompt.complete_by_hand`)."""
        return prompt.complete_by_hand()

    def _release(self, prompt: Prompt) -> None:
        for key, candidate in list(self._awaiting.items()):
            if candidate is prompt:
                del self._awaiting[key]
                self._count(prompt, -1)

    def drop_awaiting(self, scope: Hashable) -> list[Prompt]:
        """Forget consented URL prompts of a scope whose calls have all ended; returns them for settling."""
        dropped = [p for key, p in self._awaiting.items() if key[0] == scope]
        for prompt in dropped:
            prompt.stop_awaiting()
            self._release(prompt)
        return dropped

    async def settle_completed(self, prompt: Prompt, outcome: Outcome = Outcome.COMPLETED) -> None:
        """Tell the surface a consented URL prompt is done (or, with `outcome`, how else it ended)."""
        with self.shielded_io():
            await self._settle(prompt, outcome)

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


async def _together(writes: list[Callable[[], Awaitable[None]]]) -> None:
    """Run `writes` at once rather than one after the other (each is a commit: under a flood, a wait of a few
    passes of a busy event loop); when one fails, its exception is raised, as it would have been alone."""
    if len(writes) <= 1:
        for write in writes:
            await write()
        return
    try:
        async with anyio.create_task_group() as tg:
            for write in writes[1:]:
                tg.start_soon(_run, write)
            await writes[0]()  # in this task: one task fewer to start (the others start as this one waits)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None


async def _run(write: Callable[[], Awaitable[None]]) -> None:
    await write()

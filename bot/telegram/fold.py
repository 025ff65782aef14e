"""Park-and-fold: an answered card waits a moment for its call's result, so both take one edit. Does I/O
(timers, and the edits through the callables the surface hands in).

An answered card is settled a moment later (`FOLD_GRACE_S`), not at once: when its call ends meanwhile, the
tool runner folds the result into that one edit (`Folds.fold_result`), one message instead of two. After the
grace, the settling edit still gives way to the result until its turn comes under the flood limiter (`unless`):
on a quiet bot that is at once, under a flood it is when the edit would have gone anyway, so a flood costs no
message more.

A parked card's life is a `Fold` state; `step` is the one place that moves it:

    WAITING --grace over--> QUEUED --settled--> TAKEN
    WAITING --settle now--> TAKEN  --settled--> TAKEN
    WAITING --result------> FOLDED --settled--> FOLDED
    QUEUED  --result------> FOLDED
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
from telegram.error import TelegramError

from bot.core import Origin, Outcome
from bot.errors import ToolnexusError
from bot.telegram.flood import Withdrawn, unless
from bot.telegram.render import Card, Screen, folded_screen

__all__ = ["FOLD_GRACE_S", "Event", "Fold", "Folds", "IllegalFold", "Parked", "step"]

logger = logging.getLogger(__name__)

FOLD_GRACE_S: Final = 1.0
"""How long an answered card waits for its call's result before it is settled on its own. A call that answers
at once lands well within it (bench b, d), so the answer and the result take one edit; a slower call's card
says "Answer sent" once that edit's turn comes under the flood limiter (at once on a quiet bot; a result that
comes first takes its place), and its person was told so on the tap itself, so nobody waits without a sign."""


class Fold(enum.StrEnum):
    """Where a parked card's settling stands."""

    WAITING = "waiting"
    """The grace runs: the call's result may still come and take the card's one edit."""
    QUEUED = "queued"
    """The grace is over and the settling edit waits for its turn under the flood limiter: the result may still
    take its place (`FOLDED`)."""
    TAKEN = "taken"
    """Its edit is decided: the card is settled alone."""
    FOLDED = "folded"
    """The result takes the card's edit; a settling edit still queued gives way (is withdrawn) when its turn
    comes."""


class Event(enum.StrEnum):
    """What happens to a parked card."""

    GRACE_OVER = "grace over"
    """The grace ran out: settle it, but let a result still take the edit's place until its turn."""
    SETTLE_NOW = "settle now"
    """Settle it alone at once (a newer card came, the bot stops, or the result came without fitting)."""
    RESULT = "result"
    """The call's result came and fits on the card."""
    SETTLED = "settled"
    """The settling edit is done (sent, withdrawn or failed)."""


class IllegalFold(ToolnexusError, RuntimeError):
    """An event that cannot happen to a parked card in its state (a bug in the caller)."""

    def __init__(self, state: Fold, event: Event) -> None:
        super().__init__(f"{event.value!r} cannot happen to a parked card that is {state.value}")
        self.state = state
        self.event = event


_MOVES: Final[dict[tuple[Fold, Event], Fold]] = {
    (Fold.WAITING, Event.GRACE_OVER): Fold.QUEUED,
    (Fold.WAITING, Event.SETTLE_NOW): Fold.TAKEN,
    (Fold.WAITING, Event.RESULT): Fold.FOLDED,
    (Fold.QUEUED, Event.RESULT): Fold.FOLDED,
    (Fold.QUEUED, Event.SETTLED): Fold.TAKEN,
    (Fold.TAKEN, Event.SETTLED): Fold.TAKEN,
    (Fold.FOLDED, Event.SETTLED): Fold.FOLDED,
}
"""Every legal move of a parked card; anything else raises `IllegalFold`."""


def step(state: Fold, event: Event) -> Fold:
    """The state a parked card moves to on `event`. Pure. Raises `IllegalFold` for a move not in `_MOVES`."""
    try:
        return _MOVES[(state, event)]
    except KeyError:
        raise IllegalFold(state, event) from None


@dataclass(slots=True)
class Parked:
    """An answered card whose settling waits for its call's result (`FOLD_GRACE_S`)."""

    card: Card
    timer: asyncio.TimerHandle | None = None
    state: Fold = Fold.WAITING
    done: anyio.Event = field(default_factory=anyio.Event)

    def move(self, event: Event) -> None:
        self.state = step(self.state, event)

    @property
    def taken(self) -> bool:
        """Its edit is decided (settled alone, or with the result folded in)."""
        return self.state in (Fold.TAKEN, Fold.FOLDED)


Key = tuple[Origin, str]
Settle = Callable[[Card, Outcome], Awaitable[None]]
Edit = Callable[[int, int, Screen], Awaitable[int | None]]


class Folds:
    """The answered cards waiting for their call's result, by person and server. `settle` settles a card (the
    surface's), `edit` edits a message."""

    def __init__(self, settle: Settle, edit: Edit) -> None:
        self._settle = settle
        self._edit = edit
        self._parked: dict[Key, Parked] = {}
        self._settling: set[asyncio.Task[None]] = set()

    async def fold_result(self, origin: Origin, server: str, result: str | None) -> bool:
        """Settle the card `origin` answered for `server` last, if it still waits (`FOLD_GRACE_S`): with
        `result` (one result message's HTML) folded in when given and it fits, else alone. True when the result
        was folded in (the caller shows it no more); False when there was no such card, or it is settled apart
        (then once that edit is done, so the result comes after it)."""
        key = (origin, server)
        parked = self._parked.get(key)
        if parked is None:
            return False
        if parked.state is Fold.QUEUED and result is not None:
            return await self._fold_queued(key, parked, result)
        if parked.state is not Fold.WAITING:
            await parked.done.wait()
            return False
        if parked.timer is not None:
            parked.timer.cancel()
        screen = folded_screen(parked.card, result) if result is not None else None
        if screen is None:
            parked.move(Event.SETTLE_NOW)
            await self._settle_parked(key, parked)
            return False
        parked.move(Event.RESULT)
        return await self._edit_folded(key, parked, screen)

    async def _fold_queued(self, key: Key, parked: Parked, result: str) -> bool:
        """The result came after the grace, while the card's settling edit waits for its turn: send the answer
        and the result in one edit, and let the settling edit give way to it (or, when it already went, come
        after it). False when the result does not fit on the card (it is settled alone, then)."""
        screen = folded_screen(parked.card, result)
        if screen is None:
            await parked.done.wait()
            return False
        parked.move(Event.RESULT)
        return await self._edit_folded(key, parked, screen)

    async def _edit_folded(self, key: Key, parked: Parked, screen: Screen) -> bool:
        """Edit a parked card to its answer and result (shielded: it must land) and unpark it; False if the edit
        failed."""
        card = parked.card
        try:
            assert card.message_id is not None
            with anyio.CancelScope(shield=True):
                await self._edit(card.chat_id, card.message_id, screen)
        except TelegramError:
            logger.exception("could not show a result on its card %s", card.prompt.request.id)
            return False
        finally:
            self._unpark(key, parked)
        return True

    def awaits_result(self, origin: Origin, server: str) -> bool:
        """Whether a card `origin` answered for `server` waits for its call's result (it still stands for the
        call: no status message is due meanwhile)."""
        parked = self._parked.get((origin, server))
        return parked is not None and not parked.taken

    def park(self, card: Card, grace: float) -> None:
        """Settle an answered card after `grace` seconds, unless its call's result comes first."""
        key = (card.prompt.origin, card.prompt.server)
        earlier = self._parked.get(key)
        if earlier is not None and not earlier.taken:  # two cards answered at once: the older one goes now
            self._grace_over(key, earlier, queue=False)
        self._parked[key] = parked = Parked(card)
        parked.timer = asyncio.get_running_loop().call_later(grace, self._grace_over, key, parked)

    def _grace_over(self, key: Key, parked: Parked, *, queue: bool = True) -> None:
        """Settle the card alone; with `queue`, its result may still take the edit's place until its turn."""
        if parked.state is not Fold.WAITING:
            return
        parked.move(Event.GRACE_OVER if queue else Event.SETTLE_NOW)
        if parked.timer is not None:
            parked.timer.cancel()
        task = asyncio.get_running_loop().create_task(self._settle_parked(key, parked))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    async def _settle_parked(self, key: Key, parked: Parked) -> None:
        try:
            with anyio.CancelScope(shield=True), unless(lambda: parked.state is Fold.FOLDED):
                await self._settle(parked.card, Outcome.ANSWERED)
        except Withdrawn:
            pass  # the result's edit took its place
        except TelegramError:
            logger.exception("could not settle card %s", parked.card.prompt.request.id)
        finally:
            parked.move(Event.SETTLED)
            if parked.state is not Fold.FOLDED:  # else the folding edit ends it, once it is done
                self._unpark(key, parked)

    def _unpark(self, key: Key, parked: Parked) -> None:
        if self._parked.get(key) is parked:
            del self._parked[key]
        parked.done.set()

    def drop(self, lost: Callable[[int], bool]) -> None:
        """Forget the answered cards of the people `lost` says are another instance's now, unsettled: this
        process edits nothing more for them."""
        for key, parked in list(self._parked.items()):
            if lost(key[0].user_id) and parked.state is Fold.WAITING:
                if parked.timer is not None:
                    parked.timer.cancel()
                parked.move(Event.SETTLE_NOW)
                parked.move(Event.SETTLED)
                self._unpark(key, parked)

    async def settle_all(self) -> None:
        """Settle every answered card still waiting for a result, now (the bot is stopping)."""
        for key, parked in list(self._parked.items()):
            if not parked.taken:
                self._grace_over(key, parked, queue=False)
        for parked in list(self._parked.values()):
            await parked.done.wait()

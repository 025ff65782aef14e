"""The park-and-fold state machine (`bot.telegram.fold.step`): every move, the legal ones and the illegal ones."""

from __future__ import annotations

import itertools

import pytest

from bot.telegram.fold import Event, Fold, IllegalFold, step

LEGAL = [
    (Fold.WAITING, Event.GRACE_OVER, Fold.QUEUED),
    (Fold.WAITING, Event.SETTLE_NOW, Fold.TAKEN),
    (Fold.WAITING, Event.RESULT, Fold.FOLDED),
    (Fold.QUEUED, Event.RESULT, Fold.FOLDED),
    (Fold.QUEUED, Event.SETTLED, Fold.TAKEN),
    (Fold.TAKEN, Event.SETTLED, Fold.TAKEN),
    (Fold.FOLDED, Event.SETTLED, Fold.FOLDED),
]
ILLEGAL = sorted(
    set(itertools.product(Fold, Event)) - {(state, event) for state, event, _ in LEGAL},
)


@pytest.mark.parametrize(("state", "event", "after"), LEGAL)
def test_a_legal_event_moves_a_parked_card_to_its_next_state(state: Fold, event: Event, after: Fold) -> None:
    """Each legal move lands where the table in the module docstring says."""
    assert step(state, event) is after


@pytest.mark.parametrize(("state", "event"), ILLEGAL)
def test_an_illegal_event_raises_and_names_the_state_and_the_event(state: Fold, event: Event) -> None:
    """A move that cannot happen (a result after the card was settled, a second grace ...) is a bug: it raises."""
    with pytest.raises(IllegalFold) as raised:
        step(state, event)
    assert raised.value.state is state and raised.value.event is event
    assert state.value in str(raised.value) and event.value in str(raised.value)


def test_the_illegal_moves_are_the_ones_this_test_expects() -> None:
    """Nine of the sixteen moves are illegal: no event reopens a decided card or re-runs the grace."""
    assert len(ILLEGAL) == 9
    assert (Fold.TAKEN, Event.RESULT) in ILLEGAL and (Fold.QUEUED, Event.GRACE_OVER) in ILLEGAL
    assert (Fold.WAITING, Event.SETTLED) in ILLEGAL and (Fold.FOLDED, Event.RESULT) in ILLEGAL

"""The `rounds` table as the store's `RoundBook`: a kept question reads back as saved, with its card, progress
and answer; closing forgets it. On SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bot.core import Era, KeptQuestion, Origin
from bot.store import Store

PARAMS = {"mode": "form", "message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}}


def question(n: int, *, era: Era = Era.MODERN, round_id: str = "r-1") -> KeptQuestion:
    return KeptQuestion(
        id=f"elc-test-{n}",
        round_id=round_id,
        input_key=f"q{n}",
        era=era,
        server="s",
        tool="t",
        arguments={"a": [1, "ü"]},
        origin=Origin(chat_id=-5001, user_id=1001),
        token=f"tok{n}",
        deadline=1_900_000_000.5,
        input_requests={f"q{n}": {"method": "elicitation/create", "params": PARAMS}},
        request_state="v1.opaque",
    )


@pytest.mark.anyio
async def test_a_kept_question_reads_back_as_it_was_saved_and_as_it_went_on(store: Store) -> None:
    """Saved, its card placed, its progress and its answer recorded: all of it comes back from the table."""
    book = store.rounds
    await book.keep(question(1))
    await book.keep(question(2))
    await book.placed("elc-test-1", -5001, 42)
    await book.progress("elc-test-1", {"version": 3, "form": {"values": {"x": 1}}})
    await book.answered("elc-test-2", {"action": "decline"})
    found = {q.id: q for q in await book.open_questions()}
    first, second = found["elc-test-1"], found["elc-test-2"]
    progress = {"version": 3, "form": {"values": {"x": 1}}}
    assert first == replace(question(1), card_chat_id=-5001, card_message_id=42, progress=progress)
    assert second.answer == {"action": "decline"} and second.card_message_id is None


@pytest.mark.anyio
async def test_closed_questions_are_forgotten_and_others_stay(store: Store) -> None:
    """`close` deletes exactly the questions named (a legacy one too)."""
    book = store.rounds
    await book.keep(question(1))
    await book.keep(question(2, era=Era.LEGACY, round_id="r-2"))
    await book.close("elc-test-1")
    left = await book.open_questions()
    assert [(q.id, q.era) for q in left] == [("elc-test-2", Era.LEGACY)]
    await book.close("elc-test-2")
    assert await book.open_questions() == []

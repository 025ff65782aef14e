"""An answered card and its call's result: one edit when the call ends at once, today's two messages when not.

End to end: real PTB against the fake Bot API, the elicit test server in-process.
"""

from __future__ import annotations

import json

import pytest

from bot.telegram import surface as surface_module
from bot.telegram import tool_runs
from tests.telegram.harness import bot_scene, is_result

pytestmark = pytest.mark.anyio

COLOUR = json.dumps(
    {"type": "object", "properties": {"colour": {"enum": ["red", "blue"]}}, "required": ["colour"]}
)
NOTE = json.dumps({"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]})


def ask_form(schema: str, message: str = "Please fill in the form") -> str:
    return f"/call t ask_form {json.dumps({'schema_json': schema, 'message': message})}"


async def test_a_call_that_ends_at_once_puts_its_result_on_the_card_just_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The card's one edit after Submit holds the answer and the result; no message follows the card."""
    # "At once" must not depend on this machine's speed: here the card waits an hour for its result.
    monkeypatch.setattr(surface_module, "FOLD_GRACE_S", 3600.0)
    async with bot_scene() as s:
        call = await s.alice.send(ask_form(COLOUR))
        card = await s.fake.next_message(s.alice, containing="asks")
        await s.alice.press(card, "blue")
        submitted = await s.alice.press(card, "✅ Submit")
        assert submitted.text == "✅ Answer sent." and not submitted.show_alert
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result is card and not card.buttons
        assert len(card.history) == 3  # the question, the review, then the answer with the result
        assert "Answer sent" in card.text and "colour: blue" in card.text
        assert "t · ask_form" in card.text and '"colour": "blue"' in card.text
        assert card.text.index("Answer sent") < card.text.index("t · ask_form")
        assert [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > card.message_id] == []


async def test_a_call_still_running_after_the_grace_keeps_the_card_and_the_result_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A slow call's card settles on its own ("Answer sent"), and the result comes later as its own message."""
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 3600.0)  # no status message settles the card first
    async with bot_scene() as s:
        call = await s.alice.send("/call t ask_then_block")
        card = await s.fake.next_message(s.alice, containing="Go on?")
        await s.alice.press(card, "Yes")
        submitted = await s.alice.press(card, "✅ Submit")
        assert submitted.text == "✅ Answer sent."
        await s.fake.wait_for(lambda m: m is card and "Answer sent" in m.text)
        assert not card.buttons
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result is not card and "cancelled" in result.text
        assert not is_result(card, call) and "Answer sent" in card.text


async def test_in_a_group_the_card_with_its_result_names_the_person_and_the_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a busy group the folded card says whose answer it was and which tool the result is from."""
    monkeypatch.setattr(surface_module, "FOLD_GRACE_S", 3600.0)
    async with bot_scene() as s:
        call = await s.alice.send(ask_form(COLOUR), chat=s.group)
        card = await s.fake.wait_for(lambda m: m.chat_id == s.group and "asks" in m.text and bool(m.buttons))
        await s.alice.press(card, "red")
        await s.alice.press(card, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result is card
        assert "Answer sent by Alice" in card.text and "t · ask_form" in card.text


async def test_a_result_too_long_for_the_card_is_sent_below_it_split_within_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the card and the result's first part do not fit in one message, the card settles alone and the
    whole result follows in messages of at most 4096 characters."""
    monkeypatch.setattr(surface_module, "FOLD_GRACE_S", 3600.0)
    note = "n" * 3800
    async with bot_scene() as s:
        call = await s.alice.send(ask_form(NOTE, message="m" * 1400))
        await s.fake.next_message(s.alice, containing="asks")
        await s.alice.send(note)
        review = await s.fake.wait_for(lambda m: "Please review" in m.text and bool(m.buttons))
        await s.alice.press(review, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result is not review and "Answer sent" in review.text and not review.buttons

        def shown() -> int:
            below = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id >= result.message_id]
            return "".join(m.text for m in below).count("n")

        await s.fake.wait_for(lambda _m: shown() >= len(note))  # the whole answer came back
        assert all(len(m.text) <= 4096 for m in s.fake.messages(s.alice, from_bot=True))


async def test_a_result_that_comes_while_the_settling_edit_waits_its_turn_takes_that_edits_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past the grace, a card whose settling edit is held up under the flood limiter (here a 429 pauses every
    request) still gets its call's result folded in: one edit, no "Answer sent" edit, no message for the result."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    monkeypatch.setattr(surface_module, "FOLD_GRACE_S", 0.0)  # the grace is over before the call can end
    async with bot_scene() as s:
        call = await s.alice.send("/call t ask_then_block")
        card = await s.fake.next_message(s.alice, containing="Go on?")
        await s.alice.press(card, "Yes")
        s.fake.fail_next("editMessageText", status=429, retry_after=5)  # the settling edit waits 5 s
        await s.alice.press(card, "✅ Submit")
        await s.alice.send("/cancel")  # the call ends well within those 5 s
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=20)
        assert result is card and "cancelled" in card.text and "Answer sent" in card.text
        assert len(card.history) == 3  # the question, the review, then the answer with the result
        assert [e.method for e in s.fake.errors if e.injected] == ["editMessageText"]  # it did wait its turn
        later = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > card.message_id]
        assert [m.text for m in later if not m.text.startswith("Cancelled")] == []

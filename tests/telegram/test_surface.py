"""`bot.telegram.surface`'s own bookkeeping: what it holds for a card is let go when the card is settled. The
real surface against the fake Bot API."""

from __future__ import annotations

import pytest

from bot.core import Origin, Outcome, Prompt
from bot.telegram import callback_data
from bot.telegram.access import Access
from bot.telegram.surface import TelegramSurface
from mapping import Request, RequestKind, new_request_id, parse_schema
from tests.telegram.test_access import ALICE, NAME_SCHEMA, card_bot, person


@pytest.mark.anyio
async def test_a_settled_card_leaves_nothing_behind_at_any_message_it_stood_at() -> None:
    """A typed answer moves the card below the reply, so the card has stood at two messages; once it is
    declined the surface holds nothing for it, neither the card nor either message. (Looked up by message, a
    forgotten card was already not found; what this guards is the memory of a bot with many prompts.)"""
    async with card_bot() as (fake, bot):
        surface = TelegramSurface(bot, Access(frozenset({ALICE})))
        request = Request(
            id=new_request_id(), kind=RequestKind.INPUT, prompt="Who?", data={"schema": NAME_SCHEMA}
        )
        prompt = Prompt(request, Origin(chat_id=ALICE, user_id=ALICE), "t", form=parse_schema(NAME_SCHEMA))
        await surface.show_prompt(prompt)
        first = await fake.next_message(ALICE, containing="Who?")
        [card] = surface.text_cards(ALICE, ALICE)
        await surface.on_text(card, person(ALICE), "Alice", first.message_id)
        moved = await fake.next_message(ALICE, containing="Please review")
        assert moved.message_id != first.message_id
        assert surface.card_for_reply(ALICE, moved.message_id) is card

        decline = callback_data.unpack(moved.button("Decline").callback_data)
        assert decline is not None
        await surface.on_button(person(ALICE), decline)
        assert not prompt.pending
        await surface.settle_prompt(prompt, Outcome.DECLINED)  # as the prompt's owner does once answered

        await fake.wait_for(lambda m: m.message_id == moved.message_id and "Declined" in m.text)
        assert surface.cards == {}
        assert surface._by_message == {} and surface._messages == {}

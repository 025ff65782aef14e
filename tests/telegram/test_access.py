"""`bot.telegram.access` (the allow-list decision and the refusal ration, on a virtual clock), and the checks
behind the gate: a tool run and a card's taps and replies ask `Access` again. Those use the real surface and
runner against the fake Bot API and a recording MCP server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from telegram import User

from bot.core import Origin, Prompt
from bot.telegram import callback_data
from bot.telegram.access import Access, Refusals
from bot.telegram.bot import CardBot, build_bot
from bot.telegram.flood import FloodLimiter
from bot.telegram.surface import NOT_ALLOWED, TelegramSurface
from bot.telegram.tool_runs import ToolRunner
from mapping import Request, RequestKind, new_request_id, parse_schema
from tests.fakes.servers.recorder import Recorder
from tests.fakes.surface import make_config, placeholder, running_hub
from tests.fakes.telegram import FakeTelegram

ALICE, MALLORY = 1001, 6666
NAME_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "title": "Name"}},
    "required": ["name"],
}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_access_denies_by_default_and_never_admits_an_update_without_a_person() -> None:
    """Only listed ids pass; `everyone` lets anyone pass, but never an update that has no person."""
    assert not Access().allows(ALICE)
    listed = Access(frozenset({ALICE}))
    assert listed.allows(ALICE) and not listed.allows(MALLORY) and not listed.allows(None)
    anyone = Access(everyone=True)
    assert anyone.allows(MALLORY) and not anyone.allows(None)


def test_a_stranger_is_refused_once_per_period_in_each_chat() -> None:
    """One refusal per stranger per chat per period; another chat is counted apart; after the period, again."""
    clock = Clock()
    refusals = Refusals(clock=clock)
    assert refusals.take(-1, MALLORY)
    assert not refusals.take(-1, MALLORY)
    assert refusals.take(MALLORY, MALLORY)
    clock.now += refusals.period_s - 0.5
    assert not refusals.take(-1, MALLORY)
    clock.now += 1
    assert refusals.take(-1, MALLORY)


def test_a_chat_gets_only_its_share_of_refusals_whoever_they_are_for() -> None:
    """A crowd of strangers in one group: `per_chat` refusals per period there, while other chats get theirs."""
    clock = Clock()
    refusals = Refusals(per_chat=3, clock=clock)
    granted = [refusals.take(-1, 7000 + n) for n in range(40)]
    assert granted == [True] * 3 + [False] * 37
    assert refusals.take(-2, 7000)
    clock.now += refusals.period_s + 1
    assert refusals.take(-1, 7039)


def test_strangers_long_gone_are_forgotten() -> None:
    """Memory does not grow with every stranger ever refused: a period later, earlier entries are gone."""
    clock = Clock()
    refusals = Refusals(clock=clock)
    for n in range(1000):
        refusals.take(n + 1, n + 1)
    clock.now += refusals.period_s + 1
    refusals.take(-1, MALLORY)
    assert len(refusals._last) == 1 and len(refusals._chats) == 1


@asynccontextmanager
async def card_bot() -> AsyncIterator[tuple[FakeTelegram, CardBot]]:
    async with FakeTelegram() as fake:
        fake.user(id=ALICE, first_name="Alice")
        fake.user(id=MALLORY, first_name="Mallory")
        bot = build_bot(fake.token, fake.base_url, FloodLimiter())
        async with bot:
            yield fake, bot


def person(user_id: int) -> User:
    return User(id=user_id, first_name="Someone", is_bot=False)


@pytest.mark.anyio
@pytest.mark.parametrize("allowed", [True, False])
async def test_a_card_whose_person_is_not_allowed_cannot_be_answered(allowed: bool) -> None:
    """A card shown to someone not (or no longer) allowed, say restored after a restart with a new allow-list:
    their taps get an alert and their typed answers are dropped; the prompt stays pending (allowed: a typed
    answer moves the form on)."""
    async with card_bot() as (fake, bot):
        surface = TelegramSurface(bot, Access(frozenset({ALICE, MALLORY} if allowed else {ALICE})))
        request = Request(
            id=new_request_id(), kind=RequestKind.INPUT, prompt="Who?", data={"schema": NAME_SCHEMA}
        )
        prompt = Prompt(
            request, Origin(chat_id=MALLORY, user_id=MALLORY), "t", form=parse_schema(NAME_SCHEMA)
        )
        await surface.show_prompt(prompt)
        card = await fake.next_message(MALLORY, containing="Who?")
        [card_state] = surface.text_cards(MALLORY, MALLORY)
        if allowed:
            await surface.on_text(card_state, person(MALLORY), "Mallory", card.message_id)
            assert "Please review" in (await fake.next_message(MALLORY)).text
            return
        await surface.on_text(card_state, person(MALLORY), "Mallory", card.message_id)
        decline = callback_data.unpack(card.button("Decline").callback_data)
        assert decline is not None
        reply = await surface.on_button(person(MALLORY), decline)
        assert reply.text == NOT_ALLOWED and reply.alert
        assert prompt.pending and card.edit_count == 0
        assert [m.text for m in fake.messages(MALLORY, from_bot=True)] == [card.text]


@pytest.mark.anyio
async def test_a_tool_run_for_someone_not_allowed_never_reaches_the_server() -> None:
    """`ToolRunner.run` for a person not allowed: no connection, no call, nothing sent; Alice's run works."""
    recorder = Recorder()
    config = make_config(placeholder(["rec"]))
    async with card_bot() as (fake, bot), running_hub(config, in_process={"rec": recorder.build}) as hub_etc:
        hub, prompts, _ = hub_etc
        access = Access(frozenset({ALICE}))
        runner = ToolRunner(hub, prompts, TelegramSurface(bot, access), access)
        alice = Origin(chat_id=ALICE, user_id=ALICE)
        [ping] = await hub.list_tools("rec", alice)
        await runner.run(ping, {"text": "pwned"}, Origin(chat_id=MALLORY, user_id=MALLORY))
        assert recorder.connections == 1 and recorder.calls == []
        assert fake.messages(MALLORY, from_bot=True) == []
        args: dict[str, Any] = {"text": "hi"}
        await runner.run(ping, args, alice)
        assert recorder.calls == [("ping", args)]

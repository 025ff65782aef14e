"""`bot.telegram.updates`: what of a tap's update reaches PTB, through the bot's own getUpdates client against
the fake Bot API (the echo Telegram sends, cut before PTB builds it) and through the webhook endpoint."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from telegram import Bot, MaybeInaccessibleMessage, Message, Update

from bot.telegram.access import Access
from bot.telegram.bot import build_bot
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.flood import FloodLimiter
from bot.telegram.render import Keyboard
from bot.telegram.updates import Lean, lean
from bot.web.webhook import SECRET_HEADER, Webhook
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.anyio

ALICE, MALLORY = 1001, 6666
ALLOWED = Access(frozenset({ALICE}))
CARD_TAP = Button(Kind.PROMPT, "tok", 1, Action.CHOOSE, 0).pack()
AGENTS_TAP = Button(Kind.AGENT, "7", 0, Action.REVOKE, ALICE).pack()
APPROVAL_TAP = Button(Kind.APPROVAL, "req", 0, Action.YES).pack()
KEYBOARD: Keyboard = [[{"text": f"Option {n}", "callback_data": CARD_TAP} for n in range(4)]]


async def test_a_card_tap_reaches_ptb_without_its_echoed_message_a_list_tap_with_its_identity() -> None:
    """A card's tap keeps its data and its person and loses the message it echoes (the token finds the card); a
    tap on the /agents list keeps where its message is (id, chat: it is edited in place), not what it says;
    a person's message is untouched."""
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE, first_name="Alice")
        bot = build_bot(fake.token, fake.base_url, FloodLimiter(), ALLOWED)
        async with bot:
            sent = await bot.send_html(ALICE, "<b>Pick one</b>", KEYBOARD)
            card = fake.messages(ALICE, from_bot=True)[-1]
            assert card.message_id == sent
            updates: list[Update] = []

            async def next_update() -> Update:
                offset = updates[-1].update_id + 1 if updates else None
                (update,) = await bot.get_updates(offset=offset, timeout=5)
                updates.append(update)
                return update

            for data in (CARD_TAP, AGENTS_TAP):
                press = asyncio.create_task(alice.press_data(card, data))
                query = (await next_update()).callback_query
                assert query is not None
                await query.answer()
                await press
            await alice.send("hello there")
            await next_update()
    card_tap, agents_tap, message = updates
    assert card_tap.callback_query is not None and agents_tap.callback_query is not None
    assert card_tap.callback_query.data == CARD_TAP and card_tap.callback_query.from_user.id == ALICE
    assert card_tap.callback_query.message is None
    kept = agents_tap.callback_query.message
    assert agents_tap.callback_query.data == AGENTS_TAP
    assert kept is not None and kept.message_id == sent and kept.chat.id == ALICE
    assert kept.is_accessible  # a message with its date, not an inaccessible one
    assert says(kept) == (None, (), None, None)
    assert message.message is not None and message.message.text == "hello there"


def says(message: MaybeInaccessibleMessage) -> tuple[object, ...]:
    """What a message says and who sent it: its text, entities, sender and buttons."""
    assert isinstance(message, Message)
    return (message.text, message.entities, message.from_user, message.reply_markup)


def tap_update(data: str, person: int = ALICE) -> dict[str, Any]:
    return {
        "update_id": 77,
        "callback_query": {
            "id": "4000000000000001",
            "from": {"id": person, "is_bot": False, "first_name": "Someone"},
            "chat_instance": "-1",
            "data": data,
            "message": {
                "message_id": 9,
                "date": 1_700_000_000,
                "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
                "from": {"id": 123, "is_bot": True, "first_name": "Bot"},
                "text": "Pick one",
                "reply_markup": {"inline_keyboard": KEYBOARD},
            },
        },
    }


@pytest.mark.parametrize(("data", "kept"), [(CARD_TAP, False), (AGENTS_TAP, True), (APPROVAL_TAP, True)])
async def test_the_webhook_cuts_a_tap_as_polling_does(data: str, kept: bool) -> None:
    """The webhook hands PTB's queue the same cut update (what `bot.compose` wires in)."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    webhook = Webhook("secret", Bot("123:SECRET"), queue, lean=Lean(ALLOWED))
    app = Starlette(routes=[Route("/telegram", webhook.handle, methods=["POST"])])
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://bot") as client:
        answer = await client.post(
            "/telegram", content=json.dumps(tap_update(data)), headers={SECRET_HEADER: "secret"}
        )
    assert answer.status_code == 200
    update = queue.get_nowait()
    assert isinstance(update, Update) and update.callback_query is not None
    assert update.callback_query.data == data
    message = update.callback_query.message
    if kept:
        assert isinstance(message, Message) and (message.message_id, message.chat.id) == (9, ALICE)
        assert says(message) == (None, (), None, None)
    else:
        assert message is None


@pytest.mark.parametrize(
    ("data", "person"),
    [("not ours", ALICE), ("zz:tok:1:c", ALICE), ("", ALICE), (CARD_TAP, MALLORY), (CARD_TAP, None)],
)
def test_a_tap_not_ours_or_not_an_allowed_persons_keeps_its_message_identity(
    data: str, person: int | None
) -> None:
    """Forged or foreign data is not a card's; a stranger's tap on a card is refused, and refusals are rationed
    per chat: both keep where their message is, not what it says."""
    update = tap_update(data, MALLORY if person is None else person)
    if person is None:
        del update["callback_query"]["from"]
    lean(update, ALLOWED)
    assert update["callback_query"]["message"].keys() == {"message_id", "chat", "date"}


def test_without_an_allow_list_no_tap_loses_its_message() -> None:
    """`UpdatesRequest` without `access` (and `Access()`) allows nobody: a card's tap keeps its identity."""
    update = tap_update(CARD_TAP)
    lean(update, Access())
    assert update["callback_query"]["message"].keys() == {"message_id", "chat", "date"}

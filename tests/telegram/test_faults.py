"""Faults end to end: MCP servers that die, withdraw or hang; a Bot API that fails, floods and loses messages;
shutdown with prompts pending, and a restart. Real PTB against the fake Bot API, real MCP servers."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import anyio
import httpx
import pytest

from bot.telegram import surface
from tests.fakes.servers.elicit import DYING_MESSAGE, SERVER_GAVE_UP
from tests.fakes.surface import stdio_server
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat, bot_scene

pytestmark = pytest.mark.anyio

STOPPING = "Cancelled: the bot is stopping"


def deploy_card_in(chat: int) -> Callable[[Msg], bool]:
    """The deploy question's card in `chat`."""
    return lambda m: m.chat_id == chat and "Where should" in m.text and has_buttons(m)


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


def injected(s: Chat, method: str) -> list[int]:
    """Statuses of the faults this test injected into `method`, as the bot received them."""
    return [e.status for e in s.fake.errors if e.injected and e.method.lower() == method.lower()]


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_a_server_killed_mid_question_settles_the_card_and_the_next_call_reconnects(
    protocol: str,
) -> None:
    """The stdio server exits once its question is sent: the card says it went away, the call is reported
    unavailable, and the next /call starts a fresh server process."""
    stdio = {"t": stdio_server("tests.fakes.servers.elicit", protocol=protocol)}
    async with bot_scene(servers=stdio, in_process={}) as s:
        await s.alice.send("/call t whoami")
        first = await s.fake.wait_for(lambda m: '"pid"' in m.text, timeout=10)
        await s.alice.send("/call t die_during_elicitation")
        card = await s.fake.wait_for(lambda m: DYING_MESSAGE in m.text, timeout=10)
        await s.fake.wait_for(lambda m: m is card and "The server went away" in m.text)
        assert not card.buttons
        result = await s.fake.wait_for(
            lambda m: "die_during_elicitation" in m.text and "unavailable" in m.text
        )
        assert "server unavailable" in result.text and "went away" in result.text
        await s.alice.send("/call t whoami")
        again = await s.fake.wait_for(lambda m: '"pid"' in m.text and m is not first, timeout=10)
        pid = json.loads(first.text.split("\n", 1)[1])["pid"]
        assert json.loads(again.text.split("\n", 1)[1])["pid"] != pid


async def test_a_question_the_server_withdraws_is_settled_as_cancelled_by_the_server() -> None:
    """server_cancels (2025-11-25) gives up on its own question: the card says so and loses its buttons."""
    async with bot_scene(protocol="legacy") as s:
        await s.alice.send("/call t server_cancels")
        card = await s.fake.wait_for(lambda m: "Still there?" in m.text and has_buttons(m))
        await s.fake.wait_for(lambda m: m is card and "Cancelled by the server" in m.text)
        assert not card.buttons
        await s.fake.wait_for(lambda m: SERVER_GAVE_UP in m.text and "✅" in m.text)
        answer = await s.alice.press_data(card, card.history[0].reply_markup[0][0].callback_data)
        assert answer.show_alert and "expired" in answer.text


async def test_a_server_that_never_answers_times_out() -> None:
    """call_timeout_s ends a call that never returns; the status message says it timed out."""
    servers = {"t": {"command": "in-process", "call_timeout_s": 0.3}}
    async with bot_scene(servers=servers) as s:
        await s.alice.send("/call t never_answers")
        result = await s.fake.wait_for(lambda m: "never_answers" in m.text and "timed out" in m.text)
        assert "⌛" in result.text
        await s.alice.send("/call t whoami")
        await s.fake.wait_for(lambda m: '"pid"' in m.text)


def polls(s: Chat) -> int:
    """How many getUpdates calls the fake has received so far."""
    return sum(1 for method, _ in s.fake.calls if method.lower() == "getupdates")


async def _release_hung_poll(s: Chat) -> None:
    """Telegram comes back: a newer getUpdates ends a held one (the fake's long-poll rule)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.post(f"{s.fake.base_url}{s.fake.token}/getUpdates", json={"timeout": 0})
    assert response.status_code == 200


async def test_the_bot_recovers_by_itself_from_5xx_and_a_hung_get_updates() -> None:
    """getUpdates failing with 502 three times, then hanging for a while: the next commands are still answered."""
    async with bot_scene() as s:
        s.fake.fail_next("getUpdates", status=502, times=3)
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools", timeout=10)
        await s.fake.wait_for_call("getUpdates", lambda _p: len(injected(s, "getUpdates")) == 3, timeout=10)
        await s.alice.send("/servers")
        await s.fake.next_message(s.alice, containing="Servers", timeout=10)
        assert injected(s, "getUpdates") == [502, 502, 502]

        before = polls(s)  # the poll in flight (if any) is not faulted; the next one hangs
        s.fake.fail_next("getUpdates", status=502, hang=True)
        await s.alice.send("/help")
        await s.fake.wait_for_call("getUpdates", lambda _p: polls(s) > before)
        await s.alice.send("/servers")
        await _release_hung_poll(s)
        await s.fake.next_message(s.alice, containing="/tools", timeout=10)
        await s.fake.next_message(s.alice, containing="Servers", timeout=10)
        assert injected(s, "getUpdates") == [502] * 4


async def test_429s_during_a_card_flow_are_waited_out_and_nothing_is_dropped() -> None:
    """sendMessage and editMessageText answer 429 with retry_after mid-flow: every card and the result arrive."""
    async with bot_scene() as s:
        s.fake.fail_next("sendMessage", status=429, retry_after=1)
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        s.fake.fail_next("editMessageText", status=429, retry_after=1)
        await s.alice.press(card, "Staging (safe to try)")
        card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        confirm = await s.fake.wait_for(lambda m: "Deploy web to staging?" in m.text and has_buttons(m))
        await s.alice.press(confirm, "Yes")
        confirm = await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
        await s.alice.press(confirm, "✅ Submit")
        result = await s.fake.wait_for(lambda m: "Deployed web to staging" in m.text)
        assert "✅" in result.text
        assert "Answer sent" in card.text and not card.buttons
        assert "Answer sent" in confirm.text and not confirm.buttons
        assert injected(s, "sendMessage") == [429] and injected(s, "editMessageText") == [429]
        cards = [m for m in s.fake.messages(s.alice, from_bot=True) if "asks:" in m.text]
        assert cards == [card, confirm]  # each card once: nothing dropped, nothing sent twice


async def test_a_lost_card_is_sent_again_and_not_modified_is_ignored(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ "message to edit not found" re-sends the card, which then lives on as the card; "message is not
    modified" is taken as done. The flow completes, and a tap on the stale copy gets an alert."""
    # Cards settle at once, apart from the result: the "not modified" below hits the settling edit.
    monkeypatch.setattr(surface, "FOLD_GRACE_S", 0.0)
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        lost = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        s.fake.fail_next("editMessageText", status=400, description="Bad Request: message to edit not found")
        await s.alice.press(lost, "Staging (safe to try)")
        card = await s.fake.wait_for(lambda m: m is not lost and "Please review" in m.text and has_buttons(m))
        await s.alice.press(card, "✅ Submit")
        await s.fake.wait_for(lambda m: m is card and "Answer sent" in m.text)
        assert not card.buttons
        confirm = await s.fake.wait_for(lambda m: "Deploy web to staging?" in m.text and has_buttons(m))
        await s.alice.press(confirm, "Yes")
        confirm = await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
        s.fake.fail_next(
            "editMessageText",
            status=400,
            description="Bad Request: message is not modified: specified new message content and reply markup are exactly the same",
        )
        sent_before = len(s.fake.messages(s.alice, from_bot=True))
        submit = confirm.button("✅ Submit").callback_data
        assert submit is not None
        await s.alice.press(confirm, "✅ Submit")
        # The edit settling the card ("Answer sent", alone or with the result folded in, whichever the flood
        # limiter's turn allows) is the one refused as "not modified".
        await s.fake.wait_for_call(
            "editMessageText",
            lambda p: p.get("message_id") == confirm.message_id and "Answer sent" in str(p.get("text")),
        )
        answer = await s.alice.press(lost, "Production (live)")
        assert answer.show_alert
        # Its settling edit was "not modified": done. The tap is the same Submit again (by its data: when the
        # refused edit was "Answer sent" alone, the result has since been folded into the card by another edit).
        answer = await s.alice.press_data(confirm, submit)
        assert answer.show_alert and "expired" in answer.text
        assert injected(s, "editMessageText") == [400, 400]
        assert (
            len(s.fake.messages(s.alice, from_bot=True)) == sent_before
        )  # taken as done: nothing sent again
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


async def test_stopping_cancels_every_pending_prompt_then_a_restart_expires_old_taps() -> None:
    """SIGTERM with prompts pending for Alice, Bob and the group: every server hears cancel, every card is
    settled without buttons, serve() returns; a new bot on the same Bot API answers old taps with an alert."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        await s.bob.send("/call demo deploy")
        await s.alice.send("/call demo deploy", chat=s.group)
        await s.alice.send("/tools demo")
        listing = await s.fake.next_message(s.alice, containing="tap a tool")
        pending = [(s.alice, ALICE_ID), (s.bob, BOB_ID), (s.alice, s.group)]
        cards = [await s.fake.wait_for(deploy_card_in(chat)) for _, chat in pending]
        taps = [(who, card) for (who, _), card in zip(pending, cards, strict=True)] + [(s.alice, listing)]
        old_taps = [(who, msg, msg.reply_markup[0][0].callback_data) for who, msg in taps]

        s.stop.set()
        with anyio.fail_after(5):
            await s.stopped.wait()
        for card in cards:
            assert STOPPING in card.text and not card.buttons
        for _, chat in pending:  # the demo server's own words for a cancelled elicitation
            assert any("Deployment cancelled" in m.text for m in s.fake.messages(chat, from_bot=True))

        async with bot_scene(world=s) as again:
            for who, msg, data in old_taps:
                answer = await who.press_data(msg, data)
                assert answer.show_alert and "expired" in answer.text
            await again.alice.send("/help")
            await again.fake.next_message(again.alice, containing="/tools")
        assert not [e for e in s.fake.errors if e.status == 400]


async def test_a_lost_status_message_is_sent_again_and_ends_as_the_result() -> None:
    """Editing the status hits "message to edit not found": it is sent again, and that copy becomes the result."""
    async with bot_scene() as s:
        s.fake.fail_next("editMessageText", status=400, description="Bad Request: message to edit not found")
        await s.alice.send("/call t slow_progress n=2 delay_s=0.3")
        status = await s.fake.next_message(s.alice, containing="step 1/2")  # sent at the first progress
        await s.fake.wait_for(lambda m: m is not status and "done 2" in m.text)
        assert injected(s, "editMessageText") == [400]
        assert "Running" in status.text  # the lost one (the fake still shows it) was never edited

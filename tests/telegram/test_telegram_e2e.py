"""The Telegram host end to end: real PTB over HTTP to the fake Bot API, real MCP servers, scripted people."""

from __future__ import annotations

import json

import pytest

from bot.telegram import tool_runs
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, MALLORY_ID, Chat, bot_scene, is_result

pytestmark = pytest.mark.anyio


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


async def test_start_explains_the_bot_and_commands_are_registered() -> None:
    """/start answers with the help text; the command menu is set with setMyCommands."""
    async with bot_scene() as s:
        await s.alice.send("/start")
        reply = await s.fake.next_message(s.alice, containing="/tools")
        assert "/call" in reply.text and "/cancel" in reply.text
        assert {c for c, _ in s.fake.commands} >= {"tools", "call", "servers", "cancel", "help"}


async def test_unknown_users_get_their_id_and_nothing_else() -> None:
    """Deny by default: a stranger's command runs nothing and is answered with one line naming their id."""
    async with bot_scene() as s:
        await s.mallory.send("/call demo echo text=hi")
        reply = await s.fake.next_message(s.mallory)
        assert str(MALLORY_ID) in reply.text and "private" in reply.text
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools")
        assert [m.text for m in s.fake.messages(s.mallory, from_bot=True)] == [reply.text]


async def test_servers_lists_each_server_with_its_tool_count() -> None:
    """/servers shows every configured server, connected, with its tools counted."""
    async with bot_scene() as s:
        await s.alice.send("/servers")
        reply = await s.fake.next_message(s.alice, containing="Servers")
        assert "demo" in reply.text and "6 tools" in reply.text and "t:" in reply.text


async def test_deploy_by_buttons_from_tools_list_to_result() -> None:
    """/tools -> tap deploy -> choose a target -> Yes -> review -> Submit -> the result; every card settled."""
    async with bot_scene() as s:
        await s.alice.send("/tools demo")
        listing = await s.fake.next_message(s.alice, containing="tap a tool")
        await s.alice.press(listing, "deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        assert "demo" in card.html and card.buttons[:2] == ["Staging (safe to try)", "Production (live)"]
        assert {"Decline", "Cancel"} <= set(card.buttons)
        await s.alice.press(card, "Staging (safe to try)")
        card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        confirm = await s.fake.wait_for(lambda m: "Deploy web to staging?" in m.text and has_buttons(m))
        assert {"Yes", "No"} <= set(confirm.buttons)
        await s.alice.press(confirm, "Yes")
        confirm = await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
        await s.alice.press(confirm, "✅ Submit")
        result = await s.fake.wait_for(lambda m: "Deployed web to staging" in m.text)
        assert "✅" in result.text
        assert not card.buttons and "Answer sent" in card.text
        assert not confirm.buttons


async def test_a_tap_on_a_settled_card_gets_an_alert() -> None:
    """Buttons of an answered card are gone; replaying its callback data gets 'expired', never silence."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
        old_data = card.reply_markup[0][0].callback_data
        await s.alice.press(card, "Decline")
        await s.fake.wait_for(lambda m: "Deployment declined" in m.text)
        assert not card.buttons and "Declined" in card.text
        answer = await s.alice.press_data(card, old_data)
        assert answer.show_alert and "expired" in answer.text


async def test_forged_callback_data_is_refused_with_an_alert() -> None:
    """Callback data that is not ours, or names no prompt, changes nothing."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
        for data in ["p:notatoken:0:c:0", "garbage", "p:" + "x" * 60]:
            answer = await s.alice.press_data(card, data)
            assert answer.show_alert
        assert card.edit_count == 0
        await s.alice.press(card, "Cancel")
        await s.fake.wait_for(lambda m: "Deployment cancelled" in m.text)


async def test_book_table_form_with_replies_errors_defaults_skip_and_multi_select() -> None:
    """A multi-field form: bad input is re-asked with the reason, defaults pre-filled, multi-select toggles."""
    async with bot_scene() as s:
        await s.alice.send("/call demo book_table restaurant=Luigi's")
        card = await s.fake.wait_for(lambda m: "Party size" in m.text and "Reply" in m.text)
        await s.alice.send("13", reply_to=card)
        error = await s.fake.next_message(s.alice, containing="⚠️")
        assert "12" in error.text
        card = await s.fake.wait_for(lambda m: "Party size" in m.text and has_buttons(m) and "⚠️" in m.text)
        await s.alice.send("4", reply_to=card)
        card = await s.fake.wait_for(lambda m: "<b>Date</b>" in m.html and has_buttons(m))
        await s.alice.send("2026-12-24")  # a plain message answers the only text question
        card = await s.fake.wait_for(lambda m: "Time" in m.text and "19:30" in m.buttons)
        await s.alice.press(card, "19:30")
        card = await s.fake.wait_for(lambda m: "<b>Email</b>" in m.html and has_buttons(m))
        await s.alice.send("not-an-email", reply_to=card)
        await s.fake.next_message(s.alice, containing="email")
        card = await s.fake.wait_for(lambda m: "<b>Email</b>" in m.html and "⚠️" in m.text and has_buttons(m))
        await s.alice.send("ada@example.com", reply_to=card)
        card = await s.fake.wait_for(lambda m: "☐ vegan" in m.buttons and "Skip" in m.buttons)
        await s.alice.press(card, "☐ vegan")
        card = await s.fake.wait_for(lambda m: m is card and "☑ vegan" in m.buttons)
        await s.alice.press(card, "☐ gluten-free")
        card = await s.fake.wait_for(lambda m: m is card and "☑ gluten-free" in m.buttons)
        await s.alice.press(card, lambda label: label.startswith("Done"))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        assert "Outdoor seating: No" in review.text  # a default, pre-filled and shown
        assert "Notes:" in review.text
        await s.alice.press(review, "✏️ Outdoor seating")
        card = await s.fake.wait_for(lambda m: m is review and "Keep: No" in m.buttons)
        await s.alice.press(card, "Yes")
        review = await s.fake.wait_for(lambda m: m is card and "Outdoor seating: Yes" in m.text)
        await s.alice.press(review, "✅ Submit")
        result = await s.fake.wait_for(lambda m: "Booked a table for 4 at Luigi's" in m.text)
        assert "2026-12-24 at 19:30" in result.text and "ada@example.com" in result.text
        assert "vegan, gluten-free" in result.text and "outdoors" in result.text


async def test_decline_on_any_step_reaches_the_server() -> None:
    """Decline on a multi-field form's first step: the tool reports it and the card says so."""
    async with bot_scene() as s:
        await s.alice.send("/call demo book_table restaurant=X")
        card = await s.fake.wait_for(lambda m: "Party size" in m.text and has_buttons(m))
        await s.alice.press(card, "Decline")
        await s.fake.wait_for(lambda m: "Booking declined" in m.text)
        assert "Declined" in card.text and not card.buttons


async def test_missing_arguments_are_asked_with_the_form_ui() -> None:
    """/call without a required argument asks for it, then runs the tool."""
    async with bot_scene() as s:
        await s.alice.send("/call demo echo")
        card = await s.fake.wait_for(lambda m: "To call echo" in m.text and has_buttons(m))
        await s.alice.send("hello <b>there</b>", reply_to=card)
        review = await s.fake.wait_for(lambda m: "Please review" in m.text and has_buttons(m))
        await s.alice.press(review, "✅ Submit")
        result = await s.fake.wait_for(lambda m: "hello <b>there</b>" in m.text and "✅" in m.text)
        assert "&lt;b&gt;" in result.html  # tool output is escaped, never markup


async def test_url_consent_reveals_the_link_and_completion_settles_the_card() -> None:
    """URL mode: host in bold, consent button first, then the real link; completion ends the card."""
    async with bot_scene(protocol="legacy") as s:
        await s.alice.send("/call demo connect_calendar")
        card = await s.fake.wait_for(lambda m: "open a link" in m.text and has_buttons(m))
        assert (
            "<b>example.com</b>" in card.html and "https://example.com/calendar/connect?state=" in card.text
        )
        assert card.button("Open example.com").url is None  # consent first: a callback, not the link
        await s.alice.press(card, "Open example.com")
        await s.fake.wait_for(lambda m: "Calendar connected" in m.text)
        card = await s.fake.wait_for(lambda m: m is card and "Done" in m.text)
        assert not card.buttons


async def test_url_elicitation_required_then_finished_retries_the_call() -> None:
    """-32042: consent card, then the link and 'I've finished'; tapping it retries the call."""
    async with bot_scene(protocol="legacy") as s:
        await s.alice.send("/call demo sync_calendar")
        card = await s.fake.wait_for(lambda m: "Allow calendar sync" in m.text and has_buttons(m))
        await s.alice.press(card, "Open example.com")
        card = await s.fake.wait_for(lambda m: m is card and "I've finished" in m.buttons)
        assert (card.button("Open example.com").url or "").startswith(
            "https://example.com/calendar/authorize"
        )
        await s.alice.press(card, "I've finished")
        await s.fake.wait_for(lambda m: "Calendar synced" in m.text)
        assert not card.buttons


async def test_javascript_url_never_becomes_a_button() -> None:
    """A non-web URL is refused: the person is warned, the server hears decline."""
    async with bot_scene() as s:
        await s.alice.send('/call t ask_url {"url": "javascript:alert(1)"}')
        warning = await s.fake.next_message(s.alice, containing="cannot show")
        assert "javascript" in warning.text and not warning.buttons
        result = await s.fake.wait_for(lambda m: "decline" in m.text and "✅" in m.text)
        assert json.loads(result.text.split("\n", 1)[1])["action"] == "decline"


async def test_server_text_cannot_inject_markup() -> None:
    """HTML in a server's message and titles is shown literally."""
    schema = {"type": "object", "properties": {"x": {"type": "boolean", "title": "<i>bold</i> & co"}}}
    async with bot_scene() as s:
        await s.alice.send(
            "/call t ask_form "
            + json.dumps({"schema_json": json.dumps(schema), "message": "<b>hi</b> <a href='x'>"})
        )
        card = await s.fake.wait_for(lambda m: "<b>hi</b>" in m.text and has_buttons(m))
        assert "&lt;b&gt;hi&lt;/b&gt;" in card.html and "&lt;i&gt;bold&lt;/i&gt; &amp; co" in card.html
        await s.alice.press(card, "Cancel")
        await s.fake.wait_for(lambda m: "cancel" in m.text and "✅" in m.text)


async def test_unsupported_schema_is_reported_in_the_chat() -> None:
    """A nested schema is refused: the chat says why, the tool sees an error, no card is left behind."""
    schema = {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    async with bot_scene() as s:
        await s.alice.send("/call t ask_form " + json.dumps({"schema_json": json.dumps(schema)}))
        note = await s.fake.next_message(s.alice, containing="cannot show")
        assert "refused" in note.text
        await s.fake.wait_for(lambda m: "unsupported elicitation" in m.text)
        assert not any(m.buttons for m in s.fake.messages(s.alice, from_bot=True))


async def test_a_quick_call_shows_its_result_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call that ends before a status is due costs one message: its result, no "Running" before it."""
    # "Quick" must not depend on this machine's speed: here no status is due for an hour.
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 3600.0)
    async with bot_scene() as s:
        call = await s.alice.send("/call demo echo text=hi")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert "hi" in result.text and len(result.history) == 1
        after = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > call.message_id]
        assert after == [result]


async def test_a_slow_call_shows_a_status_message_that_becomes_its_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call still running when its status is due shows "Running"; that message then ends as the result."""
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 0.0)
    async with bot_scene() as s:
        call = await s.alice.send("/call t never_answers")
        status = await s.fake.next_message(s.alice, containing="Running")
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result is status and "cancelled" in result.text


async def a_status_delay_passes(s: Chat) -> None:
    """Return once a status delay has passed since now, by an event rather than a clock: Bob starts a call that
    never ends, and his status shows one delay later. A call of Alice's started before now has had its
    status fall due by then (loop timers of one delay fire in the order they were set)."""
    call = await s.bob.send("/call t never_answers")
    await s.fake.next_message(s.bob, containing="Running")
    await s.bob.send("/cancel")
    await s.fake.wait_for(lambda m: is_result(m, call))


async def test_a_card_waiting_for_its_person_gets_no_status_below_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the call's card waits, the card is the call's status: no "Running" appears below it, however long
    the person takes; answered, a call that ends at once puts its result below the card. (Should this machine
    take longer than the delay to show the card, the status comes first, above it, and is taken away once the
    result comes: on the card, or below it.)"""
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 0.2)
    async with bot_scene(protocol="legacy") as s:
        schema = {
            "type": "object",
            "properties": {"colour": {"enum": ["red", "blue"]}},
            "required": ["colour"],
        }
        call = await s.alice.send(f"/call t ask_form {json.dumps({'schema_json': json.dumps(schema)})}")
        card = await s.fake.next_message(s.alice, containing="asks")
        await a_status_delay_passes(s)  # Alice takes her time
        await s.alice.press(card, "blue")
        await s.alice.press(card, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        later = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > card.message_id]
        assert later == ([result] if result.message_id > card.message_id else [])
        assert not any("Running" in v.text for m in later for v in m.history)


async def test_a_call_that_goes_on_after_its_card_shows_a_status_below_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A status that fell due while the card was out follows once the card is answered and the call keeps
    running, below the card. (Should this machine take longer than the delay to show the card, the status
    comes first instead, above the card: it is taken away when the result comes below the card.)"""
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 0.05)
    async with bot_scene() as s:
        call = await s.alice.send("/call t ask_then_block")
        card = await s.fake.next_message(s.alice, containing="Go on?")
        await a_status_delay_passes(s)  # Alice takes her time
        await s.alice.press(card, "Yes")
        await s.alice.press(card, "✅ Submit")
        status = await s.fake.wait_for(lambda m: m.chat_id == s.alice.id and "Running" in m.text)
        below = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > card.message_id]
        assert below in ([status], [])  # the status, or (if it came first) nothing
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert "cancelled" in result.text
        assert result is status if below else (status.deleted and result.message_id > card.message_id)


async def test_progress_updates_the_status_message_then_shows_the_result() -> None:
    """A long task shows a status message that ends as the result."""
    async with bot_scene() as s:
        await s.alice.send("/call demo long_task steps=3")
        status = await s.fake.next_message(s.alice, containing="Running")
        await s.fake.wait_for(lambda m: m is status and "Finished all 3 steps" in m.text)
        assert any("▓" in v.text and "Step" in v.text for v in status.history)


async def test_long_results_are_split_within_telegram_limits() -> None:
    """A 10,000-character result arrives whole, in several messages, none over 4096 characters."""
    async with bot_scene() as s:
        await s.alice.send("/call t long_text chars=10000")

        def lines() -> set[str]:
            bot_lines = (
                line for m in s.fake.messages(s.alice, from_bot=True) for line in m.text.splitlines()
            )
            return {line.split()[0] for line in bot_lines if line[:5].isdigit()}

        await s.fake.wait_for(lambda _m: len(lines()) >= 10_000 // 61)
        assert sorted(lines()) == [f"{i:05d}" for i in range(1, len(lines()) + 1)]
        assert all(len(m.text) <= 4096 for m in s.fake.messages(s.alice, from_bot=True))
        assert len([m for m in s.fake.messages(s.alice, from_bot=True) if m.text[:5].isdigit()]) >= 2


async def test_very_long_results_are_trimmed_with_a_note() -> None:
    """Past a few messages the output is cut, and the last message says how much was left out."""
    async with bot_scene() as s:
        await s.alice.send("/call t long_text chars=40000")
        last = await s.fake.wait_for(lambda m: "output trimmed" in m.text)
        assert "more characters not shown" in last.text
        assert all(len(m.text) <= 4096 for m in s.fake.messages(s.alice, from_bot=True))


async def test_cancel_command_settles_the_card() -> None:
    """/cancel ends this person's pending prompt and the card says so."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
        await s.alice.send("/cancel")
        await s.fake.wait_for(lambda m: m is card and "Cancelled" in m.text)
        assert not card.buttons


async def test_unanswered_card_expires_and_loses_its_buttons() -> None:
    """elicitation.timeout_s: the card is edited to say it expired and the server hears cancel."""
    async with bot_scene(timeout_s=0.3) as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
        await s.fake.wait_for(lambda m: m is card and "Expired" in m.text)
        await s.fake.wait_for(lambda m: "Deployment cancelled" in m.text)
        assert not card.buttons
        answer = await s.alice.press_data(card, "p:whatever:1:c:0")
        assert answer.show_alert


async def test_in_a_group_only_the_caller_can_answer() -> None:
    """Bob's taps and replies on Alice's card are refused and change nothing."""
    async with bot_scene() as s:
        await s.alice.send("/call demo echo", chat=s.group)
        card = await s.fake.wait_for(
            lambda m: m.chat_id == s.group and "To call echo" in m.text and has_buttons(m)
        )
        answer = await s.bob.press(card, "Cancel")
        assert answer.show_alert and "person who started" in answer.text
        await s.bob.send("bob's text", reply_to=card)
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "Only the person" in m.text)
        assert card.edit_count == 0
        await s.alice.send("alice's text", reply_to=card)
        review = await s.fake.wait_for(
            lambda m: m.chat_id == s.group and "Please review" in m.text and has_buttons(m)
        )
        await s.alice.press(review, "✅ Submit")
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "alice's text" in m.text and "✅" in m.text)


async def test_tools_buttons_in_a_group_run_there_and_only_for_who_listed_them() -> None:
    """Bob's tap on Alice's /tools list is refused; Alice's runs the tool in the group, where she listed it."""
    async with bot_scene() as s:
        await s.alice.send("/tools demo", chat=s.group)
        listing = await s.fake.wait_for(lambda m: m.chat_id == s.group and "tap a tool" in m.text)
        answer = await s.bob.press(listing, "echo")
        assert answer.show_alert and "whoever asked for the list" in answer.text
        assert not any("To call echo" in m.text for m in s.fake.messages(s.group))
        answer = await s.alice.press(listing, "echo")
        assert not answer.show_alert
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "To call echo" in m.text and has_buttons(m))
        assert not any("To call echo" in m.text for m in s.fake.messages(s.alice))


async def test_url_cards_from_a_group_go_to_the_private_chat() -> None:
    """A link meant for Alice is sent to her privately; the group only hears that it was."""
    async with bot_scene(protocol="legacy") as s:
        await s.alice.send("/call demo connect_calendar", chat=s.group)
        card = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "open a link" in m.text and has_buttons(m)
        )
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "private chat" in m.text)
        assert not any("example.com/calendar" in m.text for m in s.fake.messages(s.group))
        await s.alice.press(card, "Open example.com")
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "Calendar connected" in m.text)


async def test_url_card_for_someone_without_a_private_chat_is_cancelled_with_advice() -> None:
    """If the bot cannot write to Alice privately, the group is told how to fix it and the server hears cancel."""
    async with bot_scene(protocol="legacy") as s:
        s.alice.has_started_bot = False
        await s.alice.send("/call demo connect_calendar", chat=s.group)
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "Open a private chat with me" in m.text)
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "Calendar connection cancelled" in m.text)
        assert [e for e in s.fake.errors if e.status == 403]
        s.fake.errors.clear()  # the 403 is the behaviour under test


async def test_a_429_is_waited_out_and_the_message_still_arrives() -> None:
    """Flood control: a RetryAfter from sendMessage is retried after the wait; nothing is dropped."""
    async with bot_scene() as s:
        s.fake.fail_next("sendMessage", status=429, retry_after=1)
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools")
        assert [e.status for e in s.fake.errors] == [429]


async def test_text_typed_at_the_review_card_gets_a_hint_and_changes_nothing() -> None:
    """A reply to a review card is not an answer: the person is told to use its buttons."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
        await s.alice.press(card, "Staging (safe to try)")
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        edits = review.edit_count
        await s.alice.send("yes please", reply_to=review)
        hint = await s.fake.next_message(s.alice, containing="Use the buttons")
        assert "Submit" in hint.text
        assert review.edit_count == edits and "✅ Submit" in review.buttons
        await s.alice.press(review, "Cancel")
        await s.fake.wait_for(lambda m: "Deployment cancelled" in m.text)

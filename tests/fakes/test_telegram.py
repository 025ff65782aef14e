"""Tests of the fake Bot API itself: the real PTB 22.8 Application and Bot talk HTTP to it on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dtm
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import CollectorRegistry
from telegram import (
    Bot,
    ForceReply,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    Message,
    ReplyParameters,
    Update,
)
from telegram.error import BadRequest, Conflict, Forbidden, NetworkError, RetryAfter, TimedOut
from telegram.ext import (
    Application,
    ApplicationBuilder,
    BaseHandler,
    CallbackQueryHandler,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.web import Webhook, WebServer, build_app
from tests.fakes.telegram import Button, CallbackAnswer, FakeTelegram, RateLimits, ScriptError
from tests.fakes.telegram.formatting import parse_html
from tests.fakes.telegram.model import ApiReject
from tests.ports import free_port

pytestmark = pytest.mark.anyio

Context = ContextTypes.DEFAULT_TYPE
NOT_MODIFIED = (
    "Bad Request: message is not modified: specified new message content and reply markup are exactly"
    " the same as a current content and reply markup of the message"
)
QUERY_TOO_OLD = "Bad Request: query is too old and response timeout expired or query ID is invalid"


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as fake:
        yield fake


@pytest.fixture
async def bot(fake: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(fake.token, base_url=fake.base_url, base_file_url=fake.base_file_url) as bot:
        yield bot


@contextlib.asynccontextmanager
async def running(
    fake: FakeTelegram, *handlers: BaseHandler[Any, Any, Any]
) -> AsyncIterator[Application[Any, Any, Any, Any, Any, Any]]:
    """The production lifecycle (telegram.md §1) against the fake; fails the test if a handler raised."""
    app = (
        ApplicationBuilder()
        .token(fake.token)
        .base_url(fake.base_url)
        .base_file_url(fake.base_file_url)
        .build()
    )
    app.add_handlers(list(handlers))
    raised: list[object] = []

    async def on_error(update: object, context: Context) -> None:
        raised.append(context.error)

    app.add_error_handler(on_error)
    async with app:
        await app.start()
        await app.updater.start_polling(timeout=10, allowed_updates=["message", "callback_query"])  # type: ignore[union-attr]
        try:
            yield app
        finally:
            await app.updater.stop()  # type: ignore[union-attr]
            await app.stop()
    assert raised == []


def keyboard(*rows: list[tuple[str, str]], url: bool = False) -> InlineKeyboardMarkup:
    def button(text: str, data: str) -> InlineKeyboardButton:
        return InlineKeyboardButton(text, url=data) if url else InlineKeyboardButton(text, callback_data=data)

    return InlineKeyboardMarkup([[button(t, d) for t, d in row] for row in rows])


async def greet(update: Update, context: Context) -> None:
    assert update.message is not None
    assert update.effective_user is not None
    await update.message.reply_html(
        f"Hello <b>{update.effective_user.first_name}</b> &amp; co",
        reply_markup=keyboard([("Yes", "q:yes"), ("No", "q:no")]),
    )


async def chose(update: Update, context: Context) -> None:
    query = update.callback_query
    assert query is not None
    assert query.message is not None
    assert query.message.is_accessible
    assert isinstance(query.message, Message)  # what is_accessible says, for the type checker
    await query.answer(f"Saved {query.data}", show_alert=True)
    await query.edit_message_text(f"{query.message.text_html}: chose {query.data}", parse_mode="HTML")


# --- end to end through a running Application ------------------------------------------------------


async def test_command_reaches_its_handler_and_the_reply_arrives(fake: FakeTelegram) -> None:
    """/start in a private chat reaches a CommandHandler; the HTML reply is stored plain and raw."""
    alice = fake.user(id=1001, first_name="Alice")
    async with running(fake, CommandHandler("start", greet)):
        await alice.send("/start")
        reply = await fake.next_message(alice)
    assert (reply.chat_id, reply.from_bot, reply.text) == (1001, True, "Hello Alice & co")
    assert reply.html == "Hello <b>Alice</b> &amp; co"
    assert reply.entities == ({"type": "bold", "offset": 6, "length": 5},)
    assert reply.buttons == ["Yes", "No"]
    assert reply.button("No") == Button("No", callback_data="q:no")
    assert fake.errors == []


async def test_button_press_reaches_callback_handler_and_returns_its_answer(fake: FakeTelegram) -> None:
    """press() delivers the callback data, returns the bot's answer, and the edit is observed."""
    alice = fake.user(id=1001, first_name="Alice")
    async with running(fake, CommandHandler("start", greet), CallbackQueryHandler(chose, pattern=r"^q:")):
        await alice.send("/start")
        menu = await fake.next_message(alice, containing="Hello")
        answer = await alice.press(menu, "Yes")
        edited = await fake.wait_for(lambda m: m is menu and "chose" in m.text)
    assert answer == CallbackAnswer(text="Saved q:yes", show_alert=True)
    assert edited.html == "Hello <b>Alice</b> &amp; co: chose q:yes"
    assert (edited.edit_count, edited.buttons, edited.history[0].text) == (1, [], "Hello Alice & co")
    assert fake.errors == []


async def test_reply_to_a_force_reply_prompt_reaches_the_reply_handler(fake: FakeTelegram) -> None:
    """A ForceReply prompt is recorded; the user's reply carries reply_to_message, and "42" stays a string."""

    async def ask(update: Update, context: Context) -> None:
        await update.message.reply_text("How many?", reply_markup=ForceReply(input_field_placeholder="n"))  # type: ignore[union-attr]

    async def on_reply(update: Update, context: Context) -> None:
        message = update.message
        assert message is not None
        assert message.reply_to_message is not None
        await message.reply_text(f"{message.text!r} to {message.reply_to_message.message_id}")

    async with running(
        fake, CommandHandler("ask", ask), MessageHandler(filters.REPLY & filters.TEXT, on_reply)
    ):
        alice = fake.user(id=1001, first_name="Alice")
        await alice.send("/ask")
        prompt = await fake.next_message(alice)
        await alice.send("42", reply_to=prompt)
        answer = await fake.next_message(alice)
    assert prompt.force_reply
    assert prompt.reply_markup == ()
    assert answer.text == f"'42' to {prompt.message_id}"


async def test_group_command_addressed_to_the_bot_is_answered_in_the_group(fake: FakeTelegram) -> None:
    """/start@botname from a group member reaches the handler and the reply lands in the group."""
    alice, bob = fake.user(id=1001, first_name="Alice"), fake.user(id=1002, first_name="Bob")
    ops = fake.group(-5001, title="Ops", members=[alice, bob])
    async with running(fake, CommandHandler("start", greet)):
        await bob.send(f"/start@{fake.bot_username}", chat=ops)
        reply = await fake.next_message(ops)
    assert (reply.chat_id, reply.text) == (-5001, "Hello Bob & co")
    assert [m.sender_id for m in fake.messages(ops)] == [1002, fake.bot_id]


async def test_app_and_fake_shut_down_cleanly_after_confirming_the_offset() -> None:
    """Stopping ends with getUpdates(timeout=0); afterwards no task of the app or the fake is left running."""
    tasks_before = asyncio.all_tasks()
    async with FakeTelegram() as fake:
        alice = fake.user(id=1001, first_name="Alice")
        async with running(fake, CommandHandler("start", greet)):
            await alice.send("/start")
            await fake.next_message(alice)
    method, params = fake.calls[-1]
    assert (method, params["timeout"], params["offset"]) == ("getUpdates", 0, 2)
    assert fake.pending_updates == []
    assert asyncio.all_tasks() == tasks_before


# --- Telegram's 400s, through a real PTB Bot -------------------------------------------------------


def button_rows(n: int, per_row: int) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(str(i), callback_data=str(i)) for i in range(r, min(n, r + per_row))]
         for r in range(0, n, per_row)]
    )  # fmt: skip


def html(text: str) -> dict[str, str]:
    return {"text": text, "parse_mode": "HTML"}


def url_button(url: str) -> dict[str, InlineKeyboardMarkup]:
    return {"reply_markup": keyboard([("A", url)], url=True)}


def data_button(data: str, label: str = "A") -> dict[str, InlineKeyboardMarkup]:
    return {"reply_markup": keyboard([(label, data)])}


ENTITIES = "can't parse entities: "
AMP = ENTITIES + 'Character "&" must be escaped as "&amp;" (unsupported entity at byte offset {})'
NO_ACTION = "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
SEND_RULES = [
    pytest.param({"text": ""}, "message text is empty", id="empty"),
    pytest.param(html("<b> </b>"), "message text is empty", id="empty-after-parsing"),
    pytest.param({"text": "x" * 4097}, "message is too long", id="too-long"),
    pytest.param(html("a<br>b"), ENTITIES + 'Unsupported start tag "br" at byte offset 1', id="tag"),
    pytest.param(html("<b>open"), ENTITIES + 'Can\'t find end tag corresponding to start tag "b"', id="open"),
    pytest.param(
        html("<b>x</i>"),
        ENTITIES + 'Unmatched end tag at byte offset 4, expected "</b>", found "</i>"',
        id="unmatched",
    ),
    pytest.param(html("é & b"), AMP.format(3), id="bare-amp"),
    pytest.param(html("&nbsp;"), AMP.format(0), id="named-entity"),
    pytest.param(
        html("<span>s</span>"),
        ENTITIES + 'Tag "span" must have class "tg-spoiler" at byte offset 0',
        id="span",
    ),
    pytest.param(data_button("x" * 65), "BUTTON_DATA_INVALID", id="data-65-bytes"),
    pytest.param(data_button("é" * 33), "BUTTON_DATA_INVALID", id="data-66-utf8-bytes"),
    pytest.param(
        url_button("ftp://example.com/f"),
        "inline keyboard button URL 'ftp://example.com/f' is invalid: Unsupported URL protocol",
        id="url-scheme",
    ),
    pytest.param(url_button("http://localhost:8080/cb"), "BUTTON_URL_INVALID", id="url-dotless-host"),
    pytest.param(
        {"reply_markup": InlineKeyboardMarkup([[InlineKeyboardButton("A")]])}, NO_ACTION, id="no-action"
    ),
    pytest.param(data_button(""), NO_ACTION, id="empty-data"),
    pytest.param(data_button("a", label=" "), "BUTTON_TEXT_INVALID", id="blank-label"),
    pytest.param({"reply_markup": button_rows(9, per_row=9)}, "reply markup is too long", id="9-per-row"),
    pytest.param({"reply_markup": button_rows(101, per_row=8)}, "reply markup is too long", id="101-buttons"),
    pytest.param({"chat_id": 999}, "chat not found", id="unknown-chat"),
    pytest.param(
        {"reply_parameters": ReplyParameters(77)}, "message to be replied not found", id="reply-missing"
    ),
]


@pytest.mark.parametrize(("overrides", "description"), SEND_RULES)
async def test_send_message_breaking_a_rule_gets_telegrams_400(
    fake: FakeTelegram, bot: Bot, overrides: dict[str, Any], description: str
) -> None:
    """Each sendMessage rule answers 400 with Telegram's description; PTB raises BadRequest with it."""
    fake.user(id=1001, first_name="Alice")
    with pytest.raises(BadRequest) as raised:
        await bot.send_message(**{"chat_id": 1001, "text": "hi", **overrides})
    (error,) = fake.errors
    assert (error.status, error.method, error.injected) == (400, "sendMessage", False)
    assert error.description == f"Bad Request: {description}"
    assert raised.value.message.lower() == description.lower()  # PTB re-capitalizes (telegram.md §1)
    assert fake.messages(1001) == []


async def test_edits_that_change_nothing_or_miss_the_message_get_telegrams_400(
    fake: FakeTelegram, bot: Bot
) -> None:
    """Same content: "not modified"; unknown message: "to edit not found"; a user's: "can't be edited"."""
    alice = fake.user(id=1001, first_name="Alice")
    markup = keyboard([("A", "a")])
    sent = await bot.send_message(1001, "<i>v1</i>", parse_mode="HTML", reply_markup=markup)
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text(
            "<i>v1</i>", 1001, sent.message_id, parse_mode="HTML", reply_markup=markup
        )
    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_reply_markup(1001, sent.message_id, reply_markup=keyboard([("A", "a")]))
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("v2", 1001, 999)
    own = await alice.send("mine")
    with pytest.raises(BadRequest, match=r"(?i)message can't be edited"):
        await bot.edit_message_text("v2", 1001, own.message_id)
    assert [e.description for e in fake.errors][:2] == [NOT_MODIFIED, NOT_MODIFIED]
    await bot.edit_message_text("<b>v1</b>", 1001, sent.message_id, parse_mode="HTML")  # formatting counts
    msg = fake.messages(1001, from_bot=True)[0]
    assert (msg.edit_count, msg.html, msg.buttons) == (1, "<b>v1</b>", [])  # no reply_markup removes it


async def test_bot_cannot_start_a_conversation_with_a_user_who_never_started_it(
    fake: FakeTelegram, bot: Bot
) -> None:
    """A user who never pressed Start (or blocked the bot) gets no message: 403 Forbidden."""
    alice = fake.user(id=1001, first_name="Alice", has_started_bot=False)
    with pytest.raises(Forbidden, match="bot can't initiate conversation with a user"):
        await bot.send_message(1001, "hi")
    await alice.send("/start")
    await bot.send_message(1001, "hi")
    alice.blocked_bot = True
    with pytest.raises(Forbidden, match="bot was blocked by the user"):
        await bot.send_message(1001, "again")
    assert [(e.status, e.description) for e in fake.errors] == [
        (403, "Forbidden: bot can't initiate conversation with a user"),
        (403, "Forbidden: bot was blocked by the user"),
    ]


async def next_query(bot: Bot, offset: int) -> Update:
    (update,) = await bot.get_updates(offset=offset, timeout=5)
    assert update.callback_query is not None
    return update


async def test_a_callback_query_is_answered_once_within_the_text_limit(fake: FakeTelegram, bot: Bot) -> None:
    """Text over 200 chars: MESSAGE_TOO_LONG; a second answer or an unknown id: "query is too old"."""
    alice = fake.user(id=1001, first_name="Alice")
    sent = await bot.send_message(1001, "Pick", reply_markup=keyboard([("A", "a")]))
    menu = fake.messages(alice)[0]
    async with anyio.create_task_group() as tg:
        tg.start_soon(alice.press, menu, "A")
        update = await next_query(bot, offset=0)
        query = update.callback_query
        assert query is not None
        assert query.data == "a"
        assert query.message.message_id == sent.message_id  # type: ignore[union-attr]
        with pytest.raises(BadRequest, match=r"(?i)message_too_long"):
            await query.answer("x" * 201)
        await query.answer("ok")
        with pytest.raises(BadRequest) as twice:
            await query.answer("again")
    with pytest.raises(BadRequest) as unknown:
        await bot.answer_callback_query("123")
    assert (
        twice.value.message
        == unknown.value.message
        == "Query is too old and response timeout expired or query id is invalid"
    )
    assert [e.description for e in fake.errors] == [
        "Bad Request: MESSAGE_TOO_LONG",
        QUERY_TOO_OLD,
        QUERY_TOO_OLD,
    ]


async def test_press_times_out_and_a_late_answer_is_too_old(fake: FakeTelegram, bot: Bot) -> None:
    """If the bot never answers, press() raises TimeoutError and a later answer gets Telegram's 400."""
    alice = fake.user(id=1001, first_name="Alice")
    await bot.send_message(1001, "Pick", reply_markup=keyboard([("A", "a")]))
    with pytest.raises(TimeoutError, match="did not answer"):
        await alice.press(fake.messages(alice)[0], "A", timeout=0.05)
    update = await next_query(bot, offset=0)
    with pytest.raises(BadRequest, match=r"(?i)query is too old"):
        await update.callback_query.answer()  # type: ignore[union-attr]


async def test_pressing_a_url_button_or_a_missing_label_is_a_script_error(
    fake: FakeTelegram, bot: Bot
) -> None:
    """A URL button opens in the client and sends no update; a missing label names the real ones."""
    alice = fake.user(id=1001, first_name="Alice")
    markup = InlineKeyboardMarkup([[InlineKeyboardButton("Docs", url="https://example.com/docs")]])
    await bot.send_message(1001, "Read", reply_markup=markup)
    msg = fake.messages(alice)[0]
    with pytest.raises(ScriptError, match="URL button"):
        await alice.press(msg, "Docs")
    with pytest.raises(ScriptError, match=r"\['Docs'\]"):
        await alice.press(msg, "Help")
    assert fake.pending_updates == []


async def test_delete_message_marks_it_deleted_and_a_second_delete_fails(
    fake: FakeTelegram, bot: Bot
) -> None:
    """deleteMessage hides the message from messages() and the second delete gets a 400."""
    fake.user(id=1001, first_name="Alice")
    sent = await bot.send_message(1001, "temp")
    assert await bot.delete_message(1001, sent.message_id)
    with pytest.raises(BadRequest, match=r"(?i)message to delete not found"):
        await bot.delete_message(1001, sent.message_id)
    assert fake.messages(1001) == []
    assert fake.messages(1001, include_deleted=True)[0].deleted


async def test_commands_chat_actions_and_webhook_info_are_answered(fake: FakeTelegram, bot: Bot) -> None:
    """setMyCommands is recorded; sendChatAction checks the action; getWebhookInfo reflects the state."""
    fake.user(id=1001, first_name="Alice")
    assert await bot.set_my_commands([("start", "Start over"), ("tools", "List tools")])
    assert fake.commands == [("start", "Start over"), ("tools", "List tools")]
    assert [c.command for c in await bot.get_my_commands()] == ["start", "tools"]
    with pytest.raises(BadRequest, match=r"(?i)bot_command_invalid"):
        await bot.set_my_commands([("Bad Cmd", "x")])
    assert await bot.send_chat_action(1001, "typing")
    with pytest.raises(BadRequest, match=r"(?i)wrong parameter action"):
        await bot.send_chat_action(1001, "dancing")
    assert await bot.delete_my_commands()
    assert fake.commands == []
    assert (await bot.get_webhook_info()).url == ""


# --- injected faults and the flood limiter ---------------------------------------------------------


async def test_injected_429_raises_retry_after_with_its_delay(
    fake: FakeTelegram, bot: Bot, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fail_next(429, retry_after=7) → PTB RetryAfter(7s) once; the next call succeeds."""
    # Without PTB_TIMEDELTA, PTB 22.8 constructing RetryAfter emits a PTBDeprecationWarning (an error here).
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    fake.user(id=1001, first_name="Alice")
    fake.fail_next("sendMessage", retry_after=7)
    with pytest.raises(RetryAfter) as raised:
        await bot.send_message(1001, "hi")
    assert raised.value.retry_after == dtm.timedelta(seconds=7)
    await bot.send_message(1001, "hi")
    (error,) = fake.errors
    assert (error.status, error.injected) == (429, True)
    assert error.description == "Too Many Requests: retry after 7"
    assert fake.unexpected_errors == []


@pytest.mark.parametrize("status", [500, 502])
async def test_injected_server_errors_raise_network_error(fake: FakeTelegram, bot: Bot, status: int) -> None:
    """5xx answers reach PTB as NetworkError, `times` calls in a row."""
    fake.fail_next("getUpdates", status=status, times=2)
    for _ in range(2):
        with pytest.raises(NetworkError):
            await bot.get_updates()
    assert await bot.get_updates() == ()
    assert [e.status for e in fake.errors] == [status, status]


async def test_a_hung_get_updates_times_out_and_is_released_by_the_next_poll(
    fake: FakeTelegram, bot: Bot
) -> None:
    """fail_next(hang=True) holds the request: the client times out; its retry releases the held one."""
    fake.fail_next("getUpdates", status=502, hang=True)
    with pytest.raises(TimedOut):
        await bot.get_updates(timeout=0, read_timeout=0.1)
    assert await bot.get_updates() == ()
    assert [e.status for e in fake.errors] == [502]


async def test_flood_limiter_answers_429_past_the_per_chat_and_group_limits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With rate_limit, a chat gets 5 messages per 5 s and a group 20 per minute; then 429 + retry_after."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    now = [0.0]
    async with FakeTelegram(rate_limit=RateLimits(per_chat=(5, 5.0)), clock=lambda: now[0]) as limited:
        limited.user(id=1001, first_name="Alice")
        group = limited.group(-5001, title="Ops")
        async with Bot(limited.token, base_url=limited.base_url) as rbot:
            for _ in range(5):
                await rbot.send_message(1001, "burst")
            with pytest.raises(RetryAfter) as raised:
                await rbot.send_message(1001, "one too many")
            assert raised.value.retry_after == dtm.timedelta(seconds=5)
            now[0] = 5.0
            await rbot.send_message(1001, "after the window")
            for i in range(20):
                now[0] = 10.0 + 2 * i  # slow enough for the per-chat limit, not for the group's
                await rbot.send_message(group, "g")
            with pytest.raises(RetryAfter):
                await rbot.send_message(group, "21st in a minute")
    assert [(e.status, e.injected) for e in limited.errors] == [(429, False), (429, False)]


# --- the wire: params, routing, long polls, webhooks -------------------------------------------------


async def test_form_params_are_json_decoded_except_plain_strings(fake: FakeTelegram) -> None:
    """PTB's wire format: text "123" stays a string; chat_id and reply_markup are decoded; JSON works too."""
    fake.user(id=1001, first_name="Alice")
    url = f"{fake.base_url}{fake.token}/sendMessage"
    markup = '{"inline_keyboard": [[{"text": "A", "callback_data": "1"}]]}'
    async with httpx.AsyncClient(trust_env=False) as client:
        form = await client.post(url, data={"chat_id": "1001", "text": "123", "reply_markup": markup})
        body = await client.post(url, json={"chat_id": 1001, "text": "true", "disable_notification": True})
    assert form.json()["result"]["text"] == "123"
    assert body.json()["result"]["text"] == "true"
    decoded_markup = {"inline_keyboard": [[{"text": "A", "callback_data": "1"}]]}
    assert fake.calls[0] == ("sendMessage", {"chat_id": 1001, "text": "123", "reply_markup": decoded_markup})
    assert [m.text for m in fake.messages(1001)] == ["123", "true"]


async def test_unknown_method_is_404_and_a_wrong_token_is_401(fake: FakeTelegram) -> None:
    """Telegram's exact bodies for an unknown method and a bad token."""
    async with httpx.AsyncClient(trust_env=False) as client:
        unknown = await client.post(f"{fake.base_url}{fake.token}/sendTelepathy")
        bad_token = await client.post(f"{fake.base_url}1:wrong/getMe")
    assert (unknown.status_code, unknown.json()) == (
        404,
        {"ok": False, "error_code": 404, "description": "Not Found: method not found"},
    )
    assert (bad_token.status_code, bad_token.json()["description"]) == (401, "Unauthorized")
    assert [e.status for e in fake.errors] == [404, 401]


async def test_a_waiting_long_poll_is_released_when_the_fake_stops() -> None:
    """A getUpdates(timeout=30) in flight returns [] as soon as the fake shuts down."""
    async with FakeTelegram() as fake:
        bot = Bot(fake.token, base_url=fake.base_url)
        await bot.initialize()
        poll = asyncio.create_task(bot.get_updates(timeout=30))
        await fake.wait_for_call("getUpdates", lambda p: p.get("timeout") == 30)
    with anyio.fail_after(5):
        assert await poll == ()
    await bot.shutdown()


async def test_get_updates_is_a_conflict_while_a_webhook_is_set(fake: FakeTelegram, bot: Bot) -> None:
    """Telegram refuses getUpdates with 409 until deleteWebhook."""
    assert await bot.set_webhook("https://bot.example.com/tg", secret_token="s3cret")
    assert (await bot.get_webhook_info()).url == "https://bot.example.com/tg"
    with pytest.raises(Conflict, match="webhook is active"):
        await bot.get_updates()
    assert await bot.delete_webhook()
    assert await bot.get_updates() == ()


async def test_webhook_mode_receives_users_updates_with_the_secret(fake: FakeTelegram) -> None:
    """A webhook (the bot's own endpoint feeding PTB's update queue) gets the user's update from
    deliver_via_webhook, refused without the secret, and PTB replies via the fake."""
    port = free_port()
    app = ApplicationBuilder().token(fake.token).base_url(fake.base_url).updater(None).build()
    app.add_handler(CommandHandler("start", greet))
    alice = fake.user(id=1001, first_name="Alice")
    async with app:
        await app.start()
        await app.bot.set_webhook("https://bot.example.com/telegram", secret_token="s3cret")
        webhook = Webhook("s3cret", app.bot, app.update_queue)
        server = WebServer(
            build_app(running=lambda: True, reachable=_yes, metrics=CollectorRegistry(), webhook=webhook),
            "127.0.0.1",
            port,
        )
        async with anyio.create_task_group() as tg:
            await tg.start(server.run)
            local = f"http://127.0.0.1:{port}/telegram"
            assert await fake.post_update_to(local, {"update_id": 1}, secret_token="wrong") == 403
            fake.deliver_via_webhook(local, secret_token="s3cret")
            await alice.send("/start")
            reply = await fake.next_message(alice)
            server.stop()
        await app.stop()
    assert reply.text == "Hello Alice & co"
    assert fake.webhook["url"] == "https://bot.example.com/telegram"
    assert fake.webhook["secret_token"] == "s3cret"


async def _yes() -> bool:
    return True


# --- HTML parse_mode, pure --------------------------------------------------------------------------


def test_html_parsing_yields_plain_text_and_utf16_entities() -> None:
    """Tags become entities with UTF-16 offsets; entities and numeric references are unescaped."""
    text, entities = parse_html(
        '😀 <b>bold <i>both</i></b> <a href="https://x.org/?a=1&amp;b=2">link</a> &lt;&#65;&#x42;&quot;'
        ' <tg-spoiler>s</tg-spoiler> <pre><code class="language-py">x = 1</code></pre>'
    )
    assert text == '😀 bold both link <AB" s x = 1'
    assert entities == (
        {"type": "bold", "offset": 3, "length": 9},
        {"type": "italic", "offset": 8, "length": 4},
        {"type": "text_link", "offset": 13, "length": 4, "url": "https://x.org/?a=1&b=2"},
        {"type": "spoiler", "offset": 23, "length": 1},
        {"type": "pre", "offset": 25, "length": 5, "language": "py"},
    )


@pytest.mark.parametrize(
    ("source", "detail"),
    [
        ("<b>x</b></b>", "Unexpected end tag at byte offset 8"),
        ("<b x", "Unclosed start tag at byte offset 0"),
        ("1 < 2", 'Unsupported start tag "" at byte offset 2'),
        ("<tg-emoji>x</tg-emoji>", "Custom emoji entity must contain a valid custom emoji identifier"),
    ],
)
def test_malformed_html_is_rejected_with_tdlibs_wording(source: str, detail: str) -> None:
    """Balanced, known tags only."""
    with pytest.raises(ApiReject) as raised:
        parse_html(source)
    assert raised.value.description == f"Bad Request: can't parse entities: {detail}"


def test_package_exports_exactly_its_public_names() -> None:
    """The contract's names, pinned (STYLE.md item 1)."""
    import tests.fakes.telegram as package

    exported = ["Button", "CallbackAnswer", "ErrorReply", "FakeTelegram", "FakeUser", "Msg", "RateLimits"]
    assert sorted(package.__all__) == [*exported, "ScriptError", "Version"]
    assert all(hasattr(package, name) for name in package.__all__)

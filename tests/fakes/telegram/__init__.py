"""A fake Telegram Bot API server for end-to-end tests: the real PTB `Application` talks HTTP to it on
127.0.0.1 while scripted users send messages and press buttons. It answers like Telegram, 400s included.

Contract (tests are written against this; keep it stable)::

    async with FakeTelegram() as fake:                   # starts/stops uvicorn on a free port
        app = (ApplicationBuilder().token(fake.token)
               .base_url(fake.base_url).base_file_url(fake.base_file_url).build())
        alice = fake.user(id=1001, first_name="Alice")   # her private chat id == 1001
        ops = fake.group(-5001, title="Ops", members=[alice])
        async with app:
            await app.start(); await app.updater.start_polling(timeout=1)
            await alice.send("/start")                    # -> Update(message) with a bot_command entity
            menu = await fake.next_message(alice, containing="Pick")
            answer = await alice.press(menu, "Yes")       # -> CallbackAnswer(text, show_alert, url)
            done = await fake.wait_for(lambda m: m is menu and "chose" in m.text)
            await app.updater.stop(); await app.stop()
        assert not fake.unexpected_errors

Setting the scene: `fake.user(id, first_name, *, username, last_name, language_code, has_started_bot=True)`
-> FakeUser; `fake.private_chat(user)` -> chat id (== user id); `fake.group(chat_id<0, title, members,
supergroup=False)` -> chat id. `user.has_started_bot = False` makes sendMessage to that user 403
"Forbidden: bot can't initiate conversation with a user"; `user.blocked_bot = True` gives 403
"Forbidden: bot was blocked by the user".

Scripted users (each action makes an Update, queued for getUpdates): `await user.send(text, chat=None,
reply_to=None)` -> the user's Msg (private chat by default, the replied message's chat with reply_to);
`await user.press(msg, label)` presses the button whose text == label (or matches a regex / predicate on
the text) and returns the bot's answerCallbackQuery as a CallbackAnswer, waiting up to `timeout` (5 s);
pressing a URL button or a missing one raises ScriptError; `await user.press_data(msg, data)` forges data.

Observing: `Msg` (chat_id, message_id, from_bot, sender_id, text = plain text, html = raw HTML, entities,
reply_markup = rows of Button(text, callback_data, url, web_app), force_reply, reply_to_message_id, deleted,
edit_count, history = versions, buttons = flat labels, button(label)). `fake.messages(chat, from_bot=None,
include_deleted=False)`; `await fake.wait_for(predicate, timeout=5)` -> the most recently sent/edited live
bot message matching; `await fake.next_message(chat, containing=None, timeout=5)` -> the bot's next new
message after the last one it returned for that chat. `chat` is a chat id or a FakeUser. Both raise
TimeoutError listing recent bot messages and errors. `await fake.wait_for_call(method, predicate=None,
timeout=5)` -> the params of the first matching call. `fake.calls` = [(method, params)] in order
(`fake.call_times`: when each was received, by the fake's `clock`);
`fake.errors` = every 4xx/5xx sent as ErrorReply(method, status, description, params, injected);
`fake.unexpected_errors` = those not injected; `fake.commands` = [(command, description)] from
setMyCommands (default scope); `fake.command_sets` for other scopes; `fake.webhook` = last setWebhook.

Methods: getMe, getUpdates (long poll; offset, limit, timeout, allowed_updates; stopping the fake releases
a waiting one; a newer getUpdates ends it with 409 "Conflict: terminated by other getUpdates request", sent
only to a client still connected), setWebhook, deleteWebhook, getWebhookInfo, sendMessage,
editMessageText, editMessageReplyMarkup, deleteMessage, answerCallbackQuery, sendChatAction,
set/get/deleteMyCommands, close, logOut. Others: 404 "Not Found: method not found". Params are read from
form-urlencoded (per-field JSON, except plain-string fields such as `text`), multipart, or JSON bodies.

Telegram's rules enforced (400 "Bad Request: ..." unless noted): text 1..4096 chars after parsing
("message text is empty", "message is too long"); parse_mode HTML with Telegram's tags only, balanced,
entities only &lt; &gt; &amp; &quot; and numeric ("can't parse entities: ..."; stricter than Telegram about a
bare "&"); MarkdownV2 is not implemented (400 saying so); inline keyboards: callback_data 1..64 bytes
("BUTTON_DATA_INVALID"), url http(s) with a dotted host or tg:// ("BUTTON_URL_INVALID", "... Unsupported URL
protocol"), web_app {url: https://...} only in private chats ("BUTTON_TYPE_INVALID"), exactly one action ("... Text buttons are unallowed in the inline keyboard"),
≤100 buttons and ≤8 per row ("reply markup is too long"), non-empty text ("BUTTON_TEXT_INVALID"); edits:
"message is not modified: ...", "message to edit not found", "message can't be edited" (a user's);
"chat not found"; "message to be replied not found"; answerCallbackQuery twice, unknown or after press()
timed out: "query is too old and response timeout expired or query ID is invalid"; its text > 200:
"MESSAGE_TOO_LONG"; getUpdates while a webhook is set: 409 Conflict; wrong token: 401.

Faults: `fake.fail_next(method, status=429, description=None, retry_after=None, times=1, hang=False)`
(429 carries parameters.retry_after, default 1; status 500/502 etc. get HTTP phrases; `hang` holds the
call until the next call of that method or shutdown, so the client times out; a held call the client gives up
on (closes its connection) ends then, is listed in `fake.abandoned` as (method, params), and
`await fake.wait_for_abandoned(method, timeout=10)` waits for one). `FakeTelegram(rate_limit=True
or RateLimits(...), clock=...)` answers sendMessage/editMessageText with 429 + retry_after past ~30/s overall,
5 per 5 s per chat, 20/min per group; `fake.flood.accepted` lists when each message it let through was sent, `fake.flood.tried` each one sent. Webhooks: `await fake.post_update_to(url, update, secret_token=...)`
-> HTTP status; `fake.deliver_via_webhook(url, secret_token=..., retry=False)` sends users' updates there
instead (with `retry`, as Telegram does: in order, each delivered again until answered 2xx; attempts listed in
`fake.webhook_attempts` as (update_id, status or None); with `retry` and `connections=N`, up to N at once,
each retried on its own, in no order, as Telegram's `max_connections`).
PTB 22.8 emits a PTBDeprecationWarning while building RetryAfter unless PTB_TIMEDELTA=true, and pytest here
turns warnings into errors: tests that provoke a 429 must `monkeypatch.setenv("PTB_TIMEDELTA", "true")`.

Not modelled: media, inline mode, reply-keyboard buttons' presses, other button kinds (400 saying so),
Markdown, message_thread_id, the callback answer deadline, Telegram's trimming of surrounding whitespace.
"""

from __future__ import annotations

from .faults import RateLimits
from .model import Button, CallbackAnswer, ErrorReply, Msg, ScriptError, Version
from .server import FakeTelegram
from .user import FakeUser

__all__ = [
    "Button",
    "CallbackAnswer",
    "ErrorReply",
    "FakeTelegram",
    "FakeUser",
    "Msg",
    "RateLimits",
    "ScriptError",
    "Version",
]

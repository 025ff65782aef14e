"""`/start <code>` from an OAuth consent page, and its card's Allow / Deny: a hosted agent asks to act as the
person who taps. Does I/O (database, Telegram).

The grant is bound to the tapper, never to whoever opened the page: the start code puts the request on the card
of the person who sent `/start` (once: a second tap of the same link finds nothing), only when they are one of the
people the config names (as agent tokens are), and only their own Allow decides it. A forwarded link asks its
new holder about their own account, on a card that names the client, where it returns to, and the match code the
page shows; the page's opener never chooses whose grant it is.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from telegram import Update
from telegram.ext import BaseHandler, CallbackQueryHandler, CommandHandler

from bot.errors import StoreUnavailable
from bot.store.grants import Consent
from bot.telegram import callback_data
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.deps import Context
from bot.telegram.render import Screen, callback_button, esc

__all__ = ["GONE", "handlers", "is_consent", "on_decide", "on_start", "render_card"]

GONE: Final = "This sign-in link is unknown, was already used, or has expired. Start again in your app."
ONLY_CONFIGURED: Final = "Agents may act only for the people this bot is configured for."
PRIVATE_ONLY: Final = "Open the sign-in link in a private chat with me."
NOT_YOURS: Final = "This card belongs to the person it was shown to."
UNAVAILABLE: Final = "The database is unavailable just now; try again in a moment."


def render_card(consent: Consent, user_id: int) -> Screen:
    """The consent card: the client (its own words, escaped), where it returns to, how it is identified, the match
    code, and Allow / Deny bound to `user_id`."""
    request = consent.request
    back = urlsplit(str(request["redirect_uri"])).netloc
    identity = (
        f"identified by its document at <b>{esc(urlsplit(consent.client_id).netloc)}</b>"
        if request.get("document")
        else "it registered itself: its name is not verified"
    )
    lines = [
        f"🔐 <b>{esc(consent.client_name)}</b> wants to act as you (all your servers).",
        "It could call every tool you can use here; their questions would come to this chat.",
        f"It returns to <b>{esc(back)}</b>; {identity}.",
        "",
        f"The sign-in page shows the code <b>{esc(consent.match)}</b>. Allow only if it shows this code and you "
        "started this yourself, just now.",
    ]
    rows = [
        [
            callback_button("Allow", Button(Kind.CONSENT, consent.id, 0, Action.YES, user_id).pack()),
            callback_button("Deny", Button(Kind.CONSENT, consent.id, 0, Action.NO, user_id).pack()),
        ]
    ]
    return Screen("\n".join(lines), rows)


def is_consent(data: object) -> bool:
    """For `CallbackQueryHandler(pattern=...)`: a tap on a consent card."""
    button = callback_data.unpack(data) if isinstance(data, str) else None
    return button is not None and button.kind is Kind.CONSENT


async def on_start(update: Update, context: Context) -> None:
    """`/start <code>`: the consent request of that code, on a card for the tapper (when they are configured)."""
    deps = context.deps
    chat, user = update.effective_chat, update.effective_user
    assert chat is not None and user is not None
    grants = deps.grants
    assert grants is not None  # registered only with it
    code = (context.args or [""])[0]
    if chat.type != chat.PRIVATE:
        await deps.surface.send(chat.id, Screen(PRIVATE_ONLY))
        return
    if user.id not in deps.config.telegram.allowed_users:  # before the claim: the link stays usable
        await deps.surface.send(chat.id, Screen(ONLY_CONFIGURED))
        return
    try:
        consent = await grants.claim(code, user.id)
    except StoreUnavailable:
        await deps.surface.send(chat.id, Screen(UNAVAILABLE))
        return
    await deps.surface.send(chat.id, Screen(GONE) if consent is None else render_card(consent, user.id))


async def on_decide(update: Update, context: Context) -> None:
    """**Allow** / **Deny**: the tapper's own request only; the card says what happened."""
    deps = context.deps
    query = update.callback_query
    assert query is not None
    button = callback_data.unpack(query.data)
    user = query.from_user
    grants = deps.grants
    if button is None or button.arg != user.id or grants is None:
        await query.answer(NOT_YOURS, show_alert=True)
        return
    if user.id not in deps.config.telegram.allowed_users:
        await query.answer(ONLY_CONFIGURED, show_alert=True)
        return
    allow = button.action is Action.YES
    try:
        consent = await grants.decide(button.token, user.id, allow)
    except StoreUnavailable:
        await query.answer(UNAVAILABLE, show_alert=True)
        return
    if consent is None:
        text = "This request no longer waits for an answer (answered before, or expired)."
    elif allow:
        text = (
            f"✅ Allowed <b>{esc(consent.client_name)}</b> to act as you. The page in your browser goes on by "
            "itself. It is listed in /agents, where <b>Revoke</b> ends it."
        )
    else:
        text = f"Denied: <b>{esc(consent.client_name)}</b> gets nothing."
    message = query.message
    if message is not None:
        await deps.surface.edit(message.chat.id, message.message_id, Screen(text))
    else:
        await deps.surface.send(user.id, Screen(text))
    await query.answer("Allowed." if consent is not None and allow else "Done.")


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """`/start <code>` (before /start's help) and the card's taps (before the catch-all tap handler)."""
    return [
        CallbackQueryHandler(allowed_only(on_decide), pattern=is_consent),
        CommandHandler("start", allowed_only(on_start), has_args=True),
    ]

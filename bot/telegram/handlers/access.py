"""The gate in front of every handler: deny by default. Anyone not allowed learns their id and nothing else.

The update stops at the gate whatever refusing does: the refusal is sent in a task of its own, so a Bot API
error (the stranger blocked the bot, a deleted message, a 5xx, a timeout) can never let the update on to the
next handler group. Refusals are rationed (`bot.telegram.access.Refusals`): a crowd of strangers cannot use up
a chat's sending budget. Does I/O (the refusals).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from telegram import Update
from telegram.error import TelegramError
from telegram.ext import ApplicationHandlerStop, BaseHandler, TypeHandler

from bot.logs import REFUSED_LOGGER
from bot.telegram.access import Refusals
from bot.telegram.callback_data import is_approval
from bot.telegram.handlers.deps import Context

logger = logging.getLogger(__name__)

REFUSAL_READ_TIMEOUT_S: Final = 2.0
"""A refusal not answered by then is given up: it is not worth a connection held for the default 5 s."""

Handler = Callable[[Update, Context], Awaitable[None]]
H = TypeVar("H", bound=Handler)


def refusal_text(user_id: int) -> str:
    return f"Sorry, this bot is private. Your Telegram user id is {user_id}."


async def gate(update: Update, context: Context) -> None:
    """Stop every update (group -1: before all but the approvers') of anyone not allowed, but an approver's tap."""
    deps = context.deps
    user = update.effective_user
    if user is not None and deps.access.allows(user.id):
        return
    query = update.callback_query  # approvers need not be allowed to use the bot to tap an approval card
    if user is not None and user.id in deps.approvers and query is not None and is_approval(query.data):
        return
    try:
        logging.getLogger(REFUSED_LOGGER).info("refused Telegram user %s", user.id if user else "unknown")
        refusal = _refusal(update, deps.refusals)
        if refusal is not None:
            context.application.create_task(refusal, update=update)
    finally:
        raise ApplicationHandlerStop


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """The gate, for a group of its own before every other handler's but the approvers'."""
    return [TypeHandler(Update, gate)]


def allowed_only(handler: H) -> H:
    """`handler`, doing nothing for anyone not allowed: the gate stops them first; this holds if it did not."""

    @functools.wraps(handler)
    async def checked(update: Update, context: Context) -> None:
        user = update.effective_user
        if user is None or not context.deps.access.allows(user.id):
            logger.warning("update %s from a person not allowed reached a handler; ignored", update.update_id)
            return
        await handler(update, context)

    return checked  # type: ignore[return-value]


def _refusal(update: Update, refusals: Refusals) -> Awaitable[None] | None:
    """The refusal this update deserves, if any and if the ration allows one: a tap gets an alert; a command, or
    any message in a private chat, gets one line. Other messages in groups (chatter) get nothing."""
    user, chat = update.effective_user, update.effective_chat
    if user is None:
        return None
    text = refusal_text(user.id)
    query = update.callback_query
    if query is not None:
        # A stranger's tap keeps its message's chat (bot.telegram.updates); one without a message (inline mode)
        # is rationed per person, in the person's own "chat".
        if not refusals.take(chat.id if chat is not None else user.id, user.id):
            return None
        return _quietly(
            query.get_bot().answer_callback_query(
                query.id, text, show_alert=True, read_timeout=REFUSAL_READ_TIMEOUT_S
            ),
            "tap",
            user.id,
        )
    message = update.message
    if message is None or chat is None:
        return None
    is_command = bool(message.text and message.text.startswith("/"))
    if chat.type != chat.PRIVATE and not is_command:
        return None
    if not refusals.take(chat.id, user.id):
        return None
    return _quietly(
        message.get_bot().send_message(chat.id, text, read_timeout=REFUSAL_READ_TIMEOUT_S),
        "message",
        user.id,
    )


async def _quietly(sending: Awaitable[object], what: str, user_id: int) -> None:
    """Send a refusal; a failure is routine (the stranger blocked the bot, the chat is gone) and only noted."""
    try:
        await sending
    except TelegramError as exc:
        logger.info("the refusal (%s) to user %s failed: %s", what, user_id, exc)

"""`/2fa` and the codes approvers send in their private chat (`bot.telegram.second_factor`). Does I/O.

Registered before the access gate: approvers need not be allowed to use the bot. Only the approvers of rules
with `second_factor` reach them, only in a private chat; a message that is not a code expected of its sender
goes on to the other handlers, and so does a code-like answer to a question waiting for a typed answer (unless
it replies to the code prompt).
"""

from __future__ import annotations

from typing import Final

from telegram import BotCommand, Update
from telegram.ext import (
    ApplicationHandlerStop,
    BaseHandler,
    CommandHandler,
    MessageHandler,
    filters,
)

from bot.config import Config
from bot.telegram.handlers.deps import Context
from bot.telegram.render import Screen

__all__ = ["COMMAND", "HELP_LINE", "code", "enrol", "handlers", "help_lines", "menu"]

COMMAND: Final = BotCommand("2fa", "Approvers: set up your authenticator app for approvals that need a code")
HELP_LINE: Final = (
    "/2fa — for approvers of requests that need a one-time code: set up your authenticator app (once, in a "
    "private chat with me); <code>/2fa new CODE</code> moves it to a new phone"
)


def _coded(config: Config) -> bool:
    return any(rule.second_factor is not None for rule in config.approvals)


def menu(config: Config) -> list[BotCommand]:
    """The command menu's entry for /2fa: only when some approval rule asks for a code."""
    return [COMMAND] if _coded(config) else []


def help_lines(config: Config) -> list[str]:
    """/help's line for /2fa: only when some approval rule asks for a code."""
    return [HELP_LINE] if _coded(config) else []


async def enrol(update: Update, context: Context) -> None:
    """/2fa [new CODE]: set up (or move) an approver's authenticator app."""
    codes = context.deps.codes
    assert codes is not None and update.effective_user is not None  # registered only with codes
    await codes.enrol(update.effective_user, list(context.args or ()))
    raise ApplicationHandlerStop


async def code(update: Update, context: Context) -> None:
    """A message from an approver: the code an approval waits for, or (not one) left to the other handlers."""
    codes = context.deps.codes
    assert codes is not None  # registered only with codes
    user, message = update.effective_user, update.effective_message
    assert user is not None and message is not None
    replied = message.reply_to_message
    chat = message.chat.id
    if replied is not None and codes.surface.card_for_reply(chat, replied.message_id) is not None:
        return  # an answer to a question's card: the forms' handler takes it
    reply = await codes.on_code(
        user,
        message.text or "",
        replied_to=None if replied is None else replied.message_id,
        others_waiting=bool(codes.surface.text_cards(chat, user.id)),
    )
    if reply is None:
        return  # not a code we wait for: the other handlers see it
    await codes.surface.send(user.id, Screen(reply))
    raise ApplicationHandlerStop


def handlers(coded: frozenset[int]) -> list[BaseHandler[Update, Context, None]]:
    """For a group of its own before the access gate's: the approvers of rules asking for a code (`coded`) reach
    these, in their private chat (with codes: `context.deps.codes`)."""
    mine = filters.ChatType.PRIVATE & filters.User(user_id=coded)
    return [
        CommandHandler("2fa", enrol, filters=mine),
        MessageHandler(mine & filters.TEXT & ~filters.COMMAND, code),
    ]

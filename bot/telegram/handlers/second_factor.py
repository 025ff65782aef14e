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
    ContextTypes,
    MessageHandler,
    filters,
)

from bot.config import Config
from bot.telegram.render import Screen
from bot.telegram.second_factor import SecondFactors

__all__ = ["COMMAND", "HELP_LINE", "handlers", "help_lines", "menu"]

Context = ContextTypes.DEFAULT_TYPE

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


def handlers(codes: SecondFactors, approvers: frozenset[int]) -> list[BaseHandler]:  # type: ignore[type-arg]
    """For a group of its own before the access gate's."""
    mine = filters.ChatType.PRIVATE & filters.User(user_id=approvers)

    async def enrol(update: Update, context: Context) -> None:
        assert update.effective_user is not None
        await codes.enrol(update.effective_user, list(context.args or ()))
        raise ApplicationHandlerStop

    async def code(update: Update, context: Context) -> None:
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

    return [
        CommandHandler("2fa", enrol, filters=mine),
        MessageHandler(mine & filters.TEXT & ~filters.COMMAND, code),
    ]

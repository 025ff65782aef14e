"""Deny by default: only allowed users get past this handler; anyone else learns their id and nothing else."""

from __future__ import annotations

import logging

from telegram import Update
from telegram.ext import ApplicationHandlerStop, BaseHandler, ContextTypes, TypeHandler

from bot.telegram.handlers.deps import Deps


def is_allowed(deps: Deps, user_id: int) -> bool:
    return deps.telegram.allow_everyone or user_id in deps.telegram.allowed_users


def handlers(deps: Deps) -> list[BaseHandler]:  # type: ignore[type-arg]
    async def gate(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Runs first (group -1) for every update."""
        user = update.effective_user
        if user is not None and is_allowed(deps, user.id):
            return
        logging.getLogger("bot.refused").info("refused Telegram user %s", user.id if user else "unknown")
        refusal = f"Sorry, this bot is private. Your Telegram user id is {user.id}." if user else None
        if update.callback_query is not None:
            await update.callback_query.answer(refusal, show_alert=True)
        elif (update.message is not None and refusal and update.message.chat.type == "private") or (
            update.message is not None
            and refusal
            and update.message.text
            and update.message.text.startswith("/")
        ):
            await update.message.reply_text(refusal)
        raise ApplicationHandlerStop

    return [TypeHandler(Update, gate)]

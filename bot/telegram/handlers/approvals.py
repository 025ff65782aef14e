"""Taps on approval cards, and the names approval cards show. Does I/O (through `TelegramApprovals`)."""

from __future__ import annotations

from telegram import Update
from telegram.ext import BaseHandler, CallbackQueryHandler, ContextTypes, TypeHandler

from bot.telegram import callback_data
from bot.telegram.access import Access
from bot.telegram.approvals import GONE, TelegramApprovals

__all__ = ["handlers", "name_handlers"]

Context = ContextTypes.DEFAULT_TYPE


def name_handlers(
    approvals: TelegramApprovals, access: Access, approvers: frozenset[int]
) -> list[BaseHandler]:  # type: ignore[type-arg]
    """For a group before the access gate: remember the first names of the people cards may name."""

    async def remember(update: Update, context: Context) -> None:
        user = update.effective_user
        if user is not None and (access.allows(user.id) or user.id in approvers):
            await approvals.seen(user)

    return [TypeHandler(Update, remember)]


def handlers(approvals: TelegramApprovals) -> list[BaseHandler]:  # type: ignore[type-arg]
    """Approve / Reject; must come before the other tap handlers of its group."""

    async def on_tap(update: Update, context: Context) -> None:
        query = update.callback_query
        assert query is not None
        button = callback_data.unpack(query.data)
        if button is None:
            await query.answer(GONE, show_alert=True)
            return
        message = query.message
        card = None if message is None else (message.chat.id, message.message_id)
        tap = await approvals.on_tap(query.from_user, button, card)
        await query.answer(tap.text, show_alert=tap.alert)

    return [CallbackQueryHandler(on_tap, pattern=callback_data.is_approval)]

"""Taps on approval cards, and the names approval cards show. Does I/O (through `TelegramApprovals`).

Registered only with `[[approvals]]` (and a database): then `context.deps.approvals` is there.
"""

from __future__ import annotations

from telegram import Update
from telegram.ext import BaseHandler, CallbackQueryHandler, TypeHandler

from bot.telegram import callback_data
from bot.telegram.approvals import GONE
from bot.telegram.handlers.deps import Context

__all__ = ["handlers", "name_handlers", "on_tap", "remember"]


async def remember(update: Update, context: Context) -> None:
    """Remember the first name of a person approval cards may name (someone allowed, or an approver)."""
    deps = context.deps
    assert deps.approvals is not None  # registered only with approvals
    user = update.effective_user
    if user is not None and (deps.access.allows(user.id) or user.id in deps.approvers):
        await deps.approvals.seen(user)


async def on_tap(update: Update, context: Context) -> None:
    """Approve / Reject on an approval card."""
    approvals = context.deps.approvals
    assert approvals is not None  # registered only with approvals
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


def name_handlers() -> list[BaseHandler[Update, Context, None]]:
    """For a group before the access gate: remember the first names of the people cards may name."""
    return [TypeHandler(Update, remember)]


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """Approve / Reject; must come before the other tap handlers of its group."""
    return [CallbackQueryHandler(on_tap, pattern=callback_data.is_approval)]

"""Taps on cards and typed answers: decode -> decide (mapping, via the surface) -> render -> send. Does I/O."""

from __future__ import annotations

from telegram import CallbackQuery, Update
from telegram.ext import BaseHandler, CallbackQueryHandler, MessageHandler, filters

from bot.telegram import callback_data
from bot.telegram.callback_data import Button, Kind
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.commands import start_tool
from bot.telegram.handlers.deps import Context
from bot.telegram.render import Screen
from bot.telegram.surface import EXPIRED

__all__ = ["handlers", "on_message", "on_tap"]


async def on_tap(update: Update, context: Context) -> None:
    """Every inline button of the bot."""
    query = update.callback_query
    assert query is not None
    button = callback_data.unpack(query.data)
    if button is None:
        await query.answer(EXPIRED, show_alert=True)
    elif button.kind is Kind.TOOL:
        await _tool_tap(update, context, query, button)
    elif button.kind is Kind.RERUN:
        await _rerun_tap(update, context, query, button)
    else:
        reply = await context.deps.surface.on_button(query.from_user, button)
        await query.answer(reply.text, show_alert=reply.alert)


async def _tool_tap(update: Update, context: Context, query: CallbackQuery, button: Button) -> None:
    """A tool's button under /tools: its call, for the person who asked for the list."""
    entry = await context.deps.tool_buttons.get(button.token, button.arg or 0)
    if entry is None:
        await query.answer(EXPIRED, show_alert=True)
        return
    server, tool, owner = entry
    if owner.user_id != query.from_user.id:
        await query.answer("These buttons belong to whoever asked for the list.", show_alert=True)
        return
    await query.answer(f"Calling {tool}…")
    await start_tool(context, update, server, tool, {}, owner.chat_id)


async def _rerun_tap(update: Update, context: Context, query: CallbackQuery, button: Button) -> None:
    """**Run again** under a result: the same call, for the person who started it."""
    rerun = context.deps.runner.rerun(button.token)
    if rerun is None:
        await query.answer(EXPIRED, show_alert=True)
        return
    server, tool, args, owner = rerun
    if owner.user_id != query.from_user.id:
        await query.answer("Only the person who started the call can run it again.", show_alert=True)
        return
    await query.answer(f"Running {tool} again…")
    await start_tool(context, update, server, tool, dict(args), owner.chat_id)


async def on_message(update: Update, context: Context) -> None:
    """A typed answer: a reply to a card, or the one text question pending in this chat."""
    surface = context.deps.surface
    message = update.message
    if message is None or message.text is None or message.from_user is None:
        return
    chat_id = message.chat.id
    if message.reply_to_message is not None:
        card = surface.card_for_reply(chat_id, message.reply_to_message.message_id)
        if card is not None:
            await surface.on_text(card, message.from_user, message.text, message.message_id)
            return
    cards = surface.text_cards(chat_id, message.from_user.id)
    if len(cards) == 1:
        await surface.on_text(cards[0], message.from_user, message.text, message.message_id)
    elif len(cards) > 1:
        await surface.send(
            chat_id,
            Screen("Several questions are waiting for you here; reply to the one you mean."),
            reply_to=message.message_id,
        )
    elif message.chat.type == "private" and surface.waiting_for(chat_id, message.from_user.id):
        await surface.send(
            chat_id,
            Screen("That question is answered with its buttons: tap one of the buttons above."),
            reply_to=message.message_id,
        )
    elif message.chat.type == "private":
        await surface.send(chat_id, Screen("Nothing is waiting for an answer. /help lists the commands."))


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """Every tap and every typed text that is not a command; after the feature handlers of their group."""
    # No `block=False`: with concurrent updates (bot.telegram.app) each update already runs in its own task, and a
    # tap or a reply only edits a card; tool calls run in tasks of their own (`start_tool`).
    return [
        CallbackQueryHandler(allowed_only(on_tap)),
        MessageHandler(filters.TEXT & ~filters.COMMAND, allowed_only(on_message)),
    ]

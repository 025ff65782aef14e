"""Taps on cards and typed answers: decode -> decide (mapping, via the surface) -> render -> send."""

from __future__ import annotations

from telegram import Update
from telegram.ext import BaseHandler, CallbackQueryHandler, ContextTypes, MessageHandler, filters

from bot.telegram import callback_data
from bot.telegram.callback_data import Kind
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.commands import start_tool
from bot.telegram.handlers.deps import Deps
from bot.telegram.render import Screen
from bot.telegram.surface import EXPIRED


def handlers(deps: Deps) -> list[BaseHandler]:  # type: ignore[type-arg]  # noqa: C901 - the nested handlers' branches count toward it
    async def on_tap(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """Every inline button of the bot."""
        query = update.callback_query
        assert query is not None
        button = callback_data.unpack(query.data)
        if button is None:
            await query.answer(EXPIRED, show_alert=True)
            return
        if button.kind is Kind.TOOL:
            entry = await deps.tool_buttons.get(button.token, button.arg or 0)
            if entry is None:
                await query.answer(EXPIRED, show_alert=True)
                return
            server, tool, owner = entry
            if owner.user_id != query.from_user.id:
                await query.answer("These buttons belong to whoever asked for the list.", show_alert=True)
                return
            await query.answer(f"Calling {tool}…")
            await start_tool(deps, context, update, server, tool, {}, owner.chat_id)
            return
        if button.kind is Kind.RERUN:
            rerun = deps.runner.rerun(button.token)
            if rerun is None:
                await query.answer(EXPIRED, show_alert=True)
                return
            server, tool, args, owner = rerun
            if owner.user_id != query.from_user.id:
                await query.answer("Only the person who started the call can run it again.", show_alert=True)
                return
            await query.answer(f"Running {tool} again…")
            await start_tool(deps, context, update, server, tool, dict(args), owner.chat_id)
            return
        reply = await deps.surface.on_button(query.from_user, button)
        await query.answer(reply.text, show_alert=reply.alert)

    async def on_message(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        """A typed answer: a reply to a card, or the one text question pending in this chat."""
        message = update.message
        if message is None or message.text is None or message.from_user is None:
            return
        chat_id = message.chat.id
        if message.reply_to_message is not None:
            card = deps.surface.card_for_reply(chat_id, message.reply_to_message.message_id)
            if card is not None:
                await deps.surface.on_text(card, message.from_user, message.text, message.message_id)
                return
        cards = deps.surface.text_cards(chat_id, message.from_user.id)
        if len(cards) == 1:
            await deps.surface.on_text(cards[0], message.from_user, message.text, message.message_id)
        elif len(cards) > 1:
            await deps.surface.send(
                chat_id,
                Screen("Several questions are waiting for you here; reply to the one you mean."),
                reply_to=message.message_id,
            )
        elif message.chat.type == "private" and deps.surface.waiting_for(chat_id, message.from_user.id):
            await deps.surface.send(
                chat_id,
                Screen("That question is answered with its buttons: tap one of the buttons above."),
                reply_to=message.message_id,
            )
        elif message.chat.type == "private":
            await deps.surface.send(
                chat_id, Screen("Nothing is waiting for an answer. /help lists the commands.")
            )

    # No `block=False`: with concurrent updates (bot.telegram.app) each update already runs in its own task, and a tap or
    # a reply only edits a card; tool calls run in tasks of their own (`start_tool`).
    return [
        CallbackQueryHandler(allowed_only(deps.access, on_tap)),
        MessageHandler(filters.TEXT & ~filters.COMMAND, allowed_only(deps.access, on_message)),
    ]

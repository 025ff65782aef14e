"""The single error handler: log with the traceback, never the token (the log filter redacts it)."""

from __future__ import annotations

import logging

from telegram import Update

from bot.telegram.handlers.deps import Context

logger = logging.getLogger(__name__)


async def on_error(update: object, context: Context) -> None:
    """Any handler's failure: logged with its traceback and the update's id."""
    update_id = update.update_id if isinstance(update, Update) else None
    logger.error("error while handling update %s", update_id, exc_info=context.error)

"""/audit: the last events of the audit log, for the ids in `[telegram] admins`. Does I/O (database, Telegram)."""

from __future__ import annotations

import json
from typing import Final

from telegram import Update
from telegram.ext import BaseHandler, CommandHandler

from bot.store import AuditRow
from bot.telegram.handlers.deps import Context
from bot.telegram.render import Screen, esc, fit

LAST: Final = 20
"""How many events /audit shows."""
NOT_ADMIN: Final = "Only the bot's admins may read the audit log."
DETAIL_CLIP: Final = 120


def render_rows(rows: list[AuditRow]) -> Screen:
    """The events as one message, oldest first; server text escaped."""
    if not rows:
        return Screen("🧾 The audit log is empty.")
    lines = [f"🧾 <b>Audit log</b>: the last {len(rows)} events"]
    for row in rows:
        where = " · ".join(part for part in (row.server, row.tool) if part)
        head = f"<code>#{row.seq}</code> {esc(row.at[:19].replace('T', ' '))} <b>{esc(row.event)}</b>"
        who = f" user {row.user_id}" if row.user_id is not None else ""
        detail = json.loads(row.detail)
        lines.append(
            f"{head}{who}"
            + (f" {esc(where, 80)}" if where else "")
            + (f" <code>{esc(row.request_id, 40)}</code>" if row.request_id else "")
            + (f"\n   {esc(json.dumps(detail, ensure_ascii=False), DETAIL_CLIP)}" if detail else "")
        )
    return Screen(fit(lines))


async def audit(update: Update, context: Context) -> None:
    """/audit: admins get the last events; anyone else one line saying it is for admins."""
    deps = context.deps
    assert deps.audit is not None  # registered only with a database
    assert update.effective_chat is not None and update.effective_user is not None
    chat_id = update.effective_chat.id
    if update.effective_user.id not in deps.config.telegram.admins:
        await deps.surface.send(chat_id, Screen(NOT_ADMIN))
        return
    await deps.surface.send(chat_id, render_rows(await deps.audit.rows(last=LAST)))


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """/audit (with a database: then `context.deps.audit` is there)."""
    return [CommandHandler("audit", audit)]

"""Chat side of OAuth sign-in: /accounts, /logout <server>, and the pasted callback address. Does I/O.

The sign-in card itself is an ordinary URL prompt (`bot.servers.oauth` asks it through the registry); this
module only lists and ends a person's sign-ins, and takes the address a browser could not open (loopback
redirect) from the person it belongs to.
"""

from __future__ import annotations

import datetime as dt

from telegram import Update
from telegram.ext import BaseHandler, CommandHandler, MessageHandler, filters

from bot.servers.oauth import CALLBACK_PATH
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.deps import Context
from bot.telegram.render import NAME_CLIP, TEXT_CLIP, Screen, esc

__all__ = ["accounts", "handlers", "logout", "pasted"]


async def accounts(update: Update, context: Context) -> None:
    """/accounts: the servers this person is signed in to (server, issuer, expiry; no token material)."""
    deps = context.deps
    assert deps.signins is not None and update.effective_user is not None  # registered only with sign-ins
    found = await deps.signins.accounts(update.effective_user.id)
    if not found:
        await _reply(context, update, "You are not signed in to any server.")
        return
    lines = ["<b>Your sign-ins</b>"]
    for account in found:
        expiry = "no expiry"
        if account.expires_at is not None:
            at = dt.datetime.fromtimestamp(account.expires_at, dt.UTC)
            expiry = "access renewed as needed; current one expires " + at.strftime("%Y-%m-%d %H:%M UTC")
        lines.append(
            f"• <b>{esc(account.server, NAME_CLIP)}</b> via {esc(account.issuer or 'unknown issuer', 200)} — {expiry}"
        )
    lines.append("\n/logout &lt;server&gt; signs you out.")
    await _reply(context, update, "\n".join(lines))


async def logout(update: Update, context: Context) -> None:
    """/logout <server>: delete this person's tokens (revoked where offered) and close their sessions."""
    deps = context.deps
    assert deps.signins is not None and update.effective_user is not None  # registered only with sign-ins
    user_id = update.effective_user.id
    name = context.args[0] if context.args else ""
    server = deps.hub.config.server(name)
    if server is None or server.oauth is None:
        known = ", ".join(s.name for s in deps.hub.config.servers if s.oauth is not None) or "none"
        await _reply(
            context, update, f"Usage: /logout &lt;server&gt; (servers with sign-in: {esc(known, TEXT_CLIP)})"
        )
        return
    signed_out = await deps.signins.logout(user_id, server)
    deps.hub.pool.close_person(server.name, user_id)
    await _reply(
        context,
        update,
        f"Signed out of <b>{esc(server.name, NAME_CLIP)}</b>."
        if signed_out
        else f"You were not signed in to <b>{esc(server.name, NAME_CLIP)}</b>.",
    )


async def pasted(update: Update, context: Context) -> None:
    """The address a browser could not load after signing in (loopback redirect), pasted by its person."""
    deps = context.deps
    assert deps.signins is not None  # registered only with sign-ins
    assert update.effective_user is not None and update.effective_message is not None
    delivery = deps.signins.deliver_pasted(update.effective_user.id, update.effective_message.text or "")
    if not delivery.ok:
        await _reply(context, update, esc(delivery.reason, TEXT_CLIP))


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """/accounts, /logout and the pasted address (with sign-ins: then `context.deps.signins` is there)."""
    return [
        CommandHandler("accounts", allowed_only(accounts)),
        CommandHandler("logout", allowed_only(logout)),
        MessageHandler(
            filters.ChatType.PRIVATE & filters.TEXT & ~filters.COMMAND & filters.Regex(CALLBACK_PATH + r"\?"),
            allowed_only(pasted),
        ),
    ]


async def _reply(context: Context, update: Update, text: str) -> None:
    assert update.effective_chat is not None
    await context.deps.surface.send(update.effective_chat.id, Screen(text))

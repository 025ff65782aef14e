"""`[telegram]`: the bot token, who may use the bot, and how updates arrive (polling or a webhook). No I/O.

The token's problems are kept on the model (`token_problem`) rather than raised: only the Telegram bot
needs a token, and `console` and `check` must run without one (`Config.require_telegram` raises them).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final

from bot.config import read
from bot.config._table import (
    EXPAND,
    Boolean,
    Context,
    Found,
    Secret,
    Table,
    UserIds,
    as_secret,
    checked,
    optional,
)

WEBHOOK_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
"""Telegram's rule for `setWebhook(secret_token=...)`."""
_BOT_TOKEN: Final = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
TOKEN_REQUIRED: Final = 'telegram.token: required to run the Telegram bot (token = "${TELEGRAM_BOT_TOKEN}")'
_MOVED: Final = (
    "replaced by [web] (listen, port, public_url) and telegram.webhook_secret; "
    "the webhook is now <public_url>/telegram"
)


class TelegramMode(enum.StrEnum):
    """How updates arrive from Telegram."""

    POLLING = "polling"
    WEBHOOK = "webhook"


def _bot_token(value: object) -> str:
    token = read.string(value)
    if not token:
        raise read.Invalid("must not be empty")
    if not _BOT_TOKEN.fullmatch(token):
        raise read.Invalid("not a bot token (expected <digits>:<characters>, as @BotFather gives it)")
    return token


class TelegramConfig(Table):
    """`[telegram]`. Only the Telegram bot needs a token, so it may be absent (see `token_problem`)."""

    _hidden = frozenset({"token_problem"})
    token: Annotated[Secret | None, checked(optional(as_secret(_bot_token)))] = None
    """The bot token; None when missing or unusable."""
    api_base_url: Annotated[str, checked(read.http_url), EXPAND] = "https://api.telegram.org/bot"
    """Bot API base; PTB appends the token. Point it at a self-hosted Bot API server or a test fake."""
    allowed_users: UserIds = frozenset()
    """Telegram user ids that may use the bot; empty means nobody (unless `allow_everyone`)."""
    allow_everyone: Boolean = False
    """Let every Telegram user in (a public demo)."""
    mode: Annotated[TelegramMode, checked(read.one_of(TelegramMode)), EXPAND] = TelegramMode.POLLING
    """Long-polling or webhook (which needs `[web] public_url` and `webhook_secret`)."""
    webhook_secret: Annotated[
        Secret | None,
        checked(
            optional(
                as_secret(read.matching(WEBHOOK_SECRET, "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"))
            )
        ),
        EXPAND,
    ] = None
    """Sent back by Telegram in `X-Telegram-Bot-Api-Secret-Token`; required in webhook mode."""
    admins: UserIds = frozenset()
    """Telegram user ids that may read the audit log in chat (`/audit`)."""
    token_problem: str | None = None
    """Why a given token is unusable, as the problem line `Config.require_telegram` raises."""

    @classmethod
    def _prepare(cls, data: dict[str, Any], context: Context) -> Found:
        found: Found = []
        if "webhook" in data:
            del data["webhook"]
            found.append((("webhook",), _MOVED))
        if "token_problem" in data:
            del data["token_problem"]
            found.append((("token_problem",), "unknown key"))
        # The token's problems wait for `require_telegram`: `console` and `check` must run without it.
        if data.get("token") is not None:
            try:
                data["token"] = Secret(_bot_token(read.expand_all(data["token"], context["environ"])))
            except read.Invalid as exc:
                data["token"], data["token_problem"] = None, f"telegram.token: {exc.reason}"
        return found

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        if v.mode is TelegramMode.WEBHOOK and data.get("webhook_secret") is None:
            return [(("webhook_secret",), "required when telegram.mode is webhook")]
        return []

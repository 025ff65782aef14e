"""`[web]`, `[miniapp]` and `[gateway]`: the bot's one HTTP endpoint and what it serves beside the webhook
(the Mini App's forms, the MCP gateway for agents). No I/O.

Rules between these tables and `[telegram]` (webhook mode needs a public https URL; the gateway needs one)
belong to the whole document: `bot.config.model.Config`.
"""

from __future__ import annotations

from typing import Annotated, Final
from urllib.parse import urlsplit

from bot.config import read
from bot.config._table import EXPAND, Boolean, Limit, Positive, PositiveInt, Table, Text, checked, optional

WEBHOOK_PORTS: Final = frozenset({80, 88, 443, 8443})
"""The only ports Telegram delivers webhooks to."""
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "::1"})
"""The hosts an `http://` `[web] public_url` may name: this machine only."""
WEBHOOK_PATH: Final = "/telegram"
"""Where the webhook lives, under `[web] public_url` and on the local endpoint alike."""


def _public_url(value: object) -> str:
    url = read.http_url(value)
    parts = urlsplit(url)
    if parts.scheme != "https" and not is_loopback_url(url):
        raise read.Invalid(
            "must be an https:// URL (Telegram and browsers reach the bot over TLS); http:// only on this "
            "machine (127.0.0.1, localhost or [::1]), to try the gateway"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        # The reverse proxy forwards paths unchanged, so the endpoint's routes are the site's root.
        raise read.Invalid("must be the site's root, https://host or https://host:port (no path)")
    return url.rstrip("/")


def is_loopback_url(url: str) -> bool:
    """Whether `url` is plain http on this machine (as OAuth allows loopback redirects): a `public_url` for
    trying agents out locally, which neither Telegram nor a phone can reach."""
    parts = urlsplit(url)
    return parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS


class WebConfig(Table):
    """`[web]`: the bot's one HTTP endpoint (webhook, health, metrics), usually behind a TLS reverse proxy."""

    listen: Text = "127.0.0.1"
    """Local address to bind."""
    port: Annotated[int, checked(read.port), EXPAND] = 8080
    """Local port to bind."""
    public_url: Annotated[str | None, checked(optional(_public_url)), EXPAND] = None
    """What Telegram and browsers reach (`https://host[:port]`); the proxy forwards every path unchanged.
    Required in webhook mode: the webhook is `<public_url>/telegram`. `http://127.0.0.1:PORT` (localhost,
    [::1]) is allowed for trying the gateway on this machine (a warning at start)."""

    @property
    def local_only(self) -> bool:
        """`public_url` is plain http on this machine (for trying the gateway): no webhook, no Mini App."""
        return self.public_url is not None and is_loopback_url(self.public_url)

    @property
    def webhook_url(self) -> str | None:
        """`<public_url>/telegram`, when there is a public URL."""
        return None if self.public_url is None else self.public_url.rstrip("/") + WEBHOOK_PATH


class MiniAppConfig(Table):
    """`[miniapp]`: long forms also open as a Telegram Mini App (private chats, with `[web] public_url`)."""

    enabled: Boolean = True
    """Offer the **Open form** button at all (it needs `[web] public_url` too)."""
    min_fields: PositiveInt = 3
    """A form with at least this many fields gets the button."""
    dates: Boolean = True
    """A form with any date or date-time field gets the button."""
    many_options: PositiveInt = 8
    """A form with a multi-select of more than this many options gets the button."""
    max_age_s: Positive = 900.0
    """How old a page's signed launch data (`initData`'s `auth_date`) may be when the page sends it."""


class GatewayConfig(Table):
    """`[gateway]`: agents call tools as a person through `<public_url>/mcp` (needs `[web] public_url`)."""

    enabled: Boolean = False
    """Serve MCP to agents at `<public_url>/mcp`; people make agent tokens with `/agents new <name>`."""
    token_days: Limit = 0
    """An agent token stops working this many days after it was made; 0 means it lasts until revoked."""
    keepalive_s: Positive = 15.0
    """While an agent's call waits for the person, a progress notification goes to the agent this often."""
    sessions_per_token: Limit = 8
    """2025-11-25 sessions one agent token may hold open at once (2026-07-28 has none); 0 means no limit."""
    oauth: Boolean = True
    """Hosted agents (claude.ai, ChatGPT) may sign in with OAuth at `<public_url>/mcp`; the person allows each
    one on a card in their private chat."""

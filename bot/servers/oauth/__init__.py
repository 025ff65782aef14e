"""Per-person OAuth sign-in to remote MCP servers, on the SDK's own `OAuthClientProvider`. Async, does I/O.

    SignInFailed          the person did not finish signing in (cancelled, declined, expired); ends the connect

One provider per (Telegram user, server), kept for the life of the process, its `TokenStorage` over the
`SignInBook` the host hands in (`bot.core`; the store's is `bot.store.tokens`, sealed). The parts:

    service    `SignIns`: the sign-in card, the wait for the browser's return, logout (and revocation)
    account    one person's provider on one server, and the `httpx2.Auth` that watches its flow
    storage    the SDK's `TokenStorage` over the book, with the expiry the SDK does not keep
    sdk        where the SDK is met: the provider's constructor, discovery with its helpers, the few reaches
    pending    a sign-in waiting for its browser, and what became of the browser's return
    naming     how the bot names itself: redirect URI, its client id document, a pre-registered client
"""

from bot.servers.oauth.naming import (
    CALLBACK_PATH,
    CLIENT_METADATA_PATH,
    client_metadata_document,
    client_metadata_url_of,
    loopback_redirect_uri,
    redirect_uri_of,
)
from bot.servers.oauth.pending import Delivery
from bot.servers.oauth.service import SignInAudit, SignIns, sign_ins
from bot.servers.oauth.storage import REFRESH_MARGIN_S
from bot.servers.signin_errors import SignInFailed

__all__ = [
    "CALLBACK_PATH",
    "CLIENT_METADATA_PATH",
    "REFRESH_MARGIN_S",
    "Delivery",
    "SignInAudit",
    "SignInFailed",
    "SignIns",
    "client_metadata_document",
    "client_metadata_url_of",
    "loopback_redirect_uri",
    "redirect_uri_of",
    "sign_ins",
]

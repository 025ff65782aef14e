"""A sign-in card out and waiting for its browser, and what became of the browser's return. No I/O.

`state` is single use, bound to the person, and expires with the card; the SDK checks it again, with PKCE S256,
`iss` and `resource`. The browser's page (and the card) say "Signed in" only once the code has been exchanged
for tokens; otherwise they say what failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, urlsplit

import anyio
from mcp.shared.auth import AuthorizationCodeResult, OAuthMetadata

from bot.core import Prompt

__all__ = ["EXCHANGE_WAIT_S", "Delivery", "Pending", "callback_params", "query_of", "settle"]

EXCHANGE_WAIT_S: Final = 30.0
"""How long the callback page waits for the code's exchange before saying Telegram will tell."""
ERROR_CLIP: Final = 100
"""Characters of an authorization server's `error` shown to the person."""


@dataclass(eq=False, slots=True)
class Pending:
    """A sign-in card out, waiting for the browser to come back with `state`."""

    state: str
    user_id: int
    server: str
    prompt: Prompt
    deadline: float
    issuer: str | None
    """The authorization server the answer must name (RFC 9207), when known."""
    metadata: OAuthMetadata | None
    done: anyio.Event = field(default_factory=anyio.Event)
    result: AuthorizationCodeResult | None = None
    failure: str | None = None
    consented: bool = False
    """The card showed the link (it is settled once the exchange is over)."""
    exchanged: anyio.Event = field(default_factory=anyio.Event)
    """The code was exchanged for tokens, or that failed (`exchange_failure`)."""
    exchange_failure: str | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of a browser's return (or a pasted address): `ok`, or the reason it was refused."""

    ok: bool
    reason: str = ""
    server: str | None = None
    pending: Pending | None = field(default=None, repr=False, compare=False)
    """The sign-in the code went to (its exchange is still to come)."""

    async def exchanged(self, wait_s: float = EXCHANGE_WAIT_S) -> Delivery:
        """A delivered code once exchanged for tokens: ok, or refused with what failed. Still running after
        `wait_s`: not ok, with a reason saying so (Telegram tells the outcome)."""
        pending = self.pending
        if not self.ok or pending is None:
            return self
        with anyio.move_on_after(wait_s):
            await pending.exchanged.wait()
        server = self.server or pending.server
        if not pending.exchanged.is_set():
            return Delivery(
                False, f"Signing in to {server} is taking long; Telegram will tell you how it went.", server
            )
        if pending.exchange_failure is not None:
            return Delivery(False, f"Sign-in to {server} {pending.exchange_failure}.", server)
        return Delivery(True, server=server)


def settle(pending: Pending, params: dict[str, str]) -> Delivery:
    """The browser's answer for `pending` (its `state` already matched): the code, or why it is refused."""
    if "iss" in params and pending.issuer is not None and params["iss"] != pending.issuer:
        # RFC 9207: a response naming another issuer is a mix-up attack; the SDK would refuse it too.
        pending.failure = "was refused: the answer came from another authorization server"
    elif (
        "iss" not in params
        and pending.metadata is not None
        and pending.metadata.authorization_response_iss_parameter_supported
    ):
        pending.failure = "was refused: the answer did not name its authorization server"
    elif "error" in params:
        pending.failure = "was refused by the server" + (
            f" ({params['error'][:ERROR_CLIP]})" if params["error"].isprintable() else ""
        )
    elif not params.get("code"):
        pending.failure = "came back without an authorization code"
    else:
        pending.result = AuthorizationCodeResult(
            code=params["code"], state=params["state"], iss=params.get("iss")
        )
    pending.done.set()
    if pending.failure is not None:
        return Delivery(False, f"Sign-in to {pending.server} {pending.failure}.", pending.server)
    return Delivery(True, server=pending.server, pending=pending)


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def callback_params(text: str, redirect_uri: str) -> dict[str, str] | None:
    """The query of a pasted address, if it is the redirect URI (same scheme, host, port and path)."""
    if any(c.isspace() for c in text):
        return None
    try:
        got, want = urlsplit(text), urlsplit(redirect_uri)
        same = (got.scheme, got.hostname, got.port, got.path) == (
            want.scheme,
            want.hostname,
            want.port,
            want.path,
        )
    except ValueError:
        return None
    return query_of(text) if same else None

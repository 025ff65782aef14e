"""The SDK's `TokenStorage` for one person on one server, over the `SignInBook` the host hands in. Async, does
I/O (through the book).

The SDK keeps no expiry with stored tokens: a provider rebuilt after a restart would send a stale token and
answer the 401 with a whole new sign-in. The book keeps the expiry beside the tokens, and a token loaded within
`REFRESH_MARGIN_S` of it is handed over without its access token, so the provider refreshes it first (through
the public `TokenStorage` alone). A token the provider holds in the process is marked due before each request
(`due`, then `sdk.refresh_first`). The SDK has one expiry for "refresh it" and "send it", so the mark is made per
request, not kept: a token living less than the margin is refreshed before every request.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken
from pydantic import ValidationError

from bot.config import ServerConfig
from bot.core import SignInBook
from bot.servers.oauth.naming import client_info_of, preregistered_client, token_endpoint_auth_method
from bot.servers.oauth.sdk import HTTP_TIMEOUT, discover_metadata

__all__ = ["REFRESH_MARGIN_S", "AccountStorage"]

REFRESH_MARGIN_S: Final = 60.0
"""A token this close to its expiry is refreshed before it is used."""


class AccountStorage:
    """One person's tokens and client registration for one server, as the SDK's provider keeps them."""

    def __init__(
        self,
        book: SignInBook,
        server: ServerConfig,
        user_id: int,
        redirect_uri: str,
        *,
        issuer: Callable[[], str | None],
        metadata: Callable[[], OAuthMetadata | None],
        saved: Callable[[], Awaitable[None]],
    ) -> None:
        assert server.url is not None and server.oauth is not None
        self.book = book
        self.server = server
        self.user_id = user_id
        self.redirect_uri = redirect_uri
        self._issuer = issuer
        self._metadata = metadata
        self._saved = saved
        self.expires_at: float | None = None
        """When the access token held runs out (Unix time), as the book keeps it; None when none is held."""

    def due(self) -> bool:
        """Whether the token held is within `REFRESH_MARGIN_S` of its expiry."""
        return self.expires_at is not None and time.time() >= self.expires_at - REFRESH_MARGIN_S

    async def _kept(self) -> tuple[OAuthToken, float | None] | None:
        """The tokens the book keeps for this person and server, and when their access token runs out; None when
        there are none, or none that parse."""
        found = await self.book.tokens(self.user_id, self.server.name)
        if found is None:
            return None
        text, expires_at = found
        try:
            return OAuthToken.model_validate_json(text), expires_at
        except ValidationError:
            return None

    async def rotated_since(self, refresh_token: str) -> OAuthToken | None:
        """The tokens kept now, when another refresh has already replaced `refresh_token` (the one the provider
        is about to spend) and their access token is still good: as a token response whose `expires_in` is
        what is left of it. None: `refresh_token` is still the kept one (the refresh should go ahead)."""
        kept = await self._kept()
        if kept is None:
            return None
        token, expires_at = kept
        left = None if expires_at is None else int(expires_at - time.time())
        if token.refresh_token == refresh_token or not token.access_token or (left is not None and left <= 0):
            return None
        return token.model_copy(update={"expires_in": left})

    async def forget_tokens(self) -> None:
        """A refresh was refused: the tokens go (the next request asks the person to sign in again)."""
        self.expires_at = None
        await self.book.forget_tokens(self.user_id, self.server.name)

    # -- TokenStorage ----------------------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        kept = await self._kept()
        if kept is None:
            return None
        token, expires_at = kept
        self.expires_at = expires_at
        if self.due():
            # Without its access token the provider holds nothing to send: it refreshes first, or signs in.
            return token.model_copy(update={"access_token": ""})
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        self.expires_at = expires_at
        # Shielded: the server may already have rotated the refresh token; losing the new one to a cancelled
        # session (shutdown) would mean signing in again.
        with anyio.CancelScope(shield=True):
            await self.book.save_tokens(
                self.user_id,
                self.server.name,
                tokens.model_dump_json(exclude_none=True),
                expires_at,
                self._issuer(),
            )
        await self._saved()

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        oauth = self.server.oauth
        assert oauth is not None
        stored = client_info_of(await self.book.client(self.user_id, self.server.name))
        if oauth.client_id is None:
            return stored
        metadata = self._metadata()
        if metadata is None and oauth.client_secret is not None and oauth.token_endpoint_auth_method is None:
            metadata = await self._discover()
        client = preregistered_client(oauth, self.redirect_uri, metadata, stored)
        if metadata is not None:
            await self._keep_method(client, metadata)
        return client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.book.save_client(
            self.user_id, self.server.name, client_info.model_dump_json(exclude_none=True), client_info.issuer
        )

    # -- a pre-registered client's method --------------------------------------------------------------

    async def _discover(self) -> OAuthMetadata | None:
        """The server's metadata, for how a pre-registered client with a secret should authenticate: the
        provider asks for the client before it discovers anything itself, and keeps what it is given."""
        assert self.server.url is not None
        async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as http:
            return await discover_metadata(http, self.server.url)

    async def _keep_method(self, client: OAuthClientInformationFull, metadata: OAuthMetadata) -> None:
        """The method chosen from the metadata is kept, for refreshes after a restart when the metadata cannot
        be had."""
        oauth = self.server.oauth
        assert oauth is not None and oauth.client_id is not None
        method = token_endpoint_auth_method(oauth, metadata)
        kept = OAuthClientInformationFull(client_id=oauth.client_id, token_endpoint_auth_method=method)
        await self.book.save_client(
            self.user_id, self.server.name, kept.model_dump_json(exclude_none=True), str(metadata.issuer)
        )

"""One person's SDK provider for one server, and the `httpx2.Auth` each of their sessions uses. Async, does I/O.

The provider runs the whole OAuth flow (discovery, registration, PKCE, the code's exchange, refreshes); this
module watches it from outside, through the requests and responses of its public auth flow: whose request it
is (a group note names it), a refresh the token endpoint refused (the tokens go, the failure is audited), a
code it refused (the browser's page says why), and when the exchange is over (the card and the page are told).

A refresh runs under the book's per-(user, server) lock (`SignInBook.refreshing`), from before its request
leaves until the provider has kept the new tokens. Under it the kept tokens are read again first: when another
provider (another process on the database) has already spent the refresh token this one holds, the kept tokens
are handed to the provider as the token endpoint's answer, and the spent token is never sent (a rotating
refresh token works once: sending it again would be refused, and the person signed out). The provider keeps
its tokens in memory and refreshes inside its own flow; its public `httpx2.Auth` flow, whose requests we send
and whose responses we hand back, is the one place to do this without reaching into it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import AbstractAsyncContextManager
from typing import Protocol

import httpx2
from mcp.client.auth import OAuthFlowError, OAuthTokenError
from mcp.shared.auth import AuthorizationCodeResult, OAuthMetadata

from bot.config import ServerConfig
from bot.core import Origin, Outcome, PromptRegistry, SignInBook
from bot.servers.oauth.pending import Pending
from bot.servers.oauth.sdk import form_of, held_issuer, held_metadata, new_provider, refresh_first, refusal
from bot.servers.oauth.storage import AccountStorage
from bot.servers.signin_errors import SignInFailed

__all__ = ["Account", "BoundAuth", "SignInHost"]


class SignInHost(Protocol):
    """What an account needs of the sign-in service (`bot.servers.oauth.service.SignIns`)."""

    store: SignInBook
    prompts: PromptRegistry
    redirect_uri: str
    metadata_url: str | None

    async def await_code(self, account: Account, url: str) -> AuthorizationCodeResult: ...

    async def record(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None: ...


class Account:
    """One person's provider for one server, over its `AccountStorage`."""

    def __init__(self, host: SignInHost, server: ServerConfig, user_id: int) -> None:
        assert server.url is not None and server.oauth is not None
        self.host = host
        self.server = server
        self.user_id = user_id
        self.origin: Origin | None = None
        """Where the person's latest request on this server came from (a group note names it)."""
        self._url: str | None = None
        self._signing_in = False
        self.exchange: Pending | None = None
        """The sign-in whose code is being exchanged for tokens."""
        self.exchange_refused: str | None = None
        """Why the token endpoint refused the code, when it did."""
        self.signed_out = False
        """The person signed out (`/logout`): the sessions still closing on this account send their last requests
        (a 2025-era session's DELETE) without a token, and never ask the person to sign in; the next session
        gets a new account."""
        self.storage = AccountStorage(
            host.store,
            server,
            user_id,
            host.redirect_uri,
            issuer=lambda: self.issuer,
            metadata=lambda: self.metadata,
            saved=self._saved,
        )
        self.provider = new_provider(
            server.url,
            host.redirect_uri,
            server.oauth.scopes,
            self.storage,
            self._redirect,
            self._callback,
            server.oauth.client_metadata_url or host.metadata_url,
        )

    def sign_out(self) -> None:
        """The person signed out: see `signed_out`."""
        self.signed_out = True

    def exchanging(self, pending: Pending) -> None:
        """`pending`'s code is being exchanged for tokens (`exchange_over` settles it)."""
        self.exchange = pending

    @property
    def issuer(self) -> str | None:
        return held_issuer(self.provider)

    @property
    def metadata(self) -> OAuthMetadata | None:
        return held_metadata(self.provider)

    async def _redirect(self, url: str) -> None:
        self._url = url

    async def _callback(self) -> AuthorizationCodeResult:
        assert self._url is not None
        url, self._url = self._url, None
        self.exchange_refused = None
        result = await self.host.await_code(self, url)
        self._signing_in = True
        return result

    async def _saved(self) -> None:
        """Tokens were kept: after a code's exchange, the sign-in is over."""
        if self._signing_in:
            self._signing_in = False
            await self.exchange_over(None)
            await self.host.record("signed_in", self.user_id, self.server.name, {"issuer": self.issuer or ""})

    async def exchange_over(self, failure: str | None) -> None:
        """The code was exchanged (`failure` None) or not: the browser's page and the card are told."""
        pending, self.exchange = self.exchange, None
        if pending is None or pending.exchanged.is_set():
            return
        pending.exchange_failure = failure
        pending.exchanged.set()
        if pending.consented:
            outcome = Outcome.COMPLETED if failure is None else Outcome.CANCELLED
            await self.host.prompts.settle_completed(pending.prompt, outcome)

    def refreshing(self) -> AbstractAsyncContextManager[None]:
        """The book's lock on refreshing this person's tokens for this server."""
        return self.host.store.refreshing(self.user_id, self.server.name)

    async def refreshed_elsewhere(self, request: httpx2.Request) -> httpx2.Response | None:
        """For a refresh request whose refresh token was already spent by another refresh: the kept tokens, as
        the token endpoint's answer to it. None: send it."""
        token = await self.storage.rotated_since(form_of(request).get("refresh_token", ""))
        if token is None:
            return None
        return httpx2.Response(200, json=token.model_dump(mode="json", exclude_none=True), request=request)

    def mark_due(self) -> None:
        """A held token within the refresh margin of its expiry is due: the provider refreshes it first."""
        if self.storage.due():
            refresh_first(self.provider)

    async def observe(self, request: httpx2.Request, response: httpx2.Response) -> None:
        """A refresh the token endpoint refused: the tokens are dropped (the next request asks the person to
        sign in again) and the failure is audited. A code it refused: the reason is noted for the page."""
        grant = form_of(request).get("grant_type") if request.method == "POST" else None
        if grant == "authorization_code" and response.status_code not in (200, 201):
            await response.aread()
            self.exchange_refused = refusal(response)
            return
        if grant != "refresh_token" or response.status_code == 200:
            return
        await self.storage.forget_tokens()
        await self.host.record(
            "refresh_failed", self.user_id, self.server.name, {"status": str(response.status_code)}
        )


class BoundAuth(httpx2.Auth):
    """The account's provider, for one session: notes whose request it is, watches refreshes."""

    requires_response_body = True

    def __init__(self, account: Account, origin: Origin) -> None:
        self.account = account
        self.origin = origin

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        account = self.account
        if account.signed_out:
            yield request
            return
        account.origin = self.origin
        account.mark_due()
        flow = account.provider.async_auth_flow(request)
        mine: Pending | None = None  # the sign-in whose code this flow exchanges (the provider's lock: one)
        try:
            outgoing = await flow.__anext__()
            while True:
                if _is_refresh(outgoing):
                    # Held until the provider has kept what the refresh brought (it then sends `request`).
                    async with account.refreshing():
                        response = await account.refreshed_elsewhere(outgoing)
                        if response is None:
                            response = yield outgoing
                            await account.observe(outgoing, response)
                        outgoing = await flow.asend(response)
                    continue
                response = yield outgoing
                if outgoing is not request:
                    await account.observe(outgoing, response)
                outgoing = await flow.asend(response)
                mine = mine or account.exchange
        except StopAsyncIteration:
            return
        except (OAuthFlowError, OAuthTokenError) as exc:
            mine = mine or account.exchange  # raised by the provider (which holds its lock): its own sign-in
            if mine is None or account.exchange is not mine:
                raise
            # The code came back but was not exchanged: say so in the person's words, not the SDK's.
            failure = (
                f"failed: the server refused the sign-in code ({account.exchange_refused})"
                if account.exchange_refused
                else "was refused: the answer from the authorization server did not pass its checks"
                if isinstance(exc, OAuthFlowError)
                else "failed: the server's answer to the sign-in code was not usable"
            )
            await account.exchange_over(failure)
            raise SignInFailed(account.server.name, failure) from exc
        finally:
            await flow.aclose()
            if mine is not None and account.exchange is mine:  # cancelled (the bot stopping) or failed oddly
                await account.exchange_over("was not completed")


def _is_refresh(request: httpx2.Request) -> bool:
    return request.method == "POST" and form_of(request).get("grant_type") == "refresh_token"

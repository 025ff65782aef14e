"""Per-person OAuth sign-in to remote MCP servers, on the SDK's own `OAuthClientProvider`. Async, does I/O.

    SignInFailed          the person did not finish signing in (cancelled, declined, expired); ends the connect

One provider per (Telegram user, server), kept for the life of the process, its `TokenStorage` in the store
(`bot.store.tokens`, sealed). When the server answers 401, the provider asks for the authorization code:
here that is a sign-in card (a URL `Prompt` through the registry, in the person's private chat) and a wait
for the browser's return, which arrives at `<public_url>/oauth/callback` (`deliver`) or as the address the
person pastes into the chat (`deliver_pasted`). `state` is single use, bound to the person, and expires with
the card; the SDK checks it again, with PKCE S256, `iss` and `resource`. The connect that hit the 401 then
goes on by itself, and with it the person's call. The browser's page (and the card) say "Signed in" only once
the code has been exchanged for tokens; otherwise they say what failed.

How the bot names itself to an authorization server, in the order the MCP spec recommends: the pre-registered
`client_id` (with its secret sent the way the server's metadata asks, or as `token_endpoint_auth_method` says),
else a Client ID Metadata Document where the server accepts them (`client_metadata_url`, or the bot's own at
`<public_url>/oauth/client-metadata.json` when the public URL is https), else dynamic registration.

The SDK keeps no expiry with stored tokens, and a provider rebuilt after a restart would send a stale token
and answer the 401 with a whole new sign-in; the store keeps the expiry, and before each request a token
within `REFRESH_MARGIN_S` of it is marked due, so the provider refreshes it first, before and after a restart.
(The SDK has one expiry for "refresh it" and "send it", so the mark is set per request, not stored: a token
living less than the margin is refreshed before every request.)
"""

from __future__ import annotations

import base64
import logging
import secrets
import time
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Final, Protocol
from urllib.parse import parse_qs, quote, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthTokenError
from mcp.client.auth.oauth2 import OAuthContext
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
)
from pydantic import AnyUrl, ValidationError

from bot.config import Config, OAuthClient, ServerConfig, TokenEndpointAuth
from bot.core import Era, KeptQuestion, Origin, Outcome, Prompt, PromptRegistry, RoundBook
from bot.servers.keeper import RoundKeeper
from bot.servers.signin_errors import SignInFailed
from bot.store.tokens import Account, SignInStore
from mapping import Answer, Request, RequestKind, new_request_id
from mapping.urls import check_url

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

logger = logging.getLogger(__name__)

CALLBACK_PATH: Final = "/oauth/callback"
CLIENT_METADATA_PATH: Final = "/oauth/client-metadata.json"
"""Where the bot serves its own Client ID Metadata Document (its URL is the client id)."""
CLIENT_NAME: Final = "toolnexus-bot"
GRANT_TYPES: Final = ("authorization_code", "refresh_token")
EXCHANGE_WAIT_S: Final = 30.0
"""How long the callback page waits for the code's exchange before saying Telegram will tell."""
REFRESH_MARGIN_S: Final = 60.0
"""A token this close to its expiry is refreshed before it is used."""
LOOPBACK_PORT: Final = 8080
"""The loopback redirect's port when there is no `[web]` table (the web endpoint's default port)."""
_HTTP_TIMEOUT: Final = httpx2.Timeout(30.0)


class SignInAudit(Protocol):
    """Where sign-ins, refresh failures and logouts are recorded (the audit log); never tokens."""

    async def __call__(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None: ...


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of a browser's return (or a pasted address): `ok`, or the reason it was refused."""

    ok: bool
    reason: str = ""
    server: str | None = None
    pending: _Pending | None = field(default=None, repr=False, compare=False)
    """The sign-in the code went to (its exchange is still to come)."""

    async def exchanged(self, wait_s: float = EXCHANGE_WAIT_S) -> Delivery:
        """A delivered code once exchanged for tokens: ok, or refused with what failed. Still running after
        `wait_s`: not ok, with a reason saying so (Telegram tells the outcome)."""
        pending = self.pending
        if not self.ok or pending is None:
            return self
        with anyio.move_on_after(wait_s):
            await pending.exchanged.wait()
        server = self.server or pending.account.server.name
        if not pending.exchanged.is_set():
            return Delivery(False, f"Signing in to {server} is taking long; Telegram will tell you how it went.", server)
        if pending.exchange_failure is not None:
            return Delivery(False, f"Sign-in to {server} {pending.exchange_failure}.", server)
        return Delivery(True, server=server)


def sign_ins(
    config: Config,
    tokens: SignInStore | None,
    prompts: PromptRegistry,
    audit: SignInAudit | None = None,
    *,
    redirect_uri: str | None = None,
    book: RoundBook | None = None,
) -> SignIns | None:
    """The process's `SignIns` when a server uses OAuth and the store can keep tokens; else None. With `book`,
    sign-in cards waiting for their browser are kept there for the next process (`SignIns` says how)."""
    if tokens is None or not any(server.oauth is not None for server in config.servers):
        return None
    paste = redirect_uri is None  # the console passes its own loopback address, and takes no pasted one
    return SignIns(config, tokens, prompts, audit=audit, redirect_uri=redirect_uri, paste=paste, book=book)


def client_metadata_url_of(config: Config) -> str | None:
    """`<public_url>/oauth/client-metadata.json`, the bot's own client id, when the public URL is https."""
    web = config.web
    if web is None or web.public_url is None or urlsplit(web.public_url).scheme != "https":
        return None
    return web.public_url.rstrip("/") + CLIENT_METADATA_PATH


def client_metadata_document(config: Config) -> dict[str, object] | None:
    """The bot's Client ID Metadata Document (served at its own URL), or None without an https public URL."""
    url = client_metadata_url_of(config)
    if url is None:
        return None
    return {
        "client_id": url,
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri_of(config)],
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    }


def redirect_uri_of(config: Config) -> str:
    """`<public_url>/oauth/callback`, or the loopback address on the web endpoint's port (native-app style)."""
    web = config.web
    if web is not None and web.public_url is not None:
        return web.public_url.rstrip("/") + CALLBACK_PATH
    return loopback_redirect_uri(config)


def loopback_redirect_uri(config: Config) -> str:
    """`http://127.0.0.1:<[web] port, or 8080>/oauth/callback` (the console's, and the bot's without a public URL)."""
    port = config.web.port if config.web is not None else LOOPBACK_PORT
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


@dataclass(eq=False, slots=True)
class _Pending:
    """A sign-in card out, waiting for the browser to come back with `state`."""

    state: str
    account: _Account
    prompt: Prompt
    deadline: float
    done: anyio.Event = field(default_factory=anyio.Event)
    result: AuthorizationCodeResult | None = None
    failure: str | None = None
    consented: bool = False
    """The card showed the link (it is settled once the exchange is over)."""
    exchanged: anyio.Event = field(default_factory=anyio.Event)
    """The code was exchanged for tokens, or that failed (`exchange_failure`)."""
    exchange_failure: str | None = None


class SignIns:
    """Every person's OAuth providers and pending sign-ins; one per process (`auth_for` feeds the pool).

    With a `book`, each sign-in card waiting for its browser is kept there (era `signin`) until the sign-in is
    over. A process that leaves it behind (a drain, or a crash) leaves its card as it stands; the SDK keeps the
    flow's PKCE verifier in the process (a local of `OAuthClientProvider`, with no public way to save or give
    it), so the next process cannot finish that flow: it tells the card so and starts a new sign-in
    (`bot.telegram.restore`).
    """

    def __init__(
        self,
        config: Config,
        store: SignInStore,
        prompts: PromptRegistry,
        *,
        audit: SignInAudit | None = None,
        redirect_uri: str | None = None,
        paste: bool = True,
        book: RoundBook | None = None,
    ) -> None:
        self.config = config
        self.book = book
        self.store = store
        self.prompts = prompts
        self.audit = audit
        self.redirect_uri = redirect_uri or redirect_uri_of(config)
        own = client_metadata_url_of(config)
        self.metadata_url = own if own is not None and self.redirect_uri == redirect_uri_of(config) else None
        """The bot's own client id document, where it lists this redirect (not the console's loopback)."""
        self.loopback = paste and urlsplit(self.redirect_uri).hostname == "127.0.0.1"
        """No public URL: the browser may not reach the redirect, so the person may paste it (in the chat;
        the console's browser is on its own machine)."""
        self._accounts: dict[tuple[int, str], _Account] = {}
        self._pending: dict[str, _Pending] = {}
        self.stopping = False

    def stop(self) -> None:
        """Shutdown: every sign-in still waiting for its browser ends now (its connect, and its call, too)."""
        self.stopping = True
        for pending in list(self._pending.values()):
            if not pending.done.is_set():
                pending.failure = "was cancelled: the bot is stopping"
                pending.done.set()

    def auth_for(self, server: ServerConfig, origin: Origin) -> httpx2.Auth | None:
        """The `httpx2.Auth` for `origin`'s session on `server` (None for a server without OAuth)."""
        if server.oauth is None:
            return None
        key = (origin.user_id, server.name)
        account = self._accounts.get(key)
        if account is None:
            account = self._accounts[key] = _Account(self, server, origin.user_id)
        return _BoundAuth(account, origin)

    async def signed_in(self, user_id: int, server: str) -> bool:
        """Whether the person holds tokens for `server` (they may still need refreshing)."""
        return await self.store.tokens(user_id, server) is not None

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's sign-ins (server, issuer, expiry; never token material)."""
        return [a for a in await self.store.accounts(user_id) if a.signed_in]

    async def logout(self, user_id: int, server: ServerConfig) -> bool:
        """Forget the person's tokens for `server`, revoking them first where the server offers it; False when
        they were not signed in. The caller closes their open sessions on it."""
        account = self._accounts.pop((user_id, server.name), None)
        found = await self.store.tokens(user_id, server.name)
        revoked = False
        if found is not None:
            revoked = await self._revoke(account, user_id, server, found[0])
        deleted = await self.store.delete(user_id, server.name)
        if deleted and found is not None:
            await self._audit("logged_out", user_id, server.name, {"revoked": "yes" if revoked else "no"})
        return deleted and found is not None

    def deliver(self, params: dict[str, str]) -> Delivery:
        """The browser came back to the callback with `code`, `state` (and maybe `iss` or `error`)."""
        pending = self._pending.get(params.get("state", ""))
        if pending is None or pending.done.is_set() or time.monotonic() > pending.deadline:
            return Delivery(False, "This sign-in link is unknown, was already used, or has expired.")
        return self._finish(pending, params)

    def deliver_pasted(self, user_id: int, text: str) -> Delivery:
        """A person pasted the address the browser could not open: accepted from that person only."""
        params = _callback_params(text.strip(), self.redirect_uri)
        if params is None:
            return Delivery(False, "That is not the sign-in address I am waiting for.")
        pending = self._pending.get(params.get("state", ""))
        if pending is None or pending.account.user_id != user_id or pending.done.is_set():
            return Delivery(False, "That sign-in address is unknown, not yours, or was already used.")
        if time.monotonic() > pending.deadline:
            return Delivery(False, "That sign-in has expired.")
        return self._finish(pending, params)

    def _finish(self, pending: _Pending, params: dict[str, str]) -> Delivery:
        server = pending.account.server.name
        issuer = pending.account.issuer
        metadata = pending.account.metadata
        if "iss" in params and issuer is not None and params["iss"] != issuer:
            # RFC 9207: a response naming another issuer is a mix-up attack; the SDK would refuse it too.
            pending.failure = "was refused: the answer came from another authorization server"
        elif "iss" not in params and metadata is not None and metadata.authorization_response_iss_parameter_supported:
            pending.failure = "was refused: the answer did not name its authorization server"
        elif "error" in params:
            pending.failure = "was refused by the server" + (
                f" ({params['error'][:100]})" if params["error"].isprintable() else ""
            )
        elif not params.get("code"):
            pending.failure = "came back without an authorization code"
        else:
            pending.result = AuthorizationCodeResult(
                code=params["code"], state=params["state"], iss=params.get("iss")
            )
        pending.done.set()
        if pending.failure is not None:
            return Delivery(False, f"Sign-in to {server} {pending.failure}.", server)
        return Delivery(True, server=server, pending=pending)

    async def _await_code(self, account: _Account, url: str) -> AuthorizationCodeResult:
        """The provider's callback handler: show the card, wait for the browser (or the pasted address)."""
        origin = account.origin
        state = _query(url).get("state", "")
        if origin is None or not state:
            raise SignInFailed(account.server.name, "could not start")
        host = check_url(url).host
        text = f"Sign in to {account.server.title or account.server.name} at {host}."
        if self.loopback:
            text += " If the page does not load after you sign in, copy its address and send it here."
        prompt = Prompt(
            request=Request(id=new_request_id(), kind=RequestKind.AUTHORIZATION, prompt=text, url=url),
            origin=origin,
            server=account.server.name,
            elicitation_id="signin-" + secrets.token_urlsafe(8),
            scope=("signin", account.user_id, account.server.name),
            sign_in=True,
        )
        keeper = self._keeper(prompt)
        prompt.keeper = keeper
        pending = _Pending(state, account, prompt, time.monotonic() + self.prompts.timeout_s)
        self._pending[state] = pending
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._ask, pending)
                async with anyio.create_task_group() as watch:
                    watch.start_soon(_cancelled_by_hand, pending)
                    with anyio.move_on_after(self.prompts.timeout_s):
                        await pending.done.wait()
                    watch.cancel_scope.cancel()
                if self._left(pending):  # the process leaves it to the next one: its card stays as it stands
                    tg.cancel_scope.cancel()
                elif prompt.pending:  # the code came back before the consent tap: signing in is consent
                    self.prompts.answer(prompt, Answer(id=prompt.request.id, ok=True))
        finally:
            del self._pending[state]
            if keeper is not None and not self._left(pending):
                with anyio.CancelScope(shield=True):
                    await keeper.close()
        if self._left(pending):
            raise SignInFailed(
                account.server.name, "was not finished when the bot stopped; once back, it sends you a new link"
            )
        self.prompts.complete(prompt.scope, prompt.elicitation_id or "")  # off the awaiting list, if still on it
        consented = prompt.outcome is Outcome.ANSWERED  # its card shows the link and waits: settle it now
        if pending.result is not None:
            pending.consented = consented  # settled by `_exchange_over`, once the code is exchanged (or not)
            account.exchange = pending
            return pending.result
        if pending.failure is None:
            pending.failure = "was not completed in time"
        if consented:
            timed_out = pending.failure == "was not completed in time"
            ended = Outcome.SHUTDOWN if self.stopping else Outcome.EXPIRED if timed_out else Outcome.CANCELLED
            await self.prompts.settle_completed(prompt, ended)
        raise SignInFailed(account.server.name, pending.failure)

    def _keeper(self, prompt: Prompt) -> RoundKeeper | None:
        """The sign-in's row in the book (written when its card is shown, told where the card stands)."""
        if self.book is None:
            return None
        request = prompt.request
        params = {"mode": "url", "message": request.prompt, "url": request.url, "elicitationId": prompt.elicitation_id}
        question = KeptQuestion(
            id=request.id,
            round_id=str(uuid.uuid4()),
            input_key="",
            era=Era.SIGNIN,
            server=prompt.server,
            tool="",
            arguments={},
            origin=prompt.origin,
            token=prompt.token,
            deadline=time.time() + self.prompts.timeout_s,
            input_requests={"": {"method": "elicitation/create", "params": params}},
        )
        return RoundKeeper(self.book, question)

    def _left(self, pending: _Pending) -> bool:
        """Whether the sign-in is left for the next process: kept, the process leaving (a drain's end), and the
        browser not back with a code."""
        return self.prompts.kept(pending.prompt) and pending.result is None

    async def _ask(self, pending: _Pending) -> None:
        """Show the card; a refusal (Decline, Cancel, expiry) ends the wait for the browser."""
        answer = await self.prompts.ask(pending.prompt)
        if not answer.ok and not pending.done.is_set():
            pending.failure = {"declined": "was declined", "timeout": "was not completed in time"}.get(
                answer.reason or "", "was cancelled"
            )
            pending.done.set()

    async def _revoke(self, account: _Account | None, user_id: int, server: ServerConfig, tokens: str) -> bool:
        """RFC 7009 revocation of the refresh (else access) token, where the server's metadata offers it."""
        try:
            token = OAuthToken.model_validate_json(tokens)
        except ValidationError:
            return False
        oauth = server.oauth
        stored = _client_info(await self.store.client(user_id, server.name))
        client = stored
        if oauth is not None and oauth.client_id is not None:
            client = preregistered_client(oauth, self.redirect_uri, None, stored)
        if client is None:
            return False
        issuer = account.issuer if account is not None else None
        if issuer is None:
            issuer = next((a.issuer for a in await self.store.accounts(user_id) if a.server == server.name), None)
        async with httpx2.AsyncClient(timeout=_HTTP_TIMEOUT, follow_redirects=False) as http:
            metadata = account.metadata if account is not None else None
            if metadata is None:
                metadata = await _fetch_metadata(http, issuer)
            if metadata is None or metadata.revocation_endpoint is None:
                return False
            data = {"token": token.refresh_token or token.access_token, "client_id": client.client_id}
            data["token_type_hint"] = "refresh_token" if token.refresh_token else "access_token"
            headers: dict[str, str] = {}
            if client.client_secret and client.token_endpoint_auth_method == "client_secret_basic":
                headers["Authorization"] = _basic(client.client_id, client.client_secret)
            elif client.client_secret:
                data["client_secret"] = client.client_secret
            try:
                response = await http.post(str(metadata.revocation_endpoint), data=data, headers=headers)
            except httpx2.HTTPError as exc:
                logger.warning("could not revoke a token at %s: %s", server.name, type(exc).__name__)
                return False
        return response.status_code == 200

    async def _audit(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None:
        if self.audit is not None:
            await self.audit(event, user_id, server, detail)


class _Account:
    """One person's provider for one server, and its `TokenStorage` over the store."""

    def __init__(self, signins: SignIns, server: ServerConfig, user_id: int) -> None:
        assert server.url is not None and server.oauth is not None
        self.signins = signins
        self.server = server
        self.user_id = user_id
        self.origin: Origin | None = None
        """Where the person's latest request on this server came from (a group note names it)."""
        self.expires_at: float | None = None
        """When the access token held runs out (Unix time), as the store keeps it."""
        self._url: str | None = None
        self._signing_in = False
        self.exchange: _Pending | None = None
        """The sign-in whose code is being exchanged for tokens."""
        self.exchange_refused: str | None = None
        """Why the token endpoint refused the code, when it did."""
        oauth = server.oauth
        metadata = OAuthClientMetadata(
            redirect_uris=[AnyUrl(signins.redirect_uri)],
            client_name=CLIENT_NAME,
            grant_types=list(GRANT_TYPES),
            response_types=["code"],
            scope=" ".join(oauth.scopes) or None,
        )
        self.provider = OAuthClientProvider(
            server_url=server.url,
            client_metadata=metadata,
            storage=self,
            redirect_handler=self._redirect,
            callback_handler=self._callback,
            client_metadata_url=oauth.client_metadata_url or signins.metadata_url,
        )

    @property
    def context(self) -> OAuthContext:
        return self.provider.context

    @property
    def issuer(self) -> str | None:
        metadata = self.context.oauth_metadata
        if metadata is not None:
            return str(metadata.issuer)
        client = self.context.client_info
        return None if client is None else client.issuer

    @property
    def metadata(self) -> OAuthMetadata | None:
        return self.context.oauth_metadata

    async def _redirect(self, url: str) -> None:
        self._url = url
        await self._fit_client_auth()

    async def _fit_client_auth(self) -> None:
        """The metadata is known now (the code's exchange is next): a pre-registered client authenticates the
        way it offers, and the choice is kept for refreshes after a restart (before metadata is fetched)."""
        oauth = self.server.oauth
        client = self.context.client_info
        if oauth is None or oauth.client_id is None or client is None or client.client_id != oauth.client_id:
            return
        method = token_endpoint_auth_method(oauth, self.metadata)
        if client.token_endpoint_auth_method != method:
            self.context.client_info = client.model_copy(update={"token_endpoint_auth_method": method})
        kept = OAuthClientInformationFull(client_id=oauth.client_id, token_endpoint_auth_method=method)
        await self.signins.store.save_client(
            self.user_id, self.server.name, kept.model_dump_json(exclude_none=True), self.issuer
        )

    async def _callback(self) -> AuthorizationCodeResult:
        assert self._url is not None
        url, self._url = self._url, None
        self.exchange_refused = None
        result = await self.signins._await_code(self, url)
        self._signing_in = True
        return result

    async def exchange_over(self, failure: str | None) -> None:
        """The code was exchanged (`failure` None) or not: the browser's page and the card are told."""
        pending, self.exchange = self.exchange, None
        if pending is None or pending.exchanged.is_set():
            return
        pending.exchange_failure = failure
        pending.exchanged.set()
        if pending.consented:
            outcome = Outcome.COMPLETED if failure is None else Outcome.CANCELLED
            await self.signins.prompts.settle_completed(pending.prompt, outcome)

    # -- TokenStorage ----------------------------------------------------------------------------------

    async def get_tokens(self) -> OAuthToken | None:
        found = await self.signins.store.tokens(self.user_id, self.server.name)
        if found is None:
            return None
        text, expires_at = found
        try:
            token = OAuthToken.model_validate_json(text)
        except ValidationError:
            return None
        # Loaded after a restart (or after a failed refresh): the SDK would think it never expires.
        self.expires_at = expires_at
        self.context.token_expiry_time = expires_at
        if expires_at is not None and time.time() >= expires_at - REFRESH_MARGIN_S:
            self.context.token_expiry_time = 1.0  # due (the provider sets `current_tokens` after this returns)
        return token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        self.expires_at = expires_at
        # Shielded: the server may already have rotated the refresh token; losing the new one to a cancelled
        # session (shutdown) would mean signing in again.
        with anyio.CancelScope(shield=True):
            await self.signins.store.save_tokens(
                self.user_id, self.server.name, tokens.model_dump_json(exclude_none=True), expires_at, self.issuer
            )
        if self._signing_in:
            self._signing_in = False
            await self.exchange_over(None)
            await self.signins._audit("signed_in", self.user_id, self.server.name, {"issuer": self.issuer or ""})

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        oauth = self.server.oauth
        assert oauth is not None
        stored = _client_info(await self.signins.store.client(self.user_id, self.server.name))
        if oauth.client_id is not None:
            return preregistered_client(oauth, self.signins.redirect_uri, self.metadata, stored)
        return stored

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self.signins.store.save_client(
            self.user_id, self.server.name, client_info.model_dump_json(exclude_none=True), client_info.issuer
        )

    # -- watching the flow -----------------------------------------------------------------------------

    def mark_due(self) -> None:
        """A held token within `REFRESH_MARGIN_S` of its expiry is due: the provider refreshes it first."""
        held = self.expires_at is not None and self.context.current_tokens is not None
        if held and time.time() >= (self.expires_at or 0.0) - REFRESH_MARGIN_S:
            self.context.token_expiry_time = 1.0  # (0 would read as "no expiry")

    async def observe(self, request: httpx2.Request, response: httpx2.Response) -> None:
        """A refresh the token endpoint refused: the tokens are dropped (the next request asks the person to
        sign in again) and the failure is audited. A code it refused: the reason is noted for the page."""
        grant = _form(request).get("grant_type") if request.method == "POST" else None
        if grant == "authorization_code" and response.status_code not in (200, 201):
            await response.aread()
            self.exchange_refused = _refusal(response)
            return
        if grant != "refresh_token" or response.status_code == 200:
            return
        await self.signins.store.forget_tokens(self.user_id, self.server.name)
        await self.signins._audit(
            "refresh_failed", self.user_id, self.server.name, {"status": str(response.status_code)}
        )


class _BoundAuth(httpx2.Auth):
    """The account's provider, for one session: notes whose request it is, watches refreshes."""

    requires_response_body = True

    def __init__(self, account: _Account, origin: Origin) -> None:
        self.account = account
        self.origin = origin

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        account = self.account
        account.origin = self.origin
        account.mark_due()
        flow = account.provider.async_auth_flow(request)
        mine: _Pending | None = None  # the sign-in whose code this flow exchanges (the provider's lock: one)
        try:
            outgoing = await flow.__anext__()
            while True:
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


def token_endpoint_auth_method(oauth: OAuthClient, metadata: OAuthMetadata | None) -> str:
    """How a pre-registered client authenticates: as configured, else the best the server offers (Basic first,
    as RFC 6749 §2.3.1 asks; Basic when the metadata does not say, its RFC 8414 default)."""
    if oauth.token_endpoint_auth_method is not None:
        return oauth.token_endpoint_auth_method.value
    if oauth.client_secret is None:
        return TokenEndpointAuth.NONE.value
    offered = None if metadata is None else metadata.token_endpoint_auth_methods_supported
    for method in TokenEndpointAuth:
        if offered is None or method.value in offered:
            return method.value
    return TokenEndpointAuth.CLIENT_SECRET_BASIC.value


def preregistered_client(
    oauth: OAuthClient, redirect_uri: str, metadata: OAuthMetadata | None, stored: OAuthClientInformationFull | None
) -> OAuthClientInformationFull:
    """The configured client as the SDK holds it; before the server's metadata is known, its method is the one
    chosen at the last sign-in (kept in the store), so a refresh after a restart authenticates the same way."""
    assert oauth.client_id is not None
    method = token_endpoint_auth_method(oauth, metadata)
    same = stored is not None and stored.client_id == oauth.client_id
    if metadata is None and oauth.token_endpoint_auth_method is None and same and stored is not None:
        method = stored.token_endpoint_auth_method or method
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=None if oauth.client_secret is None else oauth.client_secret.get(),
        redirect_uris=[AnyUrl(redirect_uri)],
        token_endpoint_auth_method=method,
        grant_types=list(GRANT_TYPES),
        response_types=["code"],
    )


def _basic(client_id: str, secret: str) -> str:
    """RFC 6749 §2.3.1: both form-urlencoded, then joined and base64'd (as the SDK does at the token endpoint)."""
    pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _client_info(text: str | None) -> OAuthClientInformationFull | None:
    if text is None:
        return None
    try:
        return OAuthClientInformationFull.model_validate_json(text)
    except ValidationError:
        return None


def _refusal(response: httpx2.Response) -> str:
    """The token endpoint's `error` code (printable, short), or its status."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, str) and error.isprintable() and 0 < len(error) <= 60:
        return f"{response.status_code} {error}"
    return str(response.status_code)


async def _cancelled_by_hand(pending: _Pending) -> None:
    """The person tapped Cancel on the consented card (it marks the prompt completed by hand)."""
    await pending.prompt.completed.wait()
    if not pending.done.is_set():
        pending.failure = "was cancelled"
        pending.done.set()


def _form(request: httpx2.Request) -> dict[str, str]:
    if request.headers.get("content-type", "").split(";")[0] != "application/x-www-form-urlencoded":
        return {}
    return {k: v[0] for k, v in parse_qs(request.content.decode("utf-8", "replace")).items()}


def _query(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def _callback_params(text: str, redirect_uri: str) -> dict[str, str] | None:
    """The query of a pasted address, if it is the redirect URI (same scheme, host, port and path)."""
    if any(c.isspace() for c in text):
        return None
    try:
        got, want = urlsplit(text), urlsplit(redirect_uri)
        same = (got.scheme, got.hostname, got.port, got.path) == (want.scheme, want.hostname, want.port, want.path)
    except ValueError:
        return None
    return _query(text) if same else None


async def _fetch_metadata(http: httpx2.AsyncClient, issuer: str | None) -> OAuthMetadata | None:
    """RFC 8414 metadata of `issuer` (for revocation after a restart, when the provider has none yet)."""
    if not issuer:
        return None
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    url = f"{parts.scheme}://{parts.netloc}/.well-known/oauth-authorization-server{path}"
    try:
        response = await http.get(url)
        if response.status_code != 200:
            return None
        return OAuthMetadata.model_validate_json(response.content)
    except (httpx2.HTTPError, ValidationError):
        return None


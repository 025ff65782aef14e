"""The sign-in service: every person's OAuth providers and pending sign-ins, one per process. Async, does I/O.

When a server answers 401, the provider asks for the authorization code: here that is a sign-in card (a URL
`Prompt` through the registry, in the person's private chat) and a wait for the browser's return, which arrives
at `<public_url>/oauth/callback` (`deliver`) or as the address the person pastes into the chat
(`deliver_pasted`). The connect that hit the 401 then goes on by itself, and with it the person's call.
"""

from __future__ import annotations

import logging
import secrets
import time
import uuid
from typing import Protocol
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.shared.auth import AuthorizationCodeResult, OAuthToken
from pydantic import ValidationError

from bot.config import Config, ServerConfig
from bot.core import Account as AccountRow
from bot.core import (
    Era,
    KeptQuestion,
    Origin,
    Outcome,
    Prompt,
    PromptRegistry,
    RoundBook,
    SignInBook,
)
from bot.core.relay import SignInShare
from bot.errors import StoreUnavailable
from bot.servers.keeper import RoundKeeper
from bot.servers.oauth.account import Account, BoundAuth
from bot.servers.oauth.naming import (
    client_info_of,
    client_metadata_url_of,
    preregistered_client,
    redirect_uri_of,
)
from bot.servers.oauth.pending import Delivery, Pending, callback_params, query_of, settle
from bot.servers.oauth.sdk import revoke
from bot.servers.signin_errors import SignInFailed
from mapping import Answer, Request, RequestKind, new_request_id
from mapping.urls import check_url

__all__ = ["SignInAudit", "SignIns", "sign_ins"]

logger = logging.getLogger(__name__)


class SignInAudit(Protocol):
    """Where sign-ins, refresh failures and logouts are recorded (the audit log); never tokens."""

    async def __call__(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None: ...


def sign_ins(
    config: Config,
    tokens: SignInBook | None,
    prompts: PromptRegistry,
    audit: SignInAudit | None = None,
    *,
    redirect_uri: str | None = None,
    book: RoundBook | None = None,
    relay: SignInShare,
) -> SignIns | None:
    """The process's `SignIns` when a server uses OAuth and the host has a book for tokens; else None. With
    `book`, sign-in cards waiting for their browser are kept there for the next process (`SignIns` says how);
    `relay` keeps the sign-ins waiting for their browser where the callback finds them (the fleet's shares)."""
    if tokens is None or not any(server.oauth is not None for server in config.servers):
        return None
    paste = redirect_uri is None  # the console passes its own loopback address, and takes no pasted one
    return SignIns(
        config, tokens, prompts, audit=audit, redirect_uri=redirect_uri, paste=paste, book=book, relay=relay
    )


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
        store: SignInBook,
        prompts: PromptRegistry,
        *,
        audit: SignInAudit | None = None,
        redirect_uri: str | None = None,
        paste: bool = True,
        book: RoundBook | None = None,
        relay: SignInShare,
    ) -> None:
        self.config = config
        self.store = store
        """Where tokens and client registrations are kept (the host's `SignInBook`)."""
        self.book = book
        self.prompts = prompts
        self.audit = audit
        self.redirect_uri = redirect_uri or redirect_uri_of(config)
        own = client_metadata_url_of(config)
        self.metadata_url = own if own is not None and self.redirect_uri == redirect_uri_of(config) else None
        """The bot's own client id document, where it lists this redirect (not the console's loopback)."""
        self.loopback = paste and urlsplit(self.redirect_uri).hostname == "127.0.0.1"
        """No public URL: the browser may not reach the redirect, so the person may paste it (in the chat;
        the console's browser is on its own machine)."""
        self._accounts: dict[tuple[int, str], Account] = {}
        self._pending: dict[str, Pending] = {}
        self.stopping = False
        self.relay = relay
        """Where each sign-in waiting for its browser is recorded, so the callback finds it (in a fleet, on any
        instance, which hands the browser's return back here through `deliver`)."""

    def waiting_states(self) -> list[str]:
        """The states of this process's sign-ins still waiting for their browser."""
        return [state for state, pending in self._pending.items() if not pending.done.is_set()]

    def holds(self, state: str) -> bool:
        """Whether this process's flow waits for the browser to come back with `state`."""
        pending = self._pending.get(state)
        return pending is not None and not pending.done.is_set()

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
            account = self._accounts[key] = Account(self, server, origin.user_id)
        return BoundAuth(account, origin)

    async def signed_in(self, user_id: int, server: str) -> bool:
        """Whether the person holds tokens for `server` (they may still need refreshing)."""
        return await self.store.tokens(user_id, server) is not None

    async def accounts(self, user_id: int) -> list[AccountRow]:
        """The person's sign-ins (server, issuer, expiry; never token material)."""
        return [a for a in await self.store.accounts(user_id) if a.signed_in]

    async def logout(self, user_id: int, server: ServerConfig) -> bool:
        """Forget the person's tokens for `server`, revoking them first where the server offers it; False when
        they were not signed in. The caller closes their open sessions on it."""
        account = self._accounts.pop((user_id, server.name), None)
        if account is not None:
            account.sign_out()
        found = await self.store.tokens(user_id, server.name)
        revoked = False
        if found is not None:
            revoked = await self._revoke(account, user_id, server, found[0])
        deleted = await self.store.delete(user_id, server.name)
        if deleted and found is not None:
            await self.record("logged_out", user_id, server.name, {"revoked": "yes" if revoked else "no"})
        return deleted and found is not None

    def deliver(self, params: dict[str, str]) -> Delivery:
        """The browser came back to the callback with `code`, `state` (and maybe `iss` or `error`)."""
        pending = self._pending.get(params.get("state", ""))
        if pending is None or pending.done.is_set() or time.monotonic() > pending.deadline:
            return Delivery(False, "This sign-in link is unknown, was already used, or has expired.")
        return settle(pending, params)

    def deliver_pasted(self, user_id: int, text: str) -> Delivery:
        """A person pasted the address the browser could not open: accepted from that person only."""
        params = callback_params(text.strip(), self.redirect_uri)
        if params is None:
            return Delivery(False, "That is not the sign-in address I am waiting for.")
        pending = self._pending.get(params.get("state", ""))
        if pending is None or pending.user_id != user_id or pending.done.is_set():
            return Delivery(False, "That sign-in address is unknown, not yours, or was already used.")
        if time.monotonic() > pending.deadline:
            return Delivery(False, "That sign-in has expired.")
        return settle(pending, params)

    async def await_code(self, account: Account, url: str) -> AuthorizationCodeResult:
        """The provider's callback handler: show the card, wait for the browser (or the pasted address)."""
        origin = account.origin
        state = query_of(url).get("state", "")
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
        pending = Pending(
            state,
            account.user_id,
            account.server.name,
            prompt,
            time.monotonic() + self.prompts.timeout_s,
            account.issuer,
            account.metadata,
        )
        self._pending[state] = pending
        try:
            await self._relay_opened(pending)
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
            with anyio.CancelScope(shield=True):
                if keeper is not None and not self._left(pending):
                    await keeper.close()
                await self._relay_closed(state)
        if self._left(pending):
            raise SignInFailed(
                account.server.name,
                "was not finished when the bot stopped; once back, it sends you a new link",
            )
        self.prompts.complete(
            prompt.scope, prompt.elicitation_id or ""
        )  # off the awaiting list, if still on it
        consented = prompt.outcome is Outcome.ANSWERED  # its card shows the link and waits: settle it now
        if pending.result is not None:
            pending.consented = (
                consented  # settled by `Account.exchange_over`, once the code is exchanged (or not)
            )
            account.exchanging(pending)
            return pending.result
        if pending.failure is None:
            pending.failure = "was not completed in time"
        if consented:
            timed_out = pending.failure == "was not completed in time"
            ended = Outcome.SHUTDOWN if self.stopping else Outcome.EXPIRED if timed_out else Outcome.CANCELLED
            await self.prompts.settle_completed(prompt, ended)
        raise SignInFailed(account.server.name, pending.failure)

    async def _relay_opened(self, pending: Pending) -> None:
        """Written for the fleet before the card shows its link; a failed write leaves it to this instance."""
        expires = time.time() + max(0.0, pending.deadline - time.monotonic())
        try:
            await self.relay.opened(pending.state, pending.user_id, pending.server, expires)
        except StoreUnavailable as exc:
            logger.warning("sign-in to %s: only this instance can take its return: %s", pending.server, exc)

    async def _relay_closed(self, state: str) -> None:
        try:
            await self.relay.closed(state)
        except StoreUnavailable as exc:
            logger.warning("could not forget a pending sign-in (it expires anyway): %s", exc)

    async def record(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None:
        """Into the audit log, when there is one."""
        if self.audit is not None:
            await self.audit(event, user_id, server, detail)

    def _keeper(self, prompt: Prompt) -> RoundKeeper | None:
        """The sign-in's row in the book (written when its card is shown, told where the card stands)."""
        if self.book is None:
            return None
        request = prompt.request
        params = {
            "mode": "url",
            "message": request.prompt,
            "url": request.url,
            "elicitationId": prompt.elicitation_id,
        }
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

    def _left(self, pending: Pending) -> bool:
        """Whether the sign-in is left for the next process: kept, the process leaving (a drain's end), and the
        browser not back with a code."""
        return self.prompts.kept(pending.prompt) and pending.result is None

    async def _ask(self, pending: Pending) -> None:
        """Show the card; a refusal (Decline, Cancel, expiry) ends the wait for the browser."""
        answer = await self.prompts.ask(pending.prompt)
        if not answer.ok and not pending.done.is_set():
            pending.failure = {"declined": "was declined", "timeout": "was not completed in time"}.get(
                answer.reason or "", "was cancelled"
            )
            pending.done.set()

    async def _revoke(self, account: Account | None, user_id: int, server: ServerConfig, tokens: str) -> bool:
        """RFC 7009 revocation of the refresh (else access) token, where the server's metadata offers it."""
        try:
            token = OAuthToken.model_validate_json(tokens)
        except ValidationError:
            return False
        oauth = server.oauth
        assert server.url is not None
        client = client_info_of(await self.store.client(user_id, server.name))
        if oauth is not None and oauth.client_id is not None:
            client = preregistered_client(oauth, self.redirect_uri, None, client)
        if client is None:
            return False
        issuer = account.issuer if account is not None else None
        if issuer is None:
            issuer = next(
                (a.issuer for a in await self.store.accounts(user_id) if a.server == server.name), None
            )
        metadata = account.metadata if account is not None else None
        if metadata is None and not issuer:
            return False
        hint = "refresh_token" if token.refresh_token else "access_token"
        return await revoke(
            server.url, client, metadata, issuer, token.refresh_token or token.access_token, hint
        )


async def _cancelled_by_hand(pending: Pending) -> None:
    """The person tapped Cancel on the consented card (it marks the prompt completed by hand)."""
    await pending.prompt.completed.wait()
    if not pending.done.is_set():
        pending.failure = "was cancelled"
        pending.done.set()

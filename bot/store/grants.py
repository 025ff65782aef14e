"""The gateway's own OAuth authorization server, in the database: its clients, the consent requests on their way
from a browser to a phone and back, and the tokens it issued. Does I/O.

Everything lives in rows, so in a fleet the authorize page, the consent card's tap, the page's poll and the token
endpoint may each land on a different instance. Every secret is kept as its SHA-256 (the page's secret, the
`t.me` start code, the authorization code, access and refresh tokens: all 256 random bits, so a plain hash is
enough). Each step of a consent is one compare-and-set on its `state`:

    waiting --/start by an allowed person--> shown --Allow--> allowed --the page polls--> issued --/token--> exchanged
                                                   --Deny---> denied  --the page polls--> closed

A grant is a row of `agent_tokens` (`AgentStore.grant`): listed, counted and revoked in `/agents` like a pasted
token; every token issued for it dies with it. A code or a rotated refresh token presented again revokes the
grant (a copy of it is loose). Every method raises `StoreUnavailable` when the database cannot be used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.agents import TOKEN_PREFIX, AgentToken, hash_token
from bot.store.agents import AgentStore, Revoker
from bot.store.audit import AuditEvent, AuditLog
from bot.store.errors import unavailable_as
from bot.store.tables import oauth_clients, oauth_consents, oauth_tokens

__all__ = [
    "ACCESS_PREFIX",
    "ACCESS_TTL_S",
    "CODE_TTL_S",
    "CONSENT_TTL_S",
    "REFRESH_PREFIX",
    "Consent",
    "GrantStore",
    "Issued",
    "Opened",
    "TokenRow",
    "start_code",
]

ACCESS_PREFIX: Final = TOKEN_PREFIX + "at_"
"""An OAuth access token (the agent tokens' prefix first: the logs' filter removes it like one)."""
REFRESH_PREFIX: Final = TOKEN_PREFIX + "rt_"
CONSENT_TTL_S: Final = 600.0
"""How long an authorize request waits for its person's tap."""
CODE_TTL_S: Final = 120.0
"""How long an authorization code may be exchanged once the page has it."""
ACCESS_TTL_S: Final = 3600
"""An access token's life; its client refreshes it (the refresh token lasts as long as the grant)."""
KEEP_ROTATED_S: Final = 30 * 86400.0
"""How long a rotated refresh token is remembered (presented again meanwhile, it revokes its grant)."""
_MATCH_ALPHABET: Final = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def _now() -> float:
    return time.time()


def start_code(page: str) -> str:
    """The `t.me/<bot>?start=` code of the consent request whose page secret is `page`: derived from it (one
    way), so the page can show its button while the store keeps neither; a tapper who has only the code cannot
    reach the page, or the authorization code the page receives. 43 URL-safe characters (Telegram takes 64)."""
    digest = hashlib.sha256(b"toolnexus-consent-start:" + page.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class Consent:
    """One authorize request, as the page, the card and the token endpoint see it."""

    id: str
    client_id: str
    client_name: str
    request: dict[str, Any]
    """What the authorize endpoint checked: `redirect_uri`, `explicit`, `state`, `challenge`, `scopes`, `resource`."""
    match: str
    """A short code the page and the card both show, so the person can see the card is for the page they opened."""
    state: str
    user_id: int | None
    """Who tapped the link: the grant is theirs."""
    grant_id: int | None
    expires: float


@dataclass(frozen=True, slots=True)
class Opened:
    """A new consent request's secrets (the only time they exist outside their holders)."""

    consent: Consent
    page: str
    """In the authorize page's address: the browser's, to poll with."""
    link: str
    """The `t.me/<bot>?start=` code (`start_code(page)`): whoever taps it is asked."""


@dataclass(frozen=True, slots=True)
class Issued:
    """Tokens issued for a grant."""

    access: str
    refresh: str
    expires_in: int
    grant: AgentToken


@dataclass(frozen=True, slots=True)
class TokenRow:
    """An issued token that still works, and its grant."""

    kind: str
    client_id: str
    resource: str
    expires: float | None
    grant: AgentToken


class GrantStore:
    """The `oauth_*` tables of one database; grants are `agents`' rows."""

    def __init__(
        self, engine: AsyncEngine, agents: AgentStore, log: AuditLog | None, clock: Callable[[], float] = _now
    ) -> None:
        self.engine = engine
        self.agents = agents
        self.log = log
        self.clock = clock

    # -- clients ------------------------------------------------------------------------------------------

    @unavailable_as("reading an OAuth client")
    async def client(self, client_id: str) -> tuple[dict[str, Any], float] | None:
        """A client's metadata as stored, and when it was stored (Unix time)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(oauth_clients).where(oauth_clients.c.client_id == client_id))
            ).first()
        return None if row is None else (json.loads(row.info), row.created)

    @unavailable_as("storing an OAuth client")
    async def put_client(self, client_id: str, info: dict[str, Any]) -> None:
        """Store (or replace: a metadata document fetched again) a client's metadata."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(oauth_clients).where(oauth_clients.c.client_id == client_id))
            await conn.execute(
                insert(oauth_clients).values(client_id=client_id, info=json.dumps(info), created=self.clock())
            )

    # -- consent ------------------------------------------------------------------------------------------

    @unavailable_as("storing an OAuth consent request")
    async def open(self, client_id: str, client_name: str, request: dict[str, Any]) -> Opened:
        """A consent request waiting for a tap, for `CONSENT_TTL_S`."""
        page = secrets.token_urlsafe(32)
        link = start_code(page)
        match = "".join(secrets.choice(_MATCH_ALPHABET) for _ in range(4))
        consent = Consent(
            secrets.token_urlsafe(12),
            client_id,
            client_name[:200],
            request,
            match,
            "waiting",
            None,
            None,
            self.clock() + CONSENT_TTL_S,
        )
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(oauth_consents).where(oauth_consents.c.expires < self.clock() - CONSENT_TTL_S)
            )
            await conn.execute(
                insert(oauth_consents).values(
                    id=consent.id,
                    page_hash=hash_token(page),
                    link_hash=hash_token(link),
                    client_id=client_id,
                    client_name=consent.client_name,
                    request=json.dumps(request),
                    match=match,
                    state=consent.state,
                    expires=consent.expires,
                )
            )
        return Opened(consent, page, link)

    @unavailable_as("reading an OAuth consent request")
    async def by_page(self, page: str) -> Consent | None:
        """The request whose page secret this is (None: unknown)."""
        return await self._one(oauth_consents.c.page_hash == hash_token(page))

    @unavailable_as("reading an OAuth consent request")
    async def by_id(self, consent_id: str) -> Consent | None:
        return await self._one(oauth_consents.c.id == consent_id)

    async def _one(self, where: Any) -> Consent | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(oauth_consents).where(where))).first()
        return None if row is None else _consent(row)

    @unavailable_as("claiming an OAuth consent request")
    async def claim(self, link: str, user_id: int) -> Consent | None:
        """The request whose start code this is, now shown to `user_id` (the tapper: the grant would be theirs);
        None when unknown, expired, or claimed before (the code works once)."""
        where = (
            (oauth_consents.c.link_hash == hash_token(link))
            & (oauth_consents.c.state == "waiting")
            & (oauth_consents.c.expires > self.clock())
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(oauth_consents).where(where).values(state="shown", user_id=user_id)
            )
        if not result.rowcount:
            return None
        return await self._one(oauth_consents.c.link_hash == hash_token(link))

    @unavailable_as("deciding an OAuth consent request")
    async def decide(self, consent_id: str, user_id: int, allow: bool) -> Consent | None:
        """`user_id`'s Allow or Deny on the card they were shown (audited); None when the request is not theirs,
        no longer waits for them, or expired."""
        where = (
            (oauth_consents.c.id == consent_id)
            & (oauth_consents.c.state == "shown")
            & (oauth_consents.c.user_id == user_id)
            & (oauth_consents.c.expires > self.clock())
        )
        state = "allowed" if allow else "denied"
        async with self.engine.begin() as conn:
            result = await conn.execute(update(oauth_consents).where(where).values(state=state))
        if not result.rowcount:
            return None
        consent = await self._one(oauth_consents.c.id == consent_id)
        assert consent is not None
        if self.log is not None:
            event = AuditEvent.OAUTH_CONSENTED if allow else AuditEvent.OAUTH_DENIED
            detail = {"client": consent.client_name, "client_id": consent.client_id, "consent": consent.id}
            await self.log.record(event, user_id=user_id, detail=detail)
        return consent

    @unavailable_as("finishing an OAuth consent request")
    async def finish(self, page: str) -> tuple[Consent, str | None] | None:
        """The page's poll: once its person decided, the request and (when allowed) a fresh authorization code
        for `CODE_TTL_S`, returned once (the request moves on: a second poll gets nothing new). None while the
        request waits, or when it is unknown, expired or finished before."""
        consent = await self._one(oauth_consents.c.page_hash == hash_token(page))
        if consent is None or consent.state not in ("allowed", "denied"):
            return None
        code = secrets.token_urlsafe(32) if consent.state == "allowed" else None
        values: dict[str, Any] = (
            {"state": "closed"}
            if code is None
            else {"state": "issued", "code_hash": hash_token(code), "expires": self.clock() + CODE_TTL_S}
        )
        where = (oauth_consents.c.id == consent.id) & (oauth_consents.c.state == consent.state)
        async with self.engine.begin() as conn:
            result = await conn.execute(update(oauth_consents).where(where).values(**values))
        return (consent, code) if result.rowcount else None

    # -- tokens -------------------------------------------------------------------------------------------

    @unavailable_as("reading an authorization code")
    async def code(self, code: str) -> Consent | None:
        """The request an unexchanged, unexpired code was issued for; a code exchanged before revokes the grant
        made from it (RFC 6749 §4.1.2: a code is used once) and finds nothing."""
        consent = await self._one(oauth_consents.c.code_hash == hash_token(code))
        if consent is None:
            return None
        if consent.state == "exchanged" and consent.grant_id is not None:
            await self.agents.revoke_id(consent.grant_id, Revoker.REPLAY)
            return None
        if consent.state != "issued" or consent.expires <= self.clock():
            return None
        return consent

    @unavailable_as("exchanging an authorization code")
    async def exchange(self, code: str, resource: str) -> Issued | None:
        """The grant and its first tokens, for the person who allowed it; None when the code was exchanged (or
        expired) meanwhile."""
        consent = await self._one(oauth_consents.c.code_hash == hash_token(code))
        if consent is None or consent.user_id is None:
            return None
        where = (
            (oauth_consents.c.id == consent.id)
            & (oauth_consents.c.state == "issued")
            & (oauth_consents.c.expires > self.clock())
        )
        async with self.engine.begin() as conn:
            result = await conn.execute(update(oauth_consents).where(where).values(state="exchanged"))
        if not result.rowcount:
            return None
        detail = {"oauth_client": consent.client_name, "client_id": consent.client_id}
        grant = await self.agents.grant(consent.user_id, consent.client_name, detail)
        async with self.engine.begin() as conn:
            await conn.execute(
                update(oauth_consents).where(oauth_consents.c.id == consent.id).values(grant_id=grant.id)
            )
        return await self._issue(grant, consent.client_id, resource)

    async def _issue(self, grant: AgentToken, client_id: str, resource: str) -> Issued:
        """New tokens for `grant`; its expired access tokens, and refresh tokens rotated over `KEEP_ROTATED_S`
        ago, go (a rotated one is kept that long to catch its replay)."""
        access, refresh = (
            ACCESS_PREFIX + secrets.token_urlsafe(32),
            REFRESH_PREFIX + secrets.token_urlsafe(32),
        )
        common = {"grant_id": grant.id, "client_id": client_id, "resource": resource}
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(oauth_tokens).where(
                    oauth_tokens.c.grant_id == grant.id,
                    (oauth_tokens.c.expires < now) | (oauth_tokens.c.rotated < now - KEEP_ROTATED_S),
                )
            )
            await conn.execute(
                insert(oauth_tokens).values(
                    token_hash=hash_token(access),
                    kind="access",
                    expires=now + ACCESS_TTL_S,
                    **common,
                )
            )
            await conn.execute(
                insert(oauth_tokens).values(token_hash=hash_token(refresh), kind="refresh", **common)
            )
        return Issued(access, refresh, ACCESS_TTL_S, grant)

    @unavailable_as("checking an OAuth token")
    async def token(self, text: str, kind: str) -> TokenRow | None:
        """The `kind` token whose text this is, when it and its grant still work. A refresh token rotated before
        revokes its grant (its copy is loose) and finds nothing."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(oauth_tokens).where(
                        oauth_tokens.c.token_hash == hash_token(text), oauth_tokens.c.kind == kind
                    )
                )
            ).first()
        if row is None:
            return None
        if row.rotated is not None:
            await self.agents.revoke_id(row.grant_id, Revoker.REPLAY)
            return None
        if row.expires is not None and row.expires <= self.clock():
            return None
        grant = await self.agents.live_one(row.grant_id)
        if grant is None:
            return None
        return TokenRow(row.kind, row.client_id, row.resource, row.expires, grant)

    @unavailable_as("rotating a refresh token")
    async def rotate(self, refresh: str, client_id: str) -> Issued | None:
        """New tokens for the refresh token's grant (audited); the old refresh token stops working (presented
        again, it revokes the grant). None when it was rotated meanwhile or its grant ended."""
        found = await self.token(refresh, "refresh")
        if found is None or found.client_id != client_id:
            return None
        where = (oauth_tokens.c.token_hash == hash_token(refresh)) & oauth_tokens.c.rotated.is_(None)
        async with self.engine.begin() as conn:
            result = await conn.execute(update(oauth_tokens).where(where).values(rotated=self.clock()))
        if not result.rowcount:
            return None
        if self.log is not None:
            detail = {"agent": found.grant.name, "token_id": found.grant.id, "client_id": client_id}
            await self.log.record(AuditEvent.OAUTH_REFRESHED, user_id=found.grant.user_id, detail=detail)
        return await self._issue(found.grant, client_id, found.resource)

    @unavailable_as("revoking an OAuth grant")
    async def revoke(self, grant_id: int) -> bool:
        """The client's own revocation (RFC 7009): the whole grant, every token issued for it with it."""
        return await self.agents.revoke_id(grant_id, Revoker.CLIENT)


def _consent(row: Row[Any]) -> Consent:
    return Consent(
        row.id,
        row.client_id,
        row.client_name,
        json.loads(row.request),
        row.match,
        row.state,
        row.user_id,
        row.grant_id,
        row.expires,
    )

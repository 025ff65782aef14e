"""Agent tokens in the database (`agent_tokens` table): the store's `AgentBook` (`bot.core.agents`). Does I/O.

Only a token's SHA-256 hash is kept (`hash_token`); its text exists once, in `create`'s return value. Every read
goes to the database (no cache), so a revoked token is refused at the gateway's next request, in every process
sharing the database. Every method raises `StoreUnavailable` (not the ORM's errors) when the database cannot be
read or written. Times are UTC, ISO 8601 with microseconds, from an injectable clock.

Making, revoking and the expiry of a token are audited (its person, its name and id, who did it; never the
token): a revocation once (of two racing, the one that changed the row), an expiry once (`expiry_noted` is set by
one compare-and-set, by whichever process first finds the token expired). An audit row that cannot be written is
logged, and does not undo what was done (as the `AuditObserver`).
"""

from __future__ import annotations

import datetime as dt
import enum
import re
from collections.abc import Callable, Collection
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.agents import AGENT_NAME, TOKEN_PREFIX, AgentToken, TokenEnd, hash_token, new_token_text
from bot.store.audit import AuditEvent, AuditLog
from bot.store.errors import unavailable_as
from bot.store.tables import agent_tokens

__all__ = ["AgentStore", "Revoker", "utc_now"]


class Revoker(enum.StrEnum):
    """Who revoked a token, as its audit row says."""

    PERSON = "person"
    """The token's person, in the chat (`/agents`)."""
    OPERATOR = "operator"
    """The bot's operator, on the command line (`toolnexus-bot agents revoke`)."""
    CLIENT = "client"
    """An OAuth grant's own client, at the gateway's revocation endpoint."""
    REPLAY = "replay"
    """An OAuth grant whose authorization code or rotated refresh token was presented again (a copy is loose)."""


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class AgentStore:
    """The `agent_tokens` table of one database (the `AgentBook` of `bot.core`)."""

    def __init__(
        self, engine: AsyncEngine, clock: Callable[[], dt.datetime] = utc_now, log: AuditLog | None = None
    ) -> None:
        self.engine = engine
        self.clock = clock
        """What "now" is (an aware datetime): expiry is judged by it (tests give a virtual one)."""
        self.log = log
        """Where making, revoking and expiring tokens are recorded (None: nowhere)."""

    @unavailable_as("storing an agent token")
    async def create(self, user_id: int, name: str, days: int) -> tuple[AgentToken, str]:
        """A new token for `user_id` named `name`, lasting `days` (0: until revoked); returns it and its text.

        Raises:
            ValueError: the name is not 1-32 of A-Z a-z 0-9 _ . - (starting with a letter or digit), `days` is
                negative, or the person already has a live token of that name.
            StoreUnavailable: the database cannot be read or written.
        """
        if AGENT_NAME.fullmatch(name) is None:
            raise ValueError(
                f"bad agent name {name!r}: use 1-32 of A-Z a-z 0-9 _ . -, starting with a letter or digit"
            )
        if days < 0:
            raise ValueError(f"days must be 0 (until revoked) or more, not {days}")
        now = self.clock()
        expires = None if days == 0 else now + dt.timedelta(days=days)
        text = new_token_text()
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(
                    select(agent_tokens).where(
                        agent_tokens.c.user_id == user_id,
                        agent_tokens.c.name == name,
                        agent_tokens.c.revoked.is_(None),
                    )
                )
            ).all()
            if any(_token(row).live(now) for row in rows):
                raise ValueError(
                    f"you already have an agent named {name!r}: revoke it first, or pick another name"
                )
            result = await conn.execute(
                insert(agent_tokens).values(
                    user_id=user_id,
                    name=name,
                    token_hash=hash_token(text),
                    created=_iso(now),
                    expires=None if expires is None else _iso(expires),
                    calls=0,
                )
            )
            token_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
        if not isinstance(token_id, int):
            raise RuntimeError("the database gave the new agent token no id")
        token = AgentToken(
            token_id,
            user_id,
            name,
            created=_read(_iso(now)),
            expires=None if expires is None else _read(_iso(expires)),
            last_used=None,
            calls=0,
        )
        await self._audit(
            AuditEvent.AGENT_TOKEN_CREATED,
            token,
            {"expires": None if token.expires is None else _iso(token.expires)},
        )
        return token, text

    @unavailable_as("storing an OAuth grant")
    async def grant(self, user_id: int, client: str, detail: dict[str, Any]) -> AgentToken:
        """A grant to an OAuth client, as a token row of `user_id` named after `client` (made a valid name: each run of
        other characters becomes `-`; `-2`, `-3`... when the person has a live token of that name), audited as made with
        `detail`. Its row keeps the hash of a secret nobody is given: the grant is never a bearer token itself,
        the tokens issued for it are (`bot.store.grants`); it is listed, used and revoked as a token is.

        Raises:
            StoreUnavailable: the database cannot be read or written.
        """
        base = re.sub(r"[^A-Za-z0-9_.-]+", "-", client).strip("-.")[:28] or "oauth-client"
        if not base[0].isalnum():
            base = "c" + base[:27]
        now = self.clock()
        async with self.engine.begin() as conn:
            rows = (
                await conn.execute(
                    select(agent_tokens).where(
                        agent_tokens.c.user_id == user_id, agent_tokens.c.revoked.is_(None)
                    )
                )
            ).all()
            taken = {token.name for token in map(_token, rows) if token.live(now)}
            name = next(n for n in (base, *(f"{base}-{i}" for i in range(2, 10_000))) if n not in taken)
            result = await conn.execute(
                insert(agent_tokens).values(
                    user_id=user_id,
                    name=name,
                    token_hash=hash_token(new_token_text()),
                    created=_iso(now),
                    calls=0,
                )
            )
            token_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
        if not isinstance(token_id, int):
            raise RuntimeError("the database gave the new grant no id")
        token = AgentToken(token_id, user_id, name, _read(_iso(now)), None, None, 0)
        await self._audit(AuditEvent.AGENT_TOKEN_CREATED, token, {"expires": None, **detail})
        return token

    @unavailable_as("reading an agent token")
    async def live_one(self, token_id: int) -> AgentToken | None:
        """The token (or grant) `token_id` when it still works; None when revoked, expired or gone."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(agent_tokens).where(agent_tokens.c.id == token_id))).first()
        if row is None:
            return None
        token = _token(row)
        return token if token.live(self.clock()) else None

    @unavailable_as("revoking an agent token")
    async def revoke_id(self, token_id: int, by: Revoker) -> bool:
        """Revoke the token (or grant) `token_id`, audited as `by`'s doing; False when it was revoked already."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(agent_tokens).where(agent_tokens.c.id == token_id))).first()
            if row is None:
                return False
            result = await conn.execute(
                update(agent_tokens)
                .where(agent_tokens.c.id == token_id, agent_tokens.c.revoked.is_(None))
                .values(revoked=_iso(self.clock()))
            )
        if not result.rowcount:
            return False
        await self._audit(AuditEvent.AGENT_TOKEN_REVOKED, _token(row), {"by": by.value})
        return True

    @unavailable_as("checking an agent token")
    async def verify(self, text: str) -> AgentToken | None:
        """The live token whose text this is; None when unknown, revoked or expired."""
        if not text.startswith(TOKEN_PREFIX):
            return None
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(agent_tokens).where(agent_tokens.c.token_hash == hash_token(text)))
            ).first()
        if row is None:
            return None
        token = _token(row)
        if token.live(self.clock()):
            return token
        if token.revoked is None and row.expiry_noted is None:  # written once, not on every refused request
            await self._note_expired(token)
        return None

    @unavailable_as("checking agent tokens")
    async def ended(self, ids: Collection[int]) -> dict[int, TokenEnd]:
        """Of the tokens `ids`, those that no longer work, and why; one first found expired is audited so."""
        if not ids:
            return {}
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(agent_tokens).where(agent_tokens.c.id.in_(ids)))).all()
        found = {token.id: token for token in map(_token, rows)}
        noted = {row.id for row in rows if row.expiry_noted is not None}
        now = self.clock()
        ended: dict[int, TokenEnd] = {}
        for token_id in ids:
            token = found.get(token_id)
            if token is None:
                ended[token_id] = TokenEnd.DELETED
            elif token.revoked is not None:
                ended[token_id] = TokenEnd.REVOKED
            elif not token.live(now):
                ended[token_id] = TokenEnd.EXPIRED
                if token_id not in noted:
                    await self._note_expired(token)
        return ended

    async def _note_expired(self, token: AgentToken) -> None:
        """Audit that `token` expired, unless a process did so before (one compare-and-set decides)."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(agent_tokens)
                .where(agent_tokens.c.id == token.id, agent_tokens.c.expiry_noted.is_(None))
                .values(expiry_noted=_iso(self.clock()))
            )
        if result.rowcount:
            detail = {"expired": None if token.expires is None else _iso(token.expires)}
            await self._audit(AuditEvent.AGENT_TOKEN_EXPIRED, token, detail)

    @unavailable_as("counting an agent's call")
    async def used(self, token_id: int) -> None:
        """Count one tool call on the token and set its `last_used` (one UPDATE)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(agent_tokens)
                .where(agent_tokens.c.id == token_id)
                .values(calls=agent_tokens.c.calls + 1, last_used=_iso(self.clock()))
            )

    @unavailable_as("reading agent tokens")
    async def of(self, user_id: int) -> list[AgentToken]:
        """The person's live tokens, oldest first."""
        return await self.live(user_id)

    @unavailable_as("reading agent tokens")
    async def live(self, user_id: int | None = None) -> list[AgentToken]:
        """The live tokens of everyone (or of `user_id`), by person, oldest first."""
        query = select(agent_tokens).where(agent_tokens.c.revoked.is_(None))
        if user_id is not None:
            query = query.where(agent_tokens.c.user_id == user_id)
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    query.order_by(agent_tokens.c.user_id, agent_tokens.c.created, agent_tokens.c.id)
                )
            ).all()
        now = self.clock()
        return [token for token in map(_token, rows) if token.live(now)]

    async def revoke(self, user_id: int, name: str) -> bool:
        """Revoke the person's live token `name` (audited as the person's doing); False when there is none."""
        return bool(await self.revoke_tokens(user_id, name, Revoker.PERSON))

    @unavailable_as("revoking an agent token")
    async def revoke_tokens(self, user_id: int, name: str | None, by: Revoker) -> list[AgentToken]:
        """Revoke the person's live token `name` (every live one of theirs with None), each audited as `by`'s
        doing; returns those this call revoked (of two revokes racing, one reports each token)."""
        now = self.clock()
        query = select(agent_tokens).where(
            agent_tokens.c.user_id == user_id, agent_tokens.c.revoked.is_(None)
        )
        if name is not None:
            query = query.where(agent_tokens.c.name == name)
        revoked: list[AgentToken] = []
        async with self.engine.begin() as conn:
            for token in map(_token, (await conn.execute(query)).all()):
                if not token.live(now):
                    continue
                # `revoked IS NULL` again: of two revokes racing, one reports it.
                result = await conn.execute(
                    update(agent_tokens)
                    .where(agent_tokens.c.id == token.id, agent_tokens.c.revoked.is_(None))
                    .values(revoked=_iso(now))
                )
                if result.rowcount:
                    revoked.append(token)
        for token in revoked:
            await self._audit(AuditEvent.AGENT_TOKEN_REVOKED, token, {"by": by.value})
        return revoked

    async def _audit(self, event: AuditEvent, token: AgentToken, detail: dict[str, Any]) -> None:
        """One audit row about `token`: its person, name and id (never its text or hash)."""
        if self.log is not None:
            detail = {"agent": token.name, "token_id": token.id, **detail}
            await self.log.record(event, user_id=token.user_id, detail=detail)


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _read(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def _maybe(text: str | None) -> dt.datetime | None:
    return None if text is None else _read(text)


def _token(row: Row[Any]) -> AgentToken:
    return AgentToken(
        id=row.id,
        user_id=row.user_id,
        name=row.name,
        created=_read(row.created),
        expires=_maybe(row.expires),
        last_used=_maybe(row.last_used),
        calls=row.calls,
        revoked=_maybe(row.revoked),
    )

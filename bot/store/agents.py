"""Agent tokens in the database (`agent_tokens` table): the store's `AgentBook` (`bot.core.agents`). Does I/O.

Only a token's SHA-256 hash is kept (`hash_token`); its text exists once, in `create`'s return value. Every read
goes to the database (no cache), so a revoked token is refused at the gateway's next request, in every process
sharing the database. Every method raises `StoreUnavailable` (not the ORM's errors) when the database cannot be
read or written. Times are UTC, ISO 8601 with microseconds, from an injectable clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.agents import AGENT_NAME, TOKEN_PREFIX, AgentToken, hash_token, new_token_text
from bot.store.errors import unavailable_as
from bot.store.tables import agent_tokens

__all__ = ["AgentStore", "utc_now"]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class AgentStore:
    """The `agent_tokens` table of one database (the `AgentBook` of `bot.core`)."""

    def __init__(self, engine: AsyncEngine, clock: Callable[[], dt.datetime] = utc_now) -> None:
        self.engine = engine
        self.clock = clock
        """What "now" is (an aware datetime): expiry is judged by it (tests give a virtual one)."""

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
        return token, text

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
        return token if token.live(self.clock()) else None

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
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(agent_tokens)
                    .where(agent_tokens.c.user_id == user_id, agent_tokens.c.revoked.is_(None))
                    .order_by(agent_tokens.c.created, agent_tokens.c.id)
                )
            ).all()
        now = self.clock()
        return [token for token in map(_token, rows) if token.live(now)]

    @unavailable_as("revoking an agent token")
    async def revoke(self, user_id: int, name: str) -> bool:
        """Revoke the person's live token `name`; False when there is none."""
        now = self.clock()
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
            ids = [token.id for token in map(_token, rows) if token.live(now)]
            if not ids:
                return False
            # `revoked IS NULL` again: of two revokes racing, one reports it.
            result = await conn.execute(
                update(agent_tokens)
                .where(agent_tokens.c.id.in_(ids), agent_tokens.c.revoked.is_(None))
                .values(revoked=_iso(now))
            )
        return bool(result.rowcount)


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

"""Per-person OAuth sign-ins in the database: tokens and client registrations, sealed at rest. Does I/O.

One row per (Telegram user, server). The token response and the client registration are kept as JSON
sealed with `[storage] secret_key` (`bot.store.crypto`), each bound to its row; the issuer and the access
token's expiry are kept in the clear (`/accounts` shows them, and a provider rebuilt after a restart needs
the expiry to refresh instead of asking the person to sign in again). Nothing here logs a value.

`refreshing` serialises refreshes per (user, server): an anyio lock in the process, and on PostgreSQL a
transaction-level advisory lock (`pg_advisory_xact_lock`) that other processes on the database wait for too. On
SQLite the process's lock is enough: one bot process per SQLite file (`bot.store.instances`).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from sqlalchemy import Row, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import Account
from bot.store.crypto import Sealer, Unreadable
from bot.store.locks import advisory_key
from bot.store.tables import oauth_accounts

__all__ = ["Account", "SignInStore"]


class SignInStore:
    """The `oauth_accounts` table of one database, sealed with one key (the `SignInBook` of `bot.core`)."""

    def __init__(self, engine: AsyncEngine, secret_key: str) -> None:
        self.engine = engine
        self._sealer = Sealer(secret_key)
        self._refreshes: dict[tuple[int, str], anyio.Lock] = {}

    @asynccontextmanager
    async def refreshing(self, user_id: int, server: str) -> AsyncIterator[None]:
        """One refresh at a time for the person on `server` (see the module's docstring). On PostgreSQL a
        transaction (and its connection) stays open while the refresh runs: its lock ends with it, or with the
        connection if the process dies."""
        lock = self._refreshes.setdefault((user_id, server), anyio.Lock())
        async with lock:
            if self.engine.dialect.name != "postgresql":
                yield
                return
            async with self.engine.begin() as conn:
                await conn.execute(
                    select(func.pg_advisory_xact_lock(advisory_key(f"refresh {user_id}/{server}")))
                )
                yield

    async def tokens(self, user_id: int, server: str) -> tuple[str, float | None] | None:
        """The token response (JSON) and its expiry; None when there is none, or it cannot be read with
        this key (a changed key means signing in again, never an error)."""
        row = await self._row(user_id, server)
        if row is None or row.tokens is None:
            return None
        try:
            return self._sealer.open(row.tokens, _context(user_id, server, "tokens")), row.expires_at
        except Unreadable:
            return None

    async def client(self, user_id: int, server: str) -> str | None:
        """The client registration (JSON), if any and readable."""
        row = await self._row(user_id, server)
        if row is None or row.client is None:
            return None
        try:
            return self._sealer.open(row.client, _context(user_id, server, "client"))
        except Unreadable:
            return None

    async def save_tokens(
        self, user_id: int, server: str, tokens: str, expires_at: float | None, issuer: str | None
    ) -> None:
        sealed = self._sealer.seal(tokens, _context(user_id, server, "tokens"))
        values: dict[str, object] = {"tokens": sealed, "expires_at": expires_at}
        if issuer is not None:
            values["issuer"] = issuer
        await self._upsert(user_id, server, values)

    async def save_client(self, user_id: int, server: str, client: str, issuer: str | None) -> None:
        sealed = self._sealer.seal(client, _context(user_id, server, "client"))
        values: dict[str, object] = {"client": sealed}
        if issuer is not None:
            values["issuer"] = issuer
        await self._upsert(user_id, server, values)

    async def forget_tokens(self, user_id: int, server: str) -> None:
        """Drop the tokens (a refresh failed), keeping the client registration."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(oauth_accounts)
                .where(oauth_accounts.c.user_id == user_id, oauth_accounts.c.server == server)
                .values(tokens=None, expires_at=None, updated_at=_now())
            )

    async def delete(self, user_id: int, server: str) -> bool:
        """Forget the person's sign-in to `server` altogether; False when there was none."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                delete(oauth_accounts).where(
                    oauth_accounts.c.user_id == user_id, oauth_accounts.c.server == server
                )
            )
        return bool(result.rowcount)

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's sign-ins, by server name."""
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(
                        oauth_accounts.c.server,
                        oauth_accounts.c.issuer,
                        oauth_accounts.c.expires_at,
                        oauth_accounts.c.tokens.is_not(None),
                    )
                    .where(oauth_accounts.c.user_id == user_id)
                    .order_by(oauth_accounts.c.server)
                )
            ).all()
        return [Account(server, issuer, expires_at, bool(held)) for server, issuer, expires_at, held in rows]

    async def _row(self, user_id: int, server: str) -> Row[Any] | None:
        async with self.engine.connect() as conn:
            return (
                await conn.execute(
                    select(oauth_accounts).where(
                        oauth_accounts.c.user_id == user_id, oauth_accounts.c.server == server
                    )
                )
            ).first()

    async def _upsert(self, user_id: int, server: str, values: dict[str, object]) -> None:
        where = (oauth_accounts.c.user_id == user_id, oauth_accounts.c.server == server)
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(oauth_accounts).where(*where).values(**values, updated_at=_now())
            )
            if not changed.rowcount:
                await conn.execute(
                    insert(oauth_accounts).values(
                        id=str(uuid.uuid4()), user_id=user_id, server=server, updated_at=_now(), **values
                    )
                )


def _context(user_id: int, server: str, what: str) -> str:
    return f"{user_id}/{server}/{what}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")

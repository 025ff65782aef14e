"""Who is alive on the database: a running bot holds its place for its whole life, and a second one that could
not work beside it is refused at start (`claim_instance`). Does I/O.

Refused: a second bot on the same SQLite file (one process per file: the store is not made to be shared), and a
second bot polling Telegram for the same bot on the same PostgreSQL database (Telegram hands each update to one
`getUpdates` only, and ends the other's with 409 Conflict). Several bots in webhook mode on PostgreSQL are
allowed: that is the fleet (docs/fleet.md). Each place is a lock that ends with its process, SIGKILL included, so
a restart after a crash is never refused: an `flock` beside the SQLite file, and a PostgreSQL session advisory
lock on a connection held for the process's life.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import anyio
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from bot.store.engine import (
    database_url,
    display_url,
    failure_reason,
    is_file_database,
    prepare_file_database,
)
from bot.store.errors import SecondInstance, StoreUnavailable
from bot.store.locks import advisory_key, try_file_lock

__all__ = ["SEVERAL", "claim_instance"]

SEVERAL: Final = 'to run several instances, use PostgreSQL ([storage] url) and telegram.mode = "webhook"'
"""What to do instead, said by every refusal."""


@asynccontextmanager
async def claim_instance(url: str, *, polling_bot: str | None) -> AsyncIterator[None]:
    """Hold this process's place on the database at `url` for the block: on a SQLite file always, on
    PostgreSQL while polling for bot `polling_bot` (None: webhook mode, nothing to hold).

    Raises:
        SecondInstance: another live process holds that place; the message says what to do.
        StoreUnavailable: PostgreSQL cannot be reached.
    """
    if is_file_database(url):
        try:
            path = prepare_file_database(url)
            fd = try_file_lock(path.with_name(f"{path.name}-instance.lock"))
        except OSError as exc:  # as `open_store` says it: the folder or file that is not writable
            raise StoreUnavailable(f"database {display_url(url)}: {failure_reason(exc)}", file=True) from exc
        if fd is None:
            raise SecondInstance(
                f"another toolnexus-bot is running on the SQLite database {path}: stop it first, or, {SEVERAL}"
            )
        try:
            yield
        finally:
            os.close(fd)  # releases the lock (as the process's death would)
        return
    if polling_bot is None or not database_url(url).drivername.startswith("postgresql"):
        yield
        return
    async with _session_lock(url, advisory_key(f"polling {polling_bot}")) as held:
        if not held:
            raise SecondInstance(
                f"another toolnexus-bot is polling Telegram for this bot on {display_url(url)}: stop it first, "
                f"or, {SEVERAL}"
            )
        yield


@asynccontextmanager
async def _session_lock(url: str, key: int) -> AsyncIterator[bool]:
    """Try PostgreSQL's session advisory lock `key` on a connection of its own, kept open for the block
    (whether it was taken): the lock lives as long as that session, so a dead process's ends with it.

    Raises:
        StoreUnavailable: the database cannot be reached.
    """
    engine = create_async_engine(database_url(url), pool_size=1, max_overflow=0)
    try:
        try:
            conn = await engine.connect()
            held = bool((await conn.execute(select(func.pg_try_advisory_lock(key)))).scalar_one())
            await conn.commit()  # the lock is the session's: no transaction stays open beside it
        except (SQLAlchemyError, OSError) as exc:
            raise StoreUnavailable(f"database {display_url(url)}: {failure_reason(exc)}") from exc
        try:
            yield held
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    if held:
                        await conn.execute(select(func.pg_advisory_unlock(key)))
                        await conn.commit()
                finally:
                    await conn.close()
    finally:
        with anyio.CancelScope(shield=True):
            await engine.dispose()  # closes the session: its locks end even if the unlock failed

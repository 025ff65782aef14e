"""The database connection: the URL from `[storage]`, the async engine, and Alembic migrations. Does I/O.

`sqlite:///...` runs on aiosqlite and `postgresql://...` on asyncpg; the schema is brought to the newest
revision at start (`open_engine`) and by `toolnexus-bot db upgrade`. Migrations only ever add: an older
database is upgraded in place, never dropped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

__all__ = ["HEAD", "current_revision", "database_url", "display_url", "open_engine", "upgrade"]

HEAD: Final = "head"
_MIGRATIONS: Final = Path(__file__).parent / "migrations"
_DRIVERS: Final = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}


def database_url(url: str) -> URL:
    """The SQLAlchemy URL with the async driver for a `[storage] url` (`sqlite:///`, `postgresql://`).

    Raises:
        ValueError: a scheme other than sqlite or postgresql.
    """
    parsed = make_url(url)
    backend = parsed.drivername.partition("+")[0]
    if backend not in _DRIVERS:
        raise ValueError(f"unsupported database {backend!r}: use sqlite:/// or postgresql://")
    return parsed.set(drivername=_DRIVERS[backend])


def display_url(url: str) -> str:
    """The URL with its password masked, for logs and messages."""
    return make_url(url).render_as_string(hide_password=True)


async def open_engine(url: str, *, migrate: bool = True) -> AsyncEngine:
    """An engine for `url`; a SQLite file (and its folder) is created on first use, readable by its owner
    only. With `migrate`, the schema is upgraded to the newest revision first."""
    target = database_url(url)
    if target.drivername.startswith("sqlite") and target.database not in (None, "", ":memory:"):
        _create_private(Path(target.database))
    engine = create_async_engine(target)
    if target.drivername.startswith("sqlite"):
        event.listen(engine.sync_engine, "connect", _write_ahead_log)
    if migrate:
        await upgrade(engine)
    return engine


def _create_private(path: Path) -> None:
    """Create the SQLite file (an empty file is an empty database) with mode 0600, and any missing folder
    with 0700, whatever the umask; SQLite gives the WAL and shared-memory files the database's mode. An
    existing file keeps the mode its owner gave it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def _write_ahead_log(dbapi_connection: Any, record: Any) -> None:
    # Readers (`audit`, /audit) then never hold up the bot's writes, nor make them fail as "locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def _alembic(connection: Connection) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def upgrade(engine: AsyncEngine, revision: str = HEAD) -> None:
    """Bring the schema to `revision` (default: the newest), in one transaction where the database can."""
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.upgrade(_alembic(sync), revision))


async def current_revision(engine: AsyncEngine) -> str | None:
    """The schema's revision, or None for an empty database."""
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())

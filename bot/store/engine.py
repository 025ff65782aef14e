"""The database connection: the URL from `[storage]`, the async engine, and Alembic migrations. Does I/O.

`sqlite:///...` runs on aiosqlite and `postgresql://...` on asyncpg; the schema is brought to the newest
revision at start (`open_engine`) and by `toolnexus-bot db upgrade`. Migrations only ever add: an older
database is upgraded in place, never dropped. One process migrates at a time (`upgrade`), so any number of
bots may start at once on an empty database.
"""

from __future__ import annotations

import contextlib
import getpass
import os
from pathlib import Path
from typing import Any, Final

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from bot.errors import StoreError
from bot.files import private_folder
from bot.store.locks import file_lock

__all__ = [
    "HEAD",
    "DatabaseMissing",
    "current_revision",
    "database_url",
    "display_url",
    "failure_reason",
    "is_file_database",
    "open_engine",
    "prepare_file_database",
    "sqlite_pragmas",
    "upgrade",
    "writable_file_database",
]

HEAD: Final = "head"
_MIGRATIONS: Final = Path(__file__).parent / "migrations"
_DRIVERS: Final = {
    "sqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
}
MIGRATION_LOCK: Final = 0x746E_786D_6967_7261
"""The PostgreSQL advisory lock key that migrations run under ("tnxmigra"): one fixed key, any database."""


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


class DatabaseMissing(StoreError):
    """A read-only command found no database (or none of our tables) where the config points."""


def is_file_database(url: str) -> bool:
    """Whether `url` is a SQLite file (not a server, not `:memory:`)."""
    target = database_url(url)
    return target.drivername.startswith("sqlite") and target.database not in (None, "", ":memory:")


def failure_reason(exc: BaseException) -> str:
    """Why the database failed, in one line: the driver's own message, without SQLAlchemy's second line
    ("Background on this error at: https://sqlalche.me/...") or its statement."""
    inner = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    text = str(inner).strip().splitlines()
    return text[0] if text else type(inner).__name__


def _writable_folder(path: Path) -> None:
    """Create a SQLite file's folder if needed, and make sure this process may write there (the file, and
    SQLite's `-wal` and `-shm` files beside it).

    Raises:
        PermissionError: naming the folder that is not writable, and who this process runs as.
    """
    folder = path.parent
    with contextlib.suppress(PermissionError):  # said below, naming the folder
        private_folder(folder)
    _refuse_unwritable(path, folder.is_dir() and _may_write(folder))


def writable_file_database(url: str) -> None:
    """Check, creating nothing, that `open_engine` could make and write the SQLite file of `url` (`check`
    fails where `run` would, with the same line); nothing to check for a database server.

    Raises:
        PermissionError: as `open_engine` would raise it (the message names the folder or the file).
    """
    if not is_file_database(url):
        return
    path = Path(str(database_url(url).database))
    folder = path.parent
    if folder.is_dir():
        _refuse_unwritable(path, _may_write(folder))
        return
    existing = next((f for f in folder.parents if f.exists()), None)
    _refuse_unwritable(path, existing is not None and existing.is_dir() and _may_write(existing))


def _may_write(folder: Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


def _refuse_unwritable(path: Path, folder_writable: bool) -> None:
    """Raise PermissionError naming the folder (or the file) this process may not write."""
    if folder_writable and not (path.exists() and not os.access(path, os.R_OK | os.W_OK)):
        return
    where = path if folder_writable else path.parent
    raise PermissionError(
        f"the {'file' if where == path else 'folder'} {where} is not writable by this process (user "
        f"{_user()}): make it writable, or set [storage] url to a place that is (under systemd the "
        "default is the unit's StateDirectory=)"
    )


def prepare_file_database(url: str) -> Path:
    """The SQLite file of `url`, made as `open_engine` makes it first: its folder created (owner only) and
    writable, the file created (mode 0600).

    Raises:
        PermissionError: the folder or the file is not writable (the message names it).
    """
    path = Path(str(database_url(url).database))
    _prepare_file(path, create=True)
    return path


def _prepare_file(path: Path, *, create: bool) -> None:
    if not create and not path.exists():
        raise DatabaseMissing(
            f"no database file at {path} (check [storage] url; the bot creates it at its first start)"
        )
    if create:
        _writable_folder(path)
        _create_private(path)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


async def open_engine(url: str, *, migrate: bool = True, create: bool = True) -> AsyncEngine:
    """An engine for `url`; a SQLite file (and its folder) is created on first use, readable by its owner
    only. With `migrate`, the
    schema is upgraded to the newest revision first. Without `create` (read-only commands) nothing is made:
    a missing SQLite file, or a database without our tables, raises `DatabaseMissing`.

    Raises:
        PermissionError: a SQLite file's folder is not writable (the message names it).
        DatabaseMissing: without `create`, there is no database there.
    """
    target = database_url(url)
    if is_file_database(url):
        _prepare_file(Path(str(target.database)), create=create)
    engine = create_async_engine(target)
    if target.drivername.startswith("sqlite"):
        event.listen(engine.sync_engine, "connect", sqlite_pragmas)
    if not create:
        try:
            revision = await current_revision(engine)
        except BaseException:
            await engine.dispose()
            raise
        if revision is None:
            await engine.dispose()
            raise DatabaseMissing(
                "the database has no toolnexus-bot tables (check [storage] url; the bot creates them at its "
                "first start)"
            )
    if migrate:
        await upgrade(engine)
    return engine


def _create_private(path: Path) -> None:
    """Create the SQLite file (an empty file is an empty database) with mode 0600, and every missing folder
    on the way with 0700 (`private_folder`), whatever the umask; SQLite gives the WAL and shared-memory files
    the database's mode. An existing file or folder keeps the mode its owner gave it."""
    private_folder(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)


def sqlite_pragmas(dbapi_connection: Any, record: Any) -> None:
    """A new SQLite connection's settings (a SQLAlchemy "connect" event listener).

    Write-ahead log: readers (`audit`, /audit) then never hold up the bot's writes, nor make them fail as
    "locked". `synchronous=NORMAL` (safe with the log): a commit is not synced to the disk until the log is
    checkpointed, so a power loss or an OS crash may lose the last commits; a crash or a SIGKILL of the bot
    loses nothing, and the database is never corrupted. It saves an fsync per transaction.
    """
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _alembic(connection: Connection) -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    return config


async def upgrade(engine: AsyncEngine, revision: str = HEAD) -> None:
    """Bring the schema to `revision` (default: the newest), in one transaction where the database can.

    One process at a time: the others wait, then find the schema migrated and do nothing. On PostgreSQL the
    transaction first takes an advisory lock (`pg_advisory_xact_lock`: released at its commit or rollback, or
    when the connection dies). On a SQLite file, an exclusive `flock` on `<file>-migrate.lock` beside it (the
    kernel releases it when the process dies): SQLite's own locking is no help here, as Python's sqlite3 runs
    DDL outside any transaction (each `CREATE TABLE` commits alone, so two processes both see an empty schema
    and one fails on "table already exists"), and a lock taken through it would end in "database is locked"
    after the busy timeout instead of waiting for a slow migration.
    """
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database not in (None, "", ":memory:"):
        async with file_lock(Path(f"{database}-migrate.lock")):
            await _upgrade(engine, revision)
    else:
        await _upgrade(engine, revision)


async def _upgrade(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
        # Alembic runs inside this transaction (it joins one its connection is already in).
        await conn.run_sync(lambda sync: command.upgrade(_alembic(sync), revision))


async def current_revision(engine: AsyncEngine) -> str | None:
    """The schema's revision, or None for an empty database."""
    async with engine.connect() as conn:
        return await conn.run_sync(lambda sync: MigrationContext.configure(sync).get_current_revision())

"""Store fixtures: `store` opens the store on `store_url` (tests/conftest.py: SQLite, and a real PostgreSQL).

`store` finds its database already at the newest revision: migrated once per test process (`_migrated_sqlite`,
`_migrated_postgresql`) and copied for each test (a file copy; PostgreSQL's `CREATE DATABASE ... TEMPLATE`), so
each of its tests no longer runs the whole migration chain on an empty database first (about 0.1 s of CPU here
and 0.15 s in PostgreSQL's). How an empty or older database is migrated is what tests/store/test_engine.py and
the tests that take `store_url` themselves prove; what `store`'s tests prove is what the store does with its
tables.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from pytest_postgresql.executors.proc import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from bot.cli import LOOP
from bot.config import AuditContent, Secret, StorageConfig
from bot.store import Store, open_engine, open_store


def _migrate(url: str) -> None:
    """The database at `url` upgraded to the newest revision, on a loop of its own in a thread of its own (the
    fixtures asking for it are set up from inside the test's loop)."""

    async def migrate() -> None:
        engine = await open_engine(url)
        await engine.dispose()

    def run() -> None:
        anyio.run(migrate, backend="asyncio", backend_options=dict(LOOP))

    with ThreadPoolExecutor(1) as thread:
        thread.submit(run).result()


@pytest.fixture(scope="session")
def _migrated_sqlite() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="toolnexus-migrated-"))
    path = folder / "toolnexus.db"
    _migrate(f"sqlite:///{path}")
    yield path
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def _migrated_postgresql(postgresql_server: PostgreSQLExecutor) -> Iterator[str]:
    server, name = postgresql_server, "migrated_" + uuid.uuid4().hex[:12]
    with DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name):
        _migrate(f"postgresql://{server.user}@{server.host}:{server.port}/{name}")
        yield name


@pytest.fixture
async def store(store_url: str, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
    """The store opened (and migrated) on `store_url`, keeping answers in full; its database is a copy of one
    already migrated (see the module's docstring)."""
    if store_url.startswith("sqlite:///"):
        shutil.copy(request.getfixturevalue("_migrated_sqlite"), store_url.removeprefix("sqlite:///"))
    else:
        template: str = request.getfixturevalue("_migrated_postgresql")
        server: PostgreSQLExecutor = request.getfixturevalue("postgresql_server")
        name = store_url.rsplit("/", 1)[1]
        empty = DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name)
        empty.drop()  # made empty by `store_url`, and nothing has connected to it yet
        DatabaseJanitor(
            user=server.user, host=server.host, port=server.port, dbname=name, template_dbname=template
        ).init()
    async with open_store(StorageConfig(url=Secret(store_url)), AuditContent.FULL) as opened:
        yield opened

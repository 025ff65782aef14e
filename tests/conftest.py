"""Shared pytest configuration: the anyio plugin runs async tests on asyncio (PTB is asyncio-only); databases.

Every store test (and every end-to-end test of what the store keeps) runs on SQLite and on a real PostgreSQL
server started for the session (`store_url`). PostgreSQL comes from the distribution's binaries (`pg_ctl` on
PATH or under /usr/lib/postgresql/*/bin; `.ci/run` installs them), started by pytest-postgresql through
`tests/store/pg_ctl.sh` (which runs it as the `postgres` user when the tests run as root). Nothing is skipped
when they are missing: the tests fail.
"""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from port_for import select_random
from pytest_postgresql.executors.proc import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor

from bot.cli import LOOP
from tests.inprocess import logging_restored

# Hypothesis's per-example deadline is a timing asserted in a test: on a loaded CI machine it fails correct code.
settings.register_profile("toolnexus", deadline=None)
settings.load_profile("toolnexus")


# The longest end-to-end files (killed and restarted bots, audit chains on both databases, real commands) run
# first: pytest-xdist hands tests to its workers in collection order, and one of them collected last would
# leave a single worker running alone while the others idle (`.ci/run` passes `--maxschedchunk 1`, so each worker
# takes a test or two at a time and these spread over all of them). Measured with `--durations`; the order only
# moves tests, every test still runs.
SLOWEST_FIRST = (
    "tests/store/test_fleet.py",  # a minute with the network to PostgreSQL cut
    "tests/fleet/test_fleet.py",
    # Seven pairs of bots, about 10 s each; and before tests/store/test_engine.py: after its tests, in the same
    # worker under uvloop, the agents' tests' `open_store` (making a token) was seen to hang (not understood).
    "tests/fleet/test_fleet_agents.py",
    # Between the files that mostly wait (on a stopped instance, a drain, a restart), files that keep the cores
    # busy: four workers all waiting at once left both cores idle for 40 s (2026-12-07, a timeline of a CI run).
    "tests/test_bench.py",
    "tests/conformance/test_server_scenarios.py",
    "tests/telegram/test_restart.py",
    "tests/conformance/test_client_scenarios.py",
    "tests/telegram/test_drain.py",
    "tests/web/test_webhook.py",  # three connections left unfinished, each waited out for 5 s
    "tests/store/test_audit_tamper.py",
    "tests/store/test_audit_flows.py",
    "tests/telegram/test_approvals_restart.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_operator.py",
    "tests/store/test_audit.py",
    "tests/store/test_engine.py",
    "tests/servers/test_check.py",
    "tests/console/test_console_approvals.py",
    "tests/test_operations.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "asyncio", dict(LOOP)  # the loop the bot runs on (bot.cli)


PG_CTL = Path(__file__).parent / "store" / "pg_ctl.sh"


@pytest.fixture(scope="session")
def postgresql_server() -> Iterator[PostgreSQLExecutor]:
    """One PostgreSQL server on 127.0.0.1 for the whole session, in a folder of its own."""
    base = Path(tempfile.mkdtemp(prefix="toolnexus-pg-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(base, owner.pw_uid, owner.pw_gid)
    base.chmod(0o755)
    executor = PostgreSQLExecutor(
        executable=str(PG_CTL),
        host="127.0.0.1",
        port=select_random(),  # what get_port(None) does, typed int (get_port may return None)
        datadir=str(base / "data"),
        unixsocketdir=str(base),
        logfile=str(base / "log"),
        startparams="-w",
        dbname="tests",
    )
    try:
        with executor:
            yield executor
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'toolnexus.db'}"
        return
    server: PostgreSQLExecutor = request.getfixturevalue("postgresql_server")
    name = "t_" + uuid.uuid4().hex[:12]
    with DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name):
        yield f"postgresql://{server.user}@{server.host}:{server.port}/{name}"


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """Logging put back as it was after the test (it runs the bot's `setup_logging`): a logger's filter left behind,
    such as the refusal logger's once-an-hour one, would hide later tests' records in the same worker."""
    with logging_restored():
        yield


@pytest.fixture
def postgresql_url(postgresql_server: PostgreSQLExecutor) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server (for what only PostgreSQL does: a fleet)."""
    server, name = postgresql_server, "t_" + uuid.uuid4().hex[:12]
    with DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=name):
        yield f"postgresql://{server.user}@{server.host}:{server.port}/{name}"

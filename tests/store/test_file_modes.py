"""Files the bot creates hold private data (answers, tokens, keys): they are readable by their owner only,
whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.config import AuditContent, Secret, StorageConfig
from bot.demo_server import state_key
from bot.store import AuditEvent, open_store

pytestmark = pytest.mark.anyio


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The common default umask (022): files are world-readable unless made otherwise."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("permissive_umask")
async def test_the_sqlite_database_its_wal_and_shm_and_its_new_folder_are_private(tmp_path: Path) -> None:
    """A first start creates the folder (0700) and the database (0600); the write-ahead log and the shared
    memory file SQLite adds while the store is open are 0600 too."""
    database = tmp_path / "state" / "toolnexus.db"
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{database}")), AuditContent.FULL) as store:
        await store.audit.append(AuditEvent.CALL_STARTED, user_id=1, detail={"arguments": {"x": "private"}})
        wal, shm = database.with_name("toolnexus.db-wal"), database.with_name("toolnexus.db-shm")
        assert wal.exists() and shm.exists()
        assert {path.name: mode(path) for path in (database, wal, shm)} == {
            "toolnexus.db": 0o600,
            "toolnexus.db-wal": 0o600,
            "toolnexus.db-shm": 0o600,
        }
    assert mode(database.parent) == 0o700


@pytest.mark.usefixtures("permissive_umask")
async def test_every_folder_made_on_the_way_to_the_database_is_private_and_an_existing_one_is_left_alone(
    tmp_path: Path,
) -> None:
    """`[storage] url` names a database three folders below one that exists: each of the three is made 0700
    (not only the last), and the existing folder keeps the mode its owner gave it."""
    os.chmod(tmp_path, 0o755)
    database = tmp_path / "srv" / "bot" / "state" / "toolnexus.db"
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{database}"))):
        pass
    made = {str(folder.relative_to(tmp_path)): mode(folder) for folder in database.parents[:3]}
    assert made == {"srv/bot/state": 0o700, "srv/bot": 0o700, "srv": 0o700}
    assert mode(tmp_path) == 0o755


@pytest.mark.usefixtures("permissive_umask")
def test_every_folder_made_on_the_way_to_the_demo_servers_key_is_private(tmp_path: Path) -> None:
    """The demo server's state folder, two levels below an existing one: both are made 0700."""
    state_key({}, str(tmp_path / "state" / "toolnexus-demo"))
    assert mode(tmp_path / "state") == 0o700 and mode(tmp_path / "state" / "toolnexus-demo") == 0o700


@pytest.mark.usefixtures("permissive_umask")
def test_the_demo_servers_key_file_is_private(tmp_path: Path) -> None:
    """The key that seals the demo server's requestState is made 0600 on first start."""
    key = state_key({}, str(tmp_path))
    files = list(tmp_path.iterdir())
    assert key and len(files) == 1 and mode(files[0]) == 0o600


def test_the_systemd_unit_keeps_what_the_bot_writes_private() -> None:
    """The unit runs the bot with umask 0077 and gives it a state folder of its own (systemd makes it 0700
    by default and owned by the service's user)."""
    unit = (Path(__file__).parents[2] / "deploy" / "toolnexus-bot.service").read_text()
    service = unit.partition("[Service]\n")[2].partition("\n[")[0]
    settings = dict(line.split("=", 1) for line in service.splitlines() if "=" in line and line[0] != "#")
    assert settings.get("UMask") == "0077"
    assert settings.get("StateDirectory") == "toolnexus-bot"

"""Tests for bot/store/audit.py: the hash chain holds, names the first edited or deleted row, never forks."""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from sqlalchemy import delete, event, text, update
from sqlalchemy.exc import SQLAlchemyError

from bot.config import Secret, StorageConfig
from bot.store import AuditEvent, AuditLog, Store, canonical_form, open_store
from bot.store.audit import GENESIS
from bot.store.tables import audit
from tests.inprocess import toolnexus

pytestmark = pytest.mark.anyio


async def fill(log: AuditLog, count: int) -> None:
    for i in range(count):
        await log.append(AuditEvent.CALL_STARTED, user_id=i + 1, server="demo", tool="echo", detail={"i": i})


async def test_each_row_carries_the_hash_of_the_previous_rows_canonical_form(store: Store) -> None:
    """prev_hash of row n is SHA-256 of row n-1's canonical form (sorted keys, no spaces, all but `hash`)."""
    await fill(store.audit, 3)
    rows = await store.audit.rows()
    assert [row.seq for row in rows] == [1, 2, 3]
    assert rows[0].prev_hash == GENESIS
    for before, after in itertools.pairwise(rows):
        form = canonical_form(before.as_dict() | {"detail": before.detail})
        assert json.loads(form)["seq"] == before.seq and b" " not in form
        assert after.prev_hash == hashlib.sha256(form).hexdigest() == before.hash
    assert await store.audit.verify() == (3, None)


async def test_an_edited_row_is_named_by_verify(store: Store) -> None:
    """An UPDATE by hand (here: who answered) breaks the chain at exactly that row."""
    await fill(store.audit, 5)
    async with store.engine.begin() as conn:
        await conn.execute(update(audit).where(audit.c.seq == 3).values(user_id=666))
    _, broken = await store.audit.verify()
    assert broken is not None and broken.seq == 3 and "altered" in broken.reason


async def test_an_edited_row_whose_hash_was_recomputed_is_still_named(store: Store) -> None:
    """Rewriting a row's own hash too does not help: the next row holds the old one."""
    await fill(store.audit, 4)
    row = (await store.audit.rows())[1]
    forged = row.as_dict() | {"detail": json.dumps({"i": 99}), "user_id": 666}
    async with store.engine.begin() as conn:
        await conn.execute(
            update(audit)
            .where(audit.c.seq == 2)
            .values(
                detail=forged["detail"], user_id=666, hash=hashlib.sha256(canonical_form(forged)).hexdigest()
            )
        )
    _, broken = await store.audit.verify()
    assert broken is not None and broken.seq == 2 and broken.id == row.id


async def test_a_deleted_row_is_named_by_verify(store: Store) -> None:
    """A DELETE leaves a gap: verify names the missing place."""
    await fill(store.audit, 5)
    async with store.engine.begin() as conn:
        await conn.execute(delete(audit).where(audit.c.seq == 2))
    _, broken = await store.audit.verify()
    assert broken is not None and broken.seq == 2 and "missing" in broken.reason


async def test_concurrent_appends_from_two_writers_never_fork_the_chain(store: Store) -> None:
    """Two logs on one database (as two processes would be) appending at once: one chain, no gaps."""
    other = AuditLog(store.engine)
    async with anyio.create_task_group() as tg:
        for log in (store.audit, other) * 10:
            tg.start_soon(fill, log, 2)
    count, broken = await store.audit.verify()
    assert (count, broken) == (40, None)
    assert [row.seq for row in await store.audit.rows()] == list(range(1, 41))


async def test_the_first_append_after_opening_is_a_lone_insert_and_a_stale_head_is_only_a_retry(
    store_url: str,
) -> None:
    """The head is read when the store opens, so the first event (the first question of a flood) is one
    INSERT, without the database's lock and a read; a head another writer moved since costs a retry, never a
    fork of the chain."""
    async with open_store(StorageConfig(url=Secret(store_url))) as first:
        await fill(first.audit, 2)
    async with open_store(StorageConfig(url=Secret(store_url))) as opened:
        statements: list[str] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            statements.append(statement.split(None, 1)[0].upper())

        writes = opened.audit.writer.sync_engine  # the store's one writer (its engine of its own on SQLite)
        event.listen(writes, "before_cursor_execute", count)
        try:
            await fill(opened.audit, 1)
            assert statements == ["INSERT"]
            await fill(AuditLog(opened.engine), 1)  # another writer moves the head
            await fill(opened.audit, 1)
        finally:
            event.remove(writes, "before_cursor_execute", count)
        count_, broken = await opened.audit.verify()
        assert (count_, broken) == (5, None)


async def test_rows_filter_by_user_and_server_and_keep_the_last(store: Store) -> None:
    """`--user`, `--server` and /audit's last-N read the same rows in chain order."""
    await fill(store.audit, 4)
    await store.audit.append(AuditEvent.CALL_STARTED, user_id=2, server="other")
    assert [row.seq for row in await store.audit.rows(user_id=2)] == [2, 5]
    assert [row.seq for row in await store.audit.rows(server="other")] == [5]
    assert [row.seq for row in await store.audit.rows(last=2)] == [4, 5]


async def test_a_reader_holding_the_sqlite_file_does_not_block_appends(tmp_path: Path) -> None:
    """`audit` reading while the bot runs: its open read transaction never makes the bot's write fail as
    "database is locked" (the store runs SQLite in write-ahead-log mode)."""
    url = f"sqlite:///{tmp_path / 'toolnexus.db'}"
    async with open_store(StorageConfig(url=Secret(url))) as store:
        await fill(store.audit, 1)
        with contextlib.closing(sqlite3.connect(tmp_path / "toolnexus.db", isolation_level=None)) as reader:
            reader.execute("begin")
            assert reader.execute("select count(*) from audit").fetchone() == (1,)
            await fill(store.audit, 1)
            reader.execute("commit")
        assert await store.audit.verify() == (2, None)


async def test_an_append_while_another_connection_holds_the_write_lock_waits_for_it_off_the_event_loop(
    tmp_path: Path,
) -> None:
    """The writer commits on the event loop only while SQLite's write lock is free: when another connection
    holds it, the batch waits for it in the writer's thread, the loop going on meanwhile (a wait on the loop
    would hold up the very code that lets the lock go, here this test's), and commits once it is let go."""
    url = f"sqlite:///{tmp_path / 'toolnexus.db'}"
    async with open_store(StorageConfig(url=Secret(url))) as store:
        await fill(store.audit, 1)
        with contextlib.closing(sqlite3.connect(tmp_path / "toolnexus.db", isolation_level=None)) as other:
            other.execute("begin immediate")  # the write lock, held
            appended = anyio.Event()

            async def append() -> None:
                await fill(store.audit, 1)
                appended.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(append)
                await anyio.wait_all_tasks_blocked()
                assert not appended.is_set()
                other.execute("commit")
                await appended.wait()
        assert await store.audit.verify() == (2, None)


async def test_the_audit_command_prints_csv_and_filters_by_date(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    """`audit --format csv` has a header and one line per row; `--since` a later date prints none."""
    await fill(store.audit, 2)
    config = tmp_path / "bot.toml"
    config.write_text(f'[storage]\nurl = "{store_url}"\n[servers.demo]\ncommand = "python"\n')

    def audit(*args: str) -> str:
        done = toolnexus("audit", "--config", str(config), *args)  # the command's main, in process
        assert done.returncode == 0, done.stderr
        return done.stdout

    lines = list(csv.reader(io.StringIO(audit("--format", "csv"))))
    assert lines[0][:4] == ["seq", "id", "at", "event"] and [line[0] for line in lines[1:]] == ["1", "2"]
    assert audit("--since", "2999-01-01") == ""
    assert len(audit("--since", "2000-01-01T00:00").splitlines()) == 2


async def test_a_row_the_database_refuses_is_logged_as_lost_by_record_not_raised(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """`record` is for a change already committed: when the database refuses its row, the loss is logged with
    the event's name and nothing is raised (what was done stays done); `append` still raises."""
    async with store.engine.begin() as conn:
        await conn.execute(text("DROP TABLE audit"))
    await store.audit.record(AuditEvent.AGENT_TOKEN_REVOKED, user_id=7, detail={"by": "person"})
    assert [(r.name, r.getMessage()) for r in caplog.records if r.exc_info] == [
        ("bot.store.audit", "could not write the audit event agent_token_revoked")
    ]
    with pytest.raises(SQLAlchemyError):
        await store.audit.append(AuditEvent.AGENT_TOKEN_REVOKED, user_id=7)

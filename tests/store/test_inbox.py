"""Tests for bot/store/inbox.py on SQLite and PostgreSQL: an update recorded once per bot (a second record of it
says so), rows older than a day pruned in batches (on a virtual clock), also by every `PRUNE_EVERY`-th record,
and the table added to a database at revision 0008."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator

import anyio
import pytest
from sqlalchemy import func, insert, select

from bot.config import Secret, StorageConfig
from bot.store import AuditEvent, AuditLog, current_revision, open_engine, open_store, upgrade
from bot.store.inbox import KEEP, PRUNE_BATCH, PRUNE_EVERY, InboxStore
from bot.store.tables import updates_seen
from tests.store.test_agents import START, Clock
from tests.store.test_engine import NEWEST

pytestmark = pytest.mark.anyio

BOT, OTHER_BOT = 123456, 654321


@pytest.fixture
async def inbox(store_url: str) -> AsyncIterator[tuple[InboxStore, Clock]]:
    clock = Clock()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        yield InboxStore(store.engine, clock), clock


async def kept(inbox: InboxStore) -> set[tuple[int, int]]:
    async with inbox.engine.connect() as conn:
        rows = (await conn.execute(select(updates_seen.c.bot_id, updates_seen.c.update_id))).all()
    return {(row.bot_id, row.update_id) for row in rows}


async def test_an_update_is_first_once_per_bot(inbox: tuple[InboxStore, Clock]) -> None:
    """The first record of an update is its first delivery; the second is not; another bot's same id is its own."""
    store, _ = inbox
    assert await store.first(BOT, 1) is True
    assert await store.first(BOT, 1) is False
    assert await store.first(BOT, 2) is True
    assert await store.first(OTHER_BOT, 1) is True
    assert await store.first(OTHER_BOT, 1) is False
    assert await kept(store) == {(BOT, 1), (BOT, 2), (OTHER_BOT, 1)}


async def test_pruning_removes_rows_older_than_a_day_and_keeps_the_rest(
    inbox: tuple[InboxStore, Clock],
) -> None:
    """Rows received more than `KEEP` ago go; newer ones stay, and their redelivery is still refused."""
    store, clock = inbox
    await store.first(BOT, 1)
    await store.first(OTHER_BOT, 1)
    clock.now += dt.timedelta(hours=12)
    await store.first(BOT, 2)
    clock.now = START + KEEP + dt.timedelta(seconds=1)
    assert await store.prune() == 2
    assert await kept(store) == {(BOT, 2)}
    assert await store.first(BOT, 2) is False
    assert await store.prune() == 0


async def test_one_prune_deletes_at_most_a_batch(inbox: tuple[InboxStore, Clock]) -> None:
    """A backlog of old rows goes a batch at a time, the oldest first."""
    store, clock = inbox
    async with store.engine.begin() as conn:
        await conn.execute(
            insert(updates_seen),
            [
                {
                    "bot_id": BOT,
                    "update_id": n,
                    "received": (START + dt.timedelta(microseconds=n)).isoformat(timespec="microseconds"),
                }
                for n in range(PRUNE_BATCH + 5)
            ],
        )
    clock.now = START + 2 * KEEP
    assert await store.prune() == PRUNE_BATCH
    assert await kept(store) == {(BOT, n) for n in range(PRUNE_BATCH, PRUNE_BATCH + 5)}
    assert await store.prune() == 5


async def test_every_hundredth_record_prunes(inbox: tuple[InboxStore, Clock]) -> None:
    """No scheduler: one record in `PRUNE_EVERY` also prunes what is older than a day."""
    store, clock = inbox
    await store.first(BOT, 0)
    clock.now += KEEP + dt.timedelta(seconds=1)
    for n in range(1, PRUNE_EVERY - 1):
        await store.first(BOT, n)
    assert (BOT, 0) in await kept(store)
    await store.first(BOT, PRUNE_EVERY - 1)  # the hundredth
    rows = await kept(store)
    assert (BOT, 0) not in rows and len(rows) == PRUNE_EVERY - 1


async def test_a_database_at_revision_0008_gets_the_table_and_keeps_its_rows(store_url: str) -> None:
    """An existing database is upgraded from 0008 to 0009 in place: its audit row stays, the inbox works."""
    engine = await open_engine(store_url, migrate=False)
    try:
        await upgrade(engine, "0008")
        written = await AuditLog(engine).append(AuditEvent.CALL_STARTED, user_id=7, server="demo", tool="x")
    finally:
        await engine.dispose()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await current_revision(store.engine) == NEWEST
        assert await store.audit.rows() == [written]
        assert await store.inbox.first(BOT, 7) is True
        assert await store.inbox.first(BOT, 7) is False
        async with store.engine.connect() as conn:
            assert (await conn.execute(select(func.count()).select_from(updates_seen))).scalar_one() == 1


async def test_of_deliveries_racing_exactly_one_is_first(store_url: str) -> None:
    """Five deliveries of one update at once, each through its own engine on the database (as several processes
    would be): the database's key lets exactly one of them in."""
    async with open_store(StorageConfig(url=Secret(store_url))):
        pass  # migrated
    engines = [await open_engine(store_url, migrate=False) for _ in range(5)]
    answers: list[bool] = []

    async def deliver(racer: InboxStore) -> None:
        answers.append(await racer.first(BOT, 42))

    try:
        async with anyio.create_task_group() as tg:
            for engine in engines:
                tg.start_soon(deliver, InboxStore(engine))
    finally:
        for engine in engines:
            await engine.dispose()
    assert sorted(answers) == [False, False, False, False, True]

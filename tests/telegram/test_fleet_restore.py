"""What an instance of a fleet takes up after a restart, on a real PostgreSQL with two instances' partitions: at
start only the kept questions of the users it owns (another live instance's stay as they are), and the others'
once it takes their partitions over. The questions are legacy ones without a card yet, so taking them up settles
them in the store alone (no Bot API call: the surface and runner are never reached)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import Era, KeptTask, Origin, PromptRegistry
from bot.store.engine import open_engine
from bot.store.fleet import Partitions
from bot.store.rounds import RoundStore
from bot.store.tasks import TaskStore
from bot.telegram.fleet import Takeovers
from tests.store.test_rounds import question

pytestmark = pytest.mark.anyio

BOT = 6161


@pytest.fixture
async def engine(postgresql_url: str) -> AsyncIterator[AsyncEngine]:
    engine = await open_engine(postgresql_url)  # migrated
    yield engine
    await engine.dispose()


async def dies(engine: AsyncEngine, a: Partitions) -> None:
    """A's lock session ends, and is gone once this returns (`pg_terminate_backend` waits for the backend's end):
    the next heartbeat of another instance sees it dead and takes its partitions."""
    async with engine.begin() as conn:
        ended = await conn.scalar(text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": a.pid})
    assert ended, "A's lock session did not end within 10 s"


async def test_an_instance_takes_up_only_its_own_users_questions_until_it_takes_the_others_over(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    a, b = Partitions(postgresql_url, BOT), Partitions(postgresql_url, BOT)
    try:
        for instance in (a, b, a, b):  # join, then even out: half each
            if instance.pid is None:
                await instance.connect()
            await instance.tick()
        alice = next(user for user in range(1000, 1100) if a.owns(user))
        bob = next(user for user in range(1000, 1100) if b.owns(user))
        book = RoundStore(engine)
        for n, user in enumerate((alice, bob)):
            kept = replace(
                question(n, era=Era.LEGACY, round_id=f"r-{n}"), origin=Origin(chat_id=user, user_id=user)
            )
            await book.keep(kept)
        nowhere: Any = None  # a legacy question without a card reaches neither the Bot API nor the runner
        takeovers = Takeovers(b, book, nowhere, nowhere, PromptRegistry(nowhere, 60), None, {"s"})
        async with anyio.create_task_group() as tg:
            await takeovers.restore(tg)  # B starts again: only Bob's question is B's
            assert [q.origin.user_id for q in await book.open_questions()] == [alice]
            await dies(engine, a)
            await b.tick()
            assert b.owns(alice)  # and with her partition her question
            await takeovers.restore(tg)
            assert await book.open_questions() == []
    finally:
        for instance in (a, b):
            await instance.release_all()


async def test_an_instance_takes_up_only_its_own_users_tasks_until_it_takes_the_others_over(
    postgresql_url: str, engine: AsyncEngine
) -> None:
    """Tasks kept for a user of each instance, on a server the config no longer has (taking one up forgets it:
    nothing is polled): B's start touches only Bob's; Alice's once B takes her partition over from A."""
    a, b = Partitions(postgresql_url, BOT), Partitions(postgresql_url, BOT)
    try:
        for instance in (a, b, a, b):
            if instance.pid is None:
                await instance.connect()
            await instance.tick()
        alice = next(user for user in range(1000, 1100) if a.owns(user))
        bob = next(user for user in range(1000, 1100) if b.owns(user))
        tasks = TaskStore(engine)
        for user in (alice, bob):
            origin = Origin(chat_id=user, user_id=user)
            await tasks.keep(KeptTask(f"row-{user}", "gone", f"task-{user}", "brew", None, origin, None))
        nowhere: Any = None  # a task whose server left the config is forgotten: no runner, no Bot API
        takeovers = Takeovers(
            b, RoundStore(engine), nowhere, nowhere, PromptRegistry(nowhere, 60), None, {"s"}, tasks=tasks
        )
        async with anyio.create_task_group() as tg:
            await takeovers.restore(tg)  # B starts again: only Bob's task is B's
            assert [t.origin.user_id for t in await tasks.open_tasks()] == [alice]
            await dies(engine, a)
            await b.tick()
            assert b.owns(alice)
            await takeovers.restore(tg)
            assert await tasks.open_tasks() == []
    finally:
        for instance in (a, b):
            await instance.release_all()

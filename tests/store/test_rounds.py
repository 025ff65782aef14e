"""The `rounds` table as the store's `RoundBook`: a kept question reads back as saved, with its card, progress
and answer; closing forgets it. On SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import anyio
import pytest
from sqlalchemy import Engine, event
from sqlalchemy.exc import SQLAlchemyError

from bot.core import Era, KeptQuestion, Origin
from bot.servers.keeper import RoundKeeper
from bot.store import AuditEvent, Store

PARAMS = {"mode": "form", "message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}}


def question(n: int, *, era: Era = Era.MODERN, round_id: str = "r-1") -> KeptQuestion:
    return KeptQuestion(
        id=f"elc-test-{n}",
        round_id=round_id,
        input_key=f"q{n}",
        era=era,
        server="s",
        tool="t",
        arguments={"a": [1, "ü"]},
        origin=Origin(chat_id=-5001, user_id=1001),
        token=f"tok{n}",
        deadline=1_900_000_000.5,
        input_requests={f"q{n}": {"method": "elicitation/create", "params": PARAMS}},
        request_state="v1.opaque",
    )


@pytest.mark.anyio
async def test_a_kept_question_reads_back_as_it_was_saved_and_as_it_went_on(store: Store) -> None:
    """Saved, its card placed, its progress and its answer recorded: all of it comes back from the table."""
    book = store.rounds
    await book.keep(question(1))
    await book.keep(question(2))
    await book.placed("elc-test-1", -5001, 42)
    await book.progress("elc-test-1", {"version": 3, "form": {"values": {"x": 1}}})
    await book.answered("elc-test-2", {"action": "decline"})
    found = {q.id: q for q in await book.open_questions()}
    first, second = found["elc-test-1"], found["elc-test-2"]
    progress = {"version": 3, "form": {"values": {"x": 1}}}
    assert first == replace(question(1), card_chat_id=-5001, card_message_id=42, progress=progress)
    assert second.answer == {"action": "decline"} and second.card_message_id is None


@pytest.mark.anyio
async def test_closed_questions_are_forgotten_and_others_stay(store: Store) -> None:
    """`close` deletes exactly the questions named (a legacy one too)."""
    book = store.rounds
    await book.keep(question(1))
    await book.keep(question(2, era=Era.LEGACY, round_id="r-2"))
    await book.close("elc-test-1")
    left = await book.open_questions()
    assert [(q.id, q.era) for q in left] == [("elc-test-2", Era.LEGACY)]
    await book.close("elc-test-2")
    assert await book.open_questions() == []


@pytest.mark.anyio
async def test_writes_made_at_once_are_each_committed_when_they_return_in_a_few_transactions(
    store: Store,
) -> None:
    """Fifty questions kept at once (a flood): each is on disk when its `keep` returns, and the writes were
    group-committed rather than one transaction each."""
    book = store.rounds
    seen: list[bool] = []

    async def keep(n: int) -> None:
        await book.keep(question(n, round_id=f"r-{n}"))
        seen.append(f"elc-test-{n}" in {q.id for q in await book.open_questions()})

    async with anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(keep, n)
    assert seen == [True] * 50
    assert book.rows_written == 50 and book.transactions < 10


@pytest.mark.anyio
async def test_a_refused_write_fails_alone_and_the_writes_queued_with_it_are_committed(store: Store) -> None:
    """A question kept twice (the same id) is refused; the questions queued in the same group still land."""
    book = store.rounds
    await book.keep(question(0))
    refused: list[BaseException] = []

    async def keep(n: int) -> None:
        try:
            await book.keep(question(n, round_id=f"r-{n}"))
        except SQLAlchemyError as exc:
            refused.append(exc)

    async with anyio.create_task_group() as tg:
        for n in (1, 2, 0, 3, 4):
            tg.start_soon(keep, n)
    assert len(refused) == 1
    assert sorted(q.id for q in await book.open_questions()) == [f"elc-test-{n}" for n in range(5)]


@pytest.mark.anyio
async def test_a_group_of_writes_goes_as_one_statement_per_kind_not_one_per_write(store: Store) -> None:
    """Fifty questions kept, their cards placed and their progress saved at once, then all closed: each kind
    goes as one statement with all its rows (a round trip to the database each, and a busy event loop makes
    every round trip slow); what reads back is what was written."""
    book = store.rounds
    statements: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", count)
    try:
        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(book.keep, question(n, round_id=f"r-{n}"))
        async with anyio.create_task_group() as tg:
            for n in range(50):
                if n % 2:
                    tg.start_soon(book.placed, f"elc-test-{n}", -5001, 1000 + n)
                else:
                    tg.start_soon(book.progress, f"elc-test-{n}", {"version": n})
        found = {q.id: q for q in await book.open_questions()}
        assert len(found) == 50
        assert all(found[f"elc-test-{n}"].card_message_id == 1000 + n for n in range(1, 50, 2))
        assert all(found[f"elc-test-{n}"].progress == {"version": n} for n in range(0, 50, 2))
        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(book.close, f"elc-test-{n}")
        assert await book.open_questions() == []
    finally:
        event.remove(store.engine.sync_engine, "before_cursor_execute", count)
    assert len(statements) < 30, statements


@pytest.mark.anyio
async def test_writes_grouped_in_one_transaction_apply_in_the_order_they_were_made(store: Store) -> None:
    """A question's progress saved before it was kept (queued behind another question's keep, in the same
    group) changes nothing, as it would have on its own: grouping never reorders one question's writes."""
    book = store.rounds
    async with anyio.create_task_group() as tg:
        tg.start_soon(book.keep, question(0, round_id="r-0"))  # written first; the next two queue meanwhile
        tg.start_soon(book.progress, "elc-test-1", {"version": 9})
        tg.start_soon(book.keep, question(1, round_id="r-1"))
    found = {q.id: q for q in await book.open_questions()}
    assert found["elc-test-1"].progress == {}


@pytest.mark.anyio
async def test_a_questions_audit_row_and_its_kept_copy_share_one_commit(store: Store) -> None:
    """The store has one writer: the audit row and the kept copy written at once (as the registry writes them
    before a card) go in one transaction, not one each."""
    commits: list[object] = []

    def committed(conn: object) -> None:
        commits.append(conn)

    shown = partial(store.audit.append, AuditEvent.QUESTION_SHOWN, user_id=1001, request_id="elc-test-1")
    event.listen(Engine, "commit", committed)  # every engine: the store's writes may have one of their own
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(shown)
            tg.start_soon(store.rounds.keep, question(1))
    finally:
        event.remove(Engine, "commit", committed)
    assert len(commits) == 1
    assert [q.id for q in await store.rounds.open_questions()] == ["elc-test-1"]
    assert [row.request_id for row in await store.audit.rows()] == ["elc-test-1"]


@pytest.mark.anyio
async def test_a_legacy_questions_progress_is_not_written_and_a_2026_ones_is(store: Store) -> None:
    """A restart settles a legacy question (its session is gone) and never reads its progress: the keeper
    spares that write; a 2026-07-28 question's progress is what a restart redraws its form from."""
    keepers = [RoundKeeper(store.rounds, question(1, era=Era.LEGACY)), RoundKeeper(store.rounds, question(2))]
    for keeper in keepers:
        await store.rounds.keep(keeper.question)
        await keeper.progress(None, {"version": 2})  # type: ignore[arg-type]  # the prompt is not read
    found = {q.id: q.progress for q in await store.rounds.open_questions()}
    assert found == {"elc-test-1": {}, "elc-test-2": {"version": 2}}

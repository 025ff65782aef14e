"""Open questions in the database (`rounds` table): the store's `RoundBook`. Does I/O.

Every write is committed before its call returns, so a question is on disk before its card is sent and its
answer before it goes back to the server. Writes are group-committed by the store's one writer
(`bot.store.writer`), with the audit rows: the writes queued while a batch is being written go in the next
transaction, in order (a flood of questions is a few transactions, not one each, and never a crowd of
transactions queueing for SQLite's one write lock). JSON columns hold canonical JSON text.

Every write is fenced (`fence`, the fleet's: `bot.core.fleet.Fence`): in a fleet by its user's partition
(`bot.store.fleet.Partitions.refused`: in the write's transaction the partition's row is read `FOR SHARE`, so a
takeover, which bumps the epoch under `FOR UPDATE`, waits for the write or comes first), and a write whose
partition has another epoch than the one this instance took it with is left out and fails alone with `Fenced`:
a paused instance's late write after a takeover never lands. A process alone refuses nothing.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, bindparam, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import Era, KeptQuestion, Origin
from bot.core.fleet import ALONE, Fence
from bot.store.audit import canonical_json
from bot.store.errors import Fenced, unavailable_as
from bot.store.tables import rounds
from bot.store.writer import Prepared, StoreWriter

__all__ = ["RoundStore"]


class _Kind(enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class _Write:
    kind: _Kind
    ids: tuple[str, ...]
    """The questions (rows) it writes: one, or the ones a delete closes."""
    values: Mapping[str, Any]
    """The row (insert) or the columns to set (update)."""


_INSERT: Final = Prepared(insert(rounds))
_DELETE: Final = Prepared(delete(rounds).where(rounds.c.id == bindparam("b_id")))
_UPDATES: dict[tuple[str, ...], Prepared] = {}
"""The updates by the columns they set (a handful: the card's place, the progress, the answer)."""


def _update_of(columns: tuple[str, ...]) -> Prepared:
    found = _UPDATES.get(columns)
    if found is None:
        changes: dict[str, Any] = {c: bindparam(f"b_{c}") for c in columns}
        found = _UPDATES[columns] = Prepared(
            update(rounds).where(rounds.c.id == bindparam("b_id")).values(changes)
        )
    return found


class RoundStore:
    """The `rounds` table of one database; `_commit` is its only writer."""

    def __init__(
        self, engine: AsyncEngine, writer: StoreWriter | None = None, *, fence: Fence = ALONE.fence
    ) -> None:
        self.engine = engine
        self.writer = StoreWriter(engine, thread=False) if writer is None else writer
        """Commits the writes, in one transaction with whatever else is queued (the store's one writer)."""
        self.rows_written = 0
        """Inserts and updates this process made (read by bench)."""
        self.transactions = 0
        """Transactions those writes took (read by bench and tests)."""
        self.fence = fence
        """What every write to a kept question is fenced by (in a fleet: this instance's partitions' epochs)."""

    async def keep(self, question: KeptQuestion) -> None:
        values = {
            "id": question.id,
            "round_id": question.round_id,
            "input_key": question.input_key,
            "era": question.era.value,
            "server": question.server,
            "tool": question.tool,
            "arguments": canonical_json(question.arguments),
            "user_id": question.origin.user_id,
            "chat_id": question.origin.chat_id,
            "agent": question.origin.agent,
            "token": question.token,
            "deadline": question.deadline,
            # In the server's order (not canonical JSON's sorted keys): a form's fields keep their order when
            # the card is placed again after a restart, or the page is served by another instance.
            "input_requests": None
            if question.input_requests is None
            else json.dumps(question.input_requests, ensure_ascii=False, separators=(",", ":")),
            "request_state": question.request_state,
            "card_chat_id": question.card_chat_id,
            "card_message_id": question.card_message_id,
            "progress": canonical_json(question.progress),
            "answer": None if question.answer is None else canonical_json(question.answer),
        }
        await self._commit(_Write(_Kind.INSERT, (question.id,), values))

    async def placed(self, question_id: str, chat_id: int, message_id: int) -> None:
        await self._update(question_id, card_chat_id=chat_id, card_message_id=message_id)

    async def progress(self, question_id: str, progress: dict[str, Any]) -> None:
        await self._update(question_id, progress=canonical_json(progress))

    async def answered(self, question_id: str, answer: dict[str, Any]) -> None:
        await self._update(question_id, answer=canonical_json(answer))

    async def close(self, *question_ids: str) -> None:
        if question_ids:
            await self._commit(_Write(_Kind.DELETE, question_ids, {}))

    async def _update(self, question_id: str, **values: Any) -> None:
        await self._commit(_Write(_Kind.UPDATE, (question_id,), values))

    async def _commit(self, write: _Write) -> None:
        """Commit `write`, with whatever else was queued meanwhile (audit rows too: the store's one writer).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused this write.
        """
        await self.writer.submit(self, write)

    def stage(
        self, conn: Connection, items: Sequence[Any], attempt: int
    ) -> Callable[[], Sequence[Fenced | None]]:
        """`items` in the writer's open transaction (`bot.store.writer.Part`). The writes of a stretch that
        touches each question once go as one statement per kind (and per set of columns updated), each with
        all their rows."""
        everything: Sequence[_Write] = items
        refused = self.fence.refused(conn, [() if w.kind is _Kind.INSERT else w.ids for w in everything])
        batch = [w for i, w in enumerate(everything) if i not in refused]
        for stretch in _stretches(batch):
            rows = [w.values for w in stretch if w.kind is _Kind.INSERT]
            if rows:
                _INSERT.executemany(conn, rows)
            updates: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for w in stretch:
                if w.kind is _Kind.UPDATE:
                    updates.setdefault(tuple(sorted(w.values)), []).append(
                        {"b_id": w.ids[0], **{f"b_{k}": v for k, v in w.values.items()}}
                    )
            for columns, params in updates.items():
                _update_of(columns).executemany(conn, params)
            closed = [{"b_id": i} for w in stretch if w.kind is _Kind.DELETE for i in w.ids]
            if closed:
                _DELETE.executemany(conn, closed)

        def committed() -> list[Fenced | None]:
            self.transactions += 1
            self.rows_written += sum(1 for w in batch if w.kind is not _Kind.DELETE)
            return [
                Fenced(f"question {w.ids[0]}: its user's partition is another instance's now")
                if i in refused
                else None
                for i, w in enumerate(everything)
            ]

        return committed

    def rolled_back(self, exc: SQLAlchemyError, attempt: int) -> bool:
        return False

    @unavailable_as("finding a kept question")
    async def by_token(self, token: str) -> KeptQuestion | None:
        """The open question whose card has `token` (a Mini App page's prompt, held by another instance)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(rounds).where(rounds.c.token == token))).first()
        return None if row is None else _question(row._asdict())

    async def open_questions(self) -> list[KeptQuestion]:
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(rounds).order_by(rounds.c.deadline, rounds.c.id))).all()
        return [_question(row._asdict()) for row in rows]


def _question(row: dict[str, Any]) -> KeptQuestion:
    return KeptQuestion(
        id=row["id"],
        round_id=row["round_id"] or row["id"],
        input_key=row["input_key"] or "",
        era=Era(row["era"]) if row["era"] in tuple(Era) else Era.LEGACY,
        server=row["server"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        origin=Origin(chat_id=row["chat_id"], user_id=row["user_id"], agent=row["agent"]),
        token=row["token"] or row["id"],
        deadline=row["deadline"],
        input_requests=None if row["input_requests"] is None else json.loads(row["input_requests"]),
        request_state=row["request_state"],
        card_chat_id=row["card_chat_id"],
        card_message_id=row["card_message_id"],
        progress=json.loads(row["progress"]),
        answer=None if row["answer"] is None else json.loads(row["answer"]),
    )


def _stretches(batch: Sequence[_Write]) -> list[list[_Write]]:
    """`batch` cut, in order, into stretches in which no question is written twice: within one, the order of
    the writes does not matter (each touches other rows)."""
    stretches: list[list[_Write]] = [[]]
    seen: set[str] = set()
    for write in batch:
        if seen.intersection(write.ids):
            stretches.append([])
            seen.clear()
        stretches[-1].append(write)
        seen.update(write.ids)
    return stretches

"""Open questions in the database (`rounds` table): the store's `RoundBook`. Does I/O.

Every write is committed before its call returns, so a question is on disk before its card is sent and its
answer before it goes back to the server. Writes are group-committed: whoever holds the lock writes every write
queued meanwhile in one transaction, in order (a flood of questions is a few transactions, not one each, and
never a crowd of transactions queueing for SQLite's one write lock). JSON columns hold canonical JSON text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import anyio
from sqlalchemy import Executable, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import Era, KeptQuestion, Origin
from bot.store.audit import canonical_json
from bot.store.tables import rounds

__all__ = ["RoundStore"]


@dataclass(slots=True)
class _Write:
    statement: Executable
    counts: bool
    """An insert or update (counted in `rows_written`)."""
    done: bool = False
    error: SQLAlchemyError | None = None


class RoundStore:
    """The `rounds` table of one database; `_commit` is its only writer."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._lock = anyio.Lock()
        self._queue: list[_Write] = []
        self.rows_written = 0
        """Inserts and updates this process made (read by bench)."""
        self.transactions = 0
        """Transactions those writes took (read by bench and tests)."""

    async def _commit(self, statement: Executable, *, counts: bool = True) -> None:
        """Run `statement` and commit it, with whatever else was queued meanwhile.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused this write.
        """
        write = _Write(statement, counts)
        self._queue.append(write)
        async with self._lock:
            if not write.done:
                batch, self._queue = self._queue, []
                try:
                    await self._run(batch)
                except SQLAlchemyError:
                    # One refused write must not fail the others: each again, on its own.
                    for each in batch:
                        try:
                            await self._run([each])
                        except SQLAlchemyError as exc:
                            each.error = exc
                for each in batch:
                    each.done = True
        if write.error is not None:
            raise write.error

    async def _run(self, batch: list[_Write]) -> None:
        async with self.engine.begin() as conn:
            for each in batch:
                await conn.execute(each.statement)
        self.transactions += 1
        self.rows_written += sum(1 for each in batch if each.counts)

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
            "token": question.token,
            "deadline": question.deadline,
            "input_requests": None
            if question.input_requests is None
            else canonical_json(question.input_requests),
            "request_state": question.request_state,
            "card_chat_id": question.card_chat_id,
            "card_message_id": question.card_message_id,
            "progress": canonical_json(question.progress),
            "answer": None if question.answer is None else canonical_json(question.answer),
        }
        await self._commit(insert(rounds).values(values))

    async def _update(self, question_id: str, **values: Any) -> None:
        await self._commit(update(rounds).where(rounds.c.id == question_id).values(**values))

    async def placed(self, question_id: str, chat_id: int, message_id: int) -> None:
        await self._update(question_id, card_chat_id=chat_id, card_message_id=message_id)

    async def progress(self, question_id: str, progress: dict[str, Any]) -> None:
        await self._update(question_id, progress=canonical_json(progress))

    async def answered(self, question_id: str, answer: dict[str, Any]) -> None:
        await self._update(question_id, answer=canonical_json(answer))

    async def close(self, *question_ids: str) -> None:
        if not question_ids:
            return
        await self._commit(delete(rounds).where(rounds.c.id.in_(question_ids)), counts=False)

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
        origin=Origin(chat_id=row["chat_id"], user_id=row["user_id"]),
        token=row["token"] or row["id"],
        deadline=row["deadline"],
        input_requests=None if row["input_requests"] is None else json.loads(row["input_requests"]),
        request_state=row["request_state"],
        card_chat_id=row["card_chat_id"],
        card_message_id=row["card_message_id"],
        progress=json.loads(row["progress"]),
        answer=None if row["answer"] is None else json.loads(row["answer"]),
    )

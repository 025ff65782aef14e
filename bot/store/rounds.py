"""Open questions in the database (`rounds` table): the store's `RoundBook`. Does I/O.

Each write is its own committed transaction, so a question is on disk before its card is sent and its answer
before it goes back to the server. JSON columns hold canonical JSON text.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import Era, KeptQuestion, Origin
from bot.store.audit import canonical_json
from bot.store.tables import rounds

__all__ = ["RoundStore"]


class RoundStore:
    """The `rounds` table of one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.rows_written = 0
        """Inserts and updates this process made (read by bench)."""

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
        async with self.engine.begin() as conn:
            await conn.execute(insert(rounds), values)
        self.rows_written += 1

    async def _update(self, question_id: str, **values: Any) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(rounds).where(rounds.c.id == question_id).values(**values))
        self.rows_written += 1

    async def placed(self, question_id: str, chat_id: int, message_id: int) -> None:
        await self._update(question_id, card_chat_id=chat_id, card_message_id=message_id)

    async def progress(self, question_id: str, progress: dict[str, Any]) -> None:
        await self._update(question_id, progress=canonical_json(progress))

    async def answered(self, question_id: str, answer: dict[str, Any]) -> None:
        await self._update(question_id, answer=canonical_json(answer))

    async def close(self, *question_ids: str) -> None:
        if not question_ids:
            return
        async with self.engine.begin() as conn:
            await conn.execute(delete(rounds).where(rounds.c.id.in_(question_ids)))

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

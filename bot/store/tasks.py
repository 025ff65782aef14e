"""Tool calls made as tasks, kept until their result reached their person (`tool_tasks` table): the store's
`TaskBook`. Does I/O.

A row is written once the server made the task and deleted once the call ended here (its result shown, or the
call cancelled). What a process leaves behind (killed, or drained with the task still running) stays: the next
process polls those tasks again (`bot.telegram.restore`). Writes are one short transaction each (a task is
written twice in its life).
"""

from __future__ import annotations

import json
import time

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import KeptTask, Origin
from bot.store.audit import canonical_json
from bot.store.errors import unavailable_as
from bot.store.tables import tool_tasks

__all__ = ["TaskStore"]


class TaskStore:
    """The `tool_tasks` table of one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @unavailable_as("keeping a task")
    async def keep(self, task: KeptTask) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(tool_tasks).values(
                    id=task.id,
                    server=task.server,
                    task_id=task.task_id,
                    tool=task.tool,
                    arguments=canonical_json(task.arguments),
                    user_id=task.origin.user_id,
                    chat_id=task.origin.chat_id,
                    created=time.time(),
                    expires=task.expires,
                )
            )

    @unavailable_as("forgetting a task")
    async def close(self, task_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(tool_tasks).where(tool_tasks.c.id == task_id))

    @unavailable_as("reading the kept tasks")
    async def open_tasks(self) -> list[KeptTask]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(select(tool_tasks).order_by(tool_tasks.c.created, tool_tasks.c.id))
            ).all()
        return [
            KeptTask(
                id=row.id,
                server=row.server,
                task_id=row.task_id,
                tool=row.tool,
                arguments=json.loads(row.arguments),
                origin=Origin(chat_id=row.chat_id, user_id=row.user_id),
                expires=row.expires,
            )
            for row in rows
        ]

"""Waiting for what only PostgreSQL can see, such as a session waiting for a lock: nothing tells of it, so a
count over its statistics views is polled."""

from __future__ import annotations

import anyio
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine


async def until_counted(engine: AsyncEngine, query: str, **params: object) -> None:
    """Return once `query` (a `SELECT count(*) ...`) counts something."""
    while True:
        async with engine.connect() as conn:
            if (await conn.execute(text(query), params)).scalar_one():
                return
        await anyio.sleep(0.02)  # polling the condition (nothing else tells of a waiting session)

"""`python -m tests.store._upgrade_many CONFIG N`: N real processes run `toolnexus-bot db upgrade --config CONFIG`
at the same moment; prints their exit statuses (one JSON list) and exits 0.

Each process is `bot.cli.main` forked from this one after the bot's modules are imported (`tests.forked`).
"""

from __future__ import annotations

import json
import os
import sys

# Imported here once for every child: what `db upgrade` imports (the parser imports `check`), and what
# `anyio.run` and the two database drivers import at their first use.
import anyio._backends._asyncio  # noqa: F401
import sqlalchemy.dialects.postgresql.asyncpg
import sqlalchemy.dialects.sqlite.aiosqlite  # noqa: F401
from alembic import command  # noqa: F401

import bot.servers.check
import bot.store.commands  # noqa: F401
from tests.forked import fork_together


def race(config: str, count: int) -> list[int]:
    """Fork `count` children that each run `db upgrade` once the last of them is forked; their exit statuses."""
    children = fork_together([["db", "upgrade", "--config", config]] * count)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid, _ in children]


if __name__ == "__main__":
    print(json.dumps(race(sys.argv[1], int(sys.argv[2]))))

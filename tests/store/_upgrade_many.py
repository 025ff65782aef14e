"""`python -m tests.store._upgrade_many CONFIG N`: N real processes run `toolnexus-bot db upgrade --config CONFIG`
at the same moment; prints their exit statuses (one JSON list) and exits 0.

Each process is `bot.cli.main` forked from this one after the bot's modules are imported: importing them costs
a few seconds of CPU per process, and 20 of them on a 2-core machine would take longer than the migrations
being raced. The children wait on a pipe until all of them exist, so they start together.
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
from bot.cli import main


def race(config: str, count: int) -> list[int]:
    """Fork `count` children that each run `db upgrade` once the last of them is forked; their exit statuses."""
    go_read, go_write = os.pipe()
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os.close(go_write)
            os.read(go_read, 1)  # returns at end of file: when the parent closes its end
            try:
                status = main(["db", "upgrade", "--config", config])
            except BaseException:  # a child must never return into the parent's code
                import traceback

                traceback.print_exc()
                status = 99
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        children.append(pid)
    os.close(go_read)
    os.close(go_write)  # every child starts now
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in children]


if __name__ == "__main__":
    print(json.dumps(race(sys.argv[1], int(sys.argv[2]))))

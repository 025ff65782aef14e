"""`python -m tests.fleet._start_many CONFIG...`: one real bot process per config (`toolnexus-bot --config
CONFIG`), all started at the same moment; once every one says it is running (or has exited), each is sent SIGTERM.
Prints one JSON object and exits 0: each process's exit status, whether it said it was running, and its log's
last lines when it failed.

Each process is `bot.cli.main` forked from this one (`tests.forked`). Each child's stderr (its log) is a pipe read
here, so the wait is on what the bots say, never on the clock, up to DEADLINE_S in all.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import sys
import time

# Imported here once for every child: what a run imports before its first line of work.
import anyio._backends._asyncio  # noqa: F401
import sqlalchemy.dialects.postgresql.asyncpg  # noqa: F401
from alembic import command  # noqa: F401

import bot.telegram.app
import bot.web.server  # noqa: F401
from tests.forked import fork_together

RUNNING = b"is running"
DEADLINE_S = 150.0
"""After this long the children still alive are killed and count as failed (a hung start must not hang CI)."""


def race(configs: list[str]) -> dict[str, object]:
    children = fork_together([["--config", config] for config in configs], logs=True)
    logs = {pid: b"" for pid, _ in children}
    running: set[int] = set()
    open_logs = selectors.DefaultSelector()
    for pid, fd in children:
        assert fd is not None  # `logs=True`
        open_logs.register(fd, selectors.EVENT_READ, pid)
    deadline = time.monotonic() + DEADLINE_S
    stopped = False
    while open_logs.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            for pid, _ in children:
                _signal(pid, signal.SIGKILL)
            break
        for key, _ in open_logs.select(left):
            pid = key.data
            chunk = os.read(key.fd, 65536)
            if not chunk:
                open_logs.unregister(key.fd)
                os.close(key.fd)
                continue
            logs[pid] += chunk
            if RUNNING in logs[pid]:
                running.add(pid)
        still_open = {key.data for key in open_logs.get_map().values()}
        if not stopped and still_open <= running:
            stopped = True  # every child runs (or has exited already): stop them all, as a deploy would
            for pid, _ in children:
                _signal(pid, signal.SIGTERM)
    statuses = [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid, _ in children]
    return {
        "statuses": statuses,
        "running": [pid in running for pid, _ in children],
        "failed_logs": [
            logs[pid].decode(errors="replace")[-3000:]
            for (pid, _), status in zip(children, statuses, strict=True)
            if status != 0 or pid not in running
        ],
    }


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


if __name__ == "__main__":
    print(json.dumps(race(sys.argv[1:])))

"""Real bot processes started at the same moment, cheaply: `bot.cli.main` forked from a process that has imported
the bot's modules already (importing them costs a few seconds of CPU per process; 20 of them on a 2-core machine
would take longer than what is being raced). Used by `tests.store._upgrade_many` and `tests.fleet._start_many`."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from bot.cli import main

__all__ = ["fork_together"]


def fork_together(argvs: Sequence[Sequence[str]], *, logs: bool = False) -> list[tuple[int, int | None]]:
    """Fork a child per argv running `main(argv)`; all start once the last is forked (they wait on a pipe until the
    parent closes it). Each child's (pid, the read end of a pipe carrying its stderr with `logs`, else None)."""
    go_read, go_write = os.pipe()
    children: list[tuple[int, int | None]] = []
    for argv in argvs:
        log_read, log_write = os.pipe() if logs else (None, None)
        pid = os.fork()
        if pid == 0:
            os.close(go_write)
            if log_read is not None and log_write is not None:
                os.close(log_read)
                os.dup2(log_write, 2)
            os.read(go_read, 1)  # returns at end of file: when the parent closes its end
            try:
                status = main(list(argv))
            except BaseException:  # a child must never return into the parent's code
                import traceback

                traceback.print_exc()
                status = 99
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
        if log_write is not None:
            os.close(log_write)
        children.append((pid, log_read))
    os.close(go_read)
    os.close(go_write)  # every child starts now
    return children

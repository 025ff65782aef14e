"""Run a stdio MCP server and write its exit status to a file: `check` and sessions say how it ended. Does I/O.

Run by path (`python _watch_exit.py STATUS_FILE COMMAND [ARG ...]`), stdlib only, so it needs no install.
The server inherits stdin, stdout, stderr, cwd and environment; this process lets go of its own copies of
the pipes, so the client sees the server's end of input at once. Both share one process group, which the
MCP client signals as a whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    status_file, command = argv[0], argv[1:]
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"cannot start {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        status = 127
    else:
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda signum, _frame: child.send_signal(signum))
        status = child.wait()
    with open(status_file, "w", encoding="ascii") as out:
        out.write(str(status))
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

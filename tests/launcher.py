"""A stdio MCP server's process as the bot starts it, the server itself forked by the test's zygote. Does I/O.

`python -S tests/launcher.py SOCKET MODULE [ARGS...]` stands for `python -m MODULE [ARGS...]` in a test's server
config (`tests.zygote.server_command`). The bot starts it like any stdio server: it pipes its stdin, stdout and
stderr, reads its exit status, signals it. The launcher imports only the standard library (`-S`: not even
site-packages), hands its three stdio descriptors (and any other it was given), its environment and its folder to the zygote listening at
SOCKET, which forks the server from a process that imported the MCP SDK once; the server reads and writes the
bot's pipes itself. The launcher then stands for it: SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to the
server (through a pidfd: never to a recycled pid), and it ends as the server ended, with its exit status, or
killed by the same signal. Killed itself (a SIGKILL cannot be passed on), its server kills itself too
(`tests.zygote`), so nothing outlives what the bot sees.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import struct
import sys
from types import FrameType

_STATUS = struct.Struct("!i")  # as tests/zygote.py sends them
PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _inherited() -> list[int]:
    """The descriptors past stdio this process was given (`pass_fds`): the server gets them, at the same numbers."""
    listed = [int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2]
    return [fd for fd in listed if _is_open(fd)]  # the listing's own descriptor is closed by now


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def main(argv: list[str]) -> int:
    path, *command = argv
    inherited = _inherited()
    umask = os.umask(0o077)
    os.umask(umask)
    files, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    request = {
        "argv": command,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "umask": umask,
        "files": files,
        "launcher": os.getpid(),
        "fds": inherited,
    }
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(path)
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2, *inherited])
    message, fds, _flags, _address = socket.recv_fds(connection, _STATUS.size, 1)
    if len(message) != _STATUS.size or len(fds) != 1:
        print(f"launcher: the zygote at {path} did not fork {command}", file=sys.stderr)
        return 1
    pidfd = fds[0]
    # The pipes are the server's now: the bot sees their ends when the server's end, not the launcher's.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):  # it ended: its status is on its way
            signal.pidfd_send_signal(pidfd, signum)

    for signum in PASSED_ON:
        signal.signal(signum, pass_on)
    status = connection.recv(_STATUS.size)  # retried after each signal handled (PEP 475)
    if len(status) != _STATUS.size:
        return 1
    code: int = _STATUS.unpack(status)[0]
    if code < 0:  # killed by a signal: so is the launcher
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

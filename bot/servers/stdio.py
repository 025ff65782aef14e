"""A stdio MCP server's process: its stderr, its exit status, and the one explanation of its end. Does I/O.

`check` and the bot's sessions say the same of a server process that exited ("the server process exited with
status 3; its stderr ends: boom: bad config"): `exit_reason` words it for both.

The MCP SDK's `stdio_client` does not expose the process it starts, so what it allows is used:

- stderr: its `errlog` (the file the server's descriptor 2 is given) is the write end of a pipe. A thread reads
  the other end, forwards every chunk to this process's descriptor 2 (the console's log file, the journal), and
  keeps the last `TAIL_BYTES` in memory: the raw output never reaches the console's prompt, and an exit can be
  explained with what the server said last.
  `check` keeps it without forwarding it (`forward_stderr=False`).
- the exit status: nothing public gives it (the SDK waits for the process itself), so the server runs under
  `_watch_exit.py` (a stdlib script, a small extra process), which waits for it and writes its status to a file
  in a private folder; the folder is gone once the transport has closed. A missing command or folder is found
  before anything starts (`spawn_problem`): under the watcher it would look like the watcher's own exit.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread
from mcp import StdioServerParameters, stdio_client

from bot.config import ServerConfig

__all__ = ["TAIL_BYTES", "StdioProcess", "exit_reason", "spawn_problem", "stderr_tail"]

TAIL_BYTES: Final = 2048
"""How much of a server process's latest stderr is kept in memory to explain its exit."""
TAIL_LINES: Final = 3
"""How many of the last non-empty stderr lines an explanation quotes."""
TAIL_CLIP: Final = 300
"""The longest quote of stderr (its end is kept)."""
READ_CHUNK: Final = 4096
"""Bytes of a server process's stderr read at a time."""
SECRET_MIN_LEN: Final = 8
"""A secret-named environment value shorter than this is not looked for in stderr (it would hide common words)."""
DRAIN_S: Final = 1.0
"""How long an explanation waits for the rest of stderr once the process is gone (a child of the server that
kept the pipe open would hold it for ever)."""

WATCH_EXIT: Final = str(Path(__file__).with_name("_watch_exit.py"))
_SECRET_NAME: Final = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE|CREDENTIAL|AUTH", re.IGNORECASE
)
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def exit_reason(status: int, tail: str) -> str:
    """How a stdio server process ended, as `check` and the sessions say it: its status (or signal) and the end
    of its stderr (`stderr_tail`)."""
    how = f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"
    return f"the server process {how}" + (f"; its stderr ends: {tail}" if tail else "")


def stderr_tail(raw: bytes | str, hide: tuple[str, ...] = ()) -> str:
    """The last `TAIL_LINES` non-empty lines of `raw`, joined by " | ", control characters escaped, the
    strings in `hide` (the server's secrets) replaced, at most `TAIL_CLIP` characters (the end kept)."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    quoted = " | ".join(lines[-TAIL_LINES:])
    for secret in hide:
        quoted = quoted.replace(secret, "<redacted>")
    quoted = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else " ", quoted)
    return quoted if len(quoted) <= TAIL_CLIP else "..." + quoted[-(TAIL_CLIP - 3) :]


def server_secrets(server: ServerConfig) -> tuple[str, ...]:
    """Values (8 characters or more) of the server's environment whose names say they are secret (`GITHUB_TOKEN`,
    `API_KEY`, ...): a token the server may echo on stderr."""
    return tuple(v for k, v in server.env.items() if _SECRET_NAME.search(k) and len(v) >= SECRET_MIN_LEN)


def spawn_problem(server: ServerConfig) -> OSError | None:
    """Why the server's command cannot start, found without starting it (under the watcher, the spawn itself
    always succeeds): the working folder or the command is missing, or the command cannot be run."""
    assert server.command is not None
    if server.cwd is not None and not os.path.isdir(server.cwd):
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), server.cwd)
    command = server.command
    if os.sep not in command:
        path = server.env.get("PATH", os.environ.get("PATH"))
        if shutil.which(command, path=path) is None:
            return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
        return None
    full = os.path.join(server.cwd or ".", command)
    if not os.path.exists(full):
        return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command)
    if not os.access(full, os.X_OK):
        return PermissionError(errno.EACCES, os.strerror(errno.EACCES), command)
    return None


class StdioProcess(AbstractAsyncContextManager[Any]):
    """The stdio transport of one server process (an async context manager of the session's streams) that can
    say how the process ended (`ended`)."""

    def __init__(self, server: ServerConfig, *, forward_stderr: bool = True) -> None:
        self.server = server
        self._forward = _stderr_fd() if forward_stderr else None
        self._tail = bytearray()
        self._lock = threading.Lock()
        self._drained = threading.Event()
        self._status: int | None = None
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        return await self._stack.enter_async_context(self._open())

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._stack.__aexit__(*exc)

    @property
    def status(self) -> int | None:
        """The process's exit status (negative: the signal that killed it) once the transport has closed."""
        return self._status

    def tail(self) -> str:
        """The end of what the process wrote to stderr (`stderr_tail`), so far."""
        with self._lock:
            raw = bytes(self._tail)
        return stderr_tail(raw, server_secrets(self.server))

    async def ended(self) -> str | None:
        """How the process ended (`exit_reason`), once the transport has closed; None when no status is known.
        A `shared` server's stderr is not quoted: it serves everyone, so its last lines may be about someone else
        than the person shown the reason (they still reach the log, where the operator reads them)."""
        if self._status is None:
            return None
        if self.server.shared:
            return exit_reason(self._status, "")
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._drained.wait, DRAIN_S)
        return exit_reason(self._status, self.tail())

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[Any]:
        problem = spawn_problem(self.server)
        if problem is not None:
            raise problem
        assert self.server.command is not None
        folder = Path(tempfile.mkdtemp(prefix="toolnexus-stdio-"))
        status_file = folder / "status"
        params = StdioServerParameters(
            command=sys.executable,
            args=["-I", WATCH_EXIT, str(status_file), self.server.command, *self.server.args],
            env=dict(self.server.env) or None,
            cwd=self.server.cwd,
        )
        read_end, write_end = os.pipe()
        errlog = os.fdopen(write_end, "w", encoding="utf-8")
        threading.Thread(target=self._pump, args=(read_end,), name="stdio-stderr", daemon=True).start()
        try:
            async with stdio_client(params, errlog=errlog) as streams:
                errlog.close()  # the server has its own copy: the pipe ends when the server's side does
                yield streams
        finally:
            errlog.close()
            try:
                self._status = int(status_file.read_text(encoding="ascii"))
            except (OSError, ValueError):
                self._status = None
            shutil.rmtree(folder, ignore_errors=True)

    def _pump(self, fd: int) -> None:
        """Read the server's stderr until its end: forward it, and keep its last `TAIL_BYTES`."""
        forward = self._forward
        try:
            while chunk := os.read(fd, READ_CHUNK):
                with self._lock:
                    self._tail += chunk
                    del self._tail[:-TAIL_BYTES]
                if forward is not None:
                    try:
                        _write_all(forward, chunk)
                    except OSError:
                        forward = None  # stderr is gone: keep the tail only
        finally:
            os.close(fd)
            self._drained.set()


def _stderr_fd() -> int | None:
    """This process's descriptor 2 (not `sys.stderr`, which the console's prompt replaces)."""
    stream = sys.__stderr__
    try:
        return stream.fileno() if stream is not None else None
    except (OSError, ValueError):
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]

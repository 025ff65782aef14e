"""Real `toolnexus-bot` processes without the import: each one is forked from a process that imported the bot once.

A bot's cold start spends about 1.6 s of CPU importing (the MCP SDK, SQLAlchemy, PTB, aiohttp, the config models)
before its first line of work; the suite starts a hundred of them, and most of its tests are about what a running
bot does, not about its start. `open_bot` and `run_bot` take the command line and keywords that
`anyio.open_process` and `anyio.run_process` take for the installed command (`[str(EXE), ...]`) and give the same
kind of process: its own pid, stdio pipes, exit status, and real signals (SIGTERM, SIGKILL, SIGSTOP).

How: one zygote per test process, `python -m tests.zygote`, started at the first bot. It imports the bot (no event
loop, no thread) and waits on a socket; per bot it is sent the argv, the environment and the working directory
with the bot's stdin, stdout and stderr as file descriptors (SCM_RIGHTS), forks, and sends back the child's pid and
a pidfd (which signals exactly that process, never a recycled pid); when the child ends it sends its exit status.
The child takes the request's environment, directory and stdio, `sys.argv` of the installed command, the signal
handlers and mask of a fresh interpreter, and runs `bot.cli.main` as the `toolnexus-bot` script does.

What is about the cold start itself stays on the installed command: `tests/cli/test_first_minute.py`'s console,
the terminal tests of the console (a terminal is set up by the interpreter at start, so one is refused here),
`tests/fleet/test_cold_start.py`, `tests/test_operations.py`, `keygen`, the operator's unprivileged runs, and the
console whose environment sets `PYTHONUNBUFFERED` (read by the interpreter at start, so refused here too).

The stdio MCP servers bots start are forked the same way where a test's config names them with `server_command`
(`python -S tests/launcher.py SOCKET MODULE ARGS...` for `python -m MODULE ARGS...`): the bot starts the launcher
as it would start the server, the launcher hands its stdio to the zygote on a socket of this user's
(`_Zygote.servers`) with any other descriptor it was given (a test's listening socket: `tests.fakes.servers.durable`
is started this way by the tests themselves), passes signals on and ends as the server ended; a server whose
launcher is killed kills itself.
Each cold server start costs about 1.1 s of CPU importing the MCP SDK; the suite starts about a hundred.
What is about a server process itself stays cold: `tests.fakes.servers.hung` and `exits` in `tests/servers/
test_check.py` and the server-exit tests, and every server of a bot that runs as another user.

The bench's bot, `python -m bench.botproc` (the installed command's `main` behind the bench's switches), is forked the
same way for `tests/test_bench.py` (`BENCH`: `[*BENCH, ...]` as the command); the CPU guard's, under valgrind, is not.
`TESTS_BOT_START=cold` in the environment starts every bot of these helpers cold as well (to compare, or to rule
the zygote out of a failure).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import gc
import json
import locale
import os
import resource
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
from anyio.abc import ByteReceiveStream, ByteSendStream, Process

__all__ = [
    "BENCH",
    "EXE",
    "BotProcess",
    "open_bot",
    "run_bot",
    "run_bot_text",
    "server_command",
    "server_toml",
]

EXE = Path(sys.executable).with_name("toolnexus-bot")
BENCH = (sys.executable, "-m", "bench.botproc")
"""The bench's bot as `bench.scene` starts it; the rest of its command line is `bench.botproc`'s."""
REPO = Path(__file__).resolve().parents[1]
LAUNCHER = REPO / "tests" / "launcher.py"
"""A stdio server's process as the bot sees it; the server itself forked here (`server_command`)."""
COLD = os.environ.get("TESTS_BOT_START") == "cold"
"""Every bot from the installed command instead (to compare, or to rule the zygote out of a failure)."""
_STATUS = struct.Struct("!i")
_SERVER_FDS = 3 + 32
"""The most descriptors a launcher hands over: stdio and what a test passed it (a listening socket)."""
_HIGH_FD = 512
"""Where a child's received descriptors wait before they take their numbers (above any a request names)."""
_REQUEST_MAX = 1 << 20
"""The largest request (argv, environment, directory as JSON): a socket of sequenced packets carries it whole."""

FileArg = int | IO[Any] | None


# ----------------------------------------------------------------------------------------------- the test side


class _Zygote:
    """The zygote of this process, started at the first bot, ended when this process exits."""

    def __init__(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = mine
        self.folder = Path(tempfile.mkdtemp(prefix="toolnexus-zygote-"))
        self.servers = self.folder / "servers"
        """Where `tests/launcher.py` asks for a stdio server (a socket only this user can reach)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(str(self.servers))
        listener.listen(64)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.zygote", str(theirs.fileno()), str(listener.fileno())],
            pass_fds=[theirs.fileno(), listener.fileno()],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        theirs.close()
        listener.close()
        self.interpreter = _interpreter(os.environ)
        self.lock = threading.Lock()
        atexit.register(self.close)

    def close(self) -> None:
        self.control.close()  # the zygote ends at the end of its socket; bots still running keep running
        self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)

    def fork(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: str, stdio: Sequence[int]
    ) -> socket.socket:
        """A connection on which the zygote answers the child's pid and pidfd, later its exit status."""
        if _interpreter(env) != self.interpreter:
            raise ValueError(
                "PYTHON* variables are read by the interpreter at start: run the installed command"
            )
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o077)
        os.umask(umask)
        files, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        request = json.dumps(
            {"argv": list(argv), "env": dict(env), "cwd": cwd, "umask": umask, "files": files}
        ).encode()
        with self.lock, theirs:
            socket.send_fds(self.control, [request], [theirs.fileno(), *stdio])
        return mine


def _interpreter(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith("PYTHON")}


_zygote: _Zygote | None = None
_start_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _start_lock:
        if _zygote is None or _zygote.process.poll() is not None:
            _zygote = _Zygote()
        return _zygote


class _PipeReceive(ByteReceiveStream):
    """The read end of a pipe (a bot's stdout or stderr) as an anyio byte stream."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    async def receive(self, max_bytes: int = 65536) -> bytes:
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._fd is None:
                raise anyio.ClosedResourceError
            try:
                data = os.read(self._fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self._fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def aclose(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            anyio.notify_closing(fd)
            os.close(fd)
        await anyio.lowlevel.checkpoint()


class _PipeSend(ByteSendStream):
    """The write end of a pipe (a bot's stdin) as an anyio byte stream."""

    def __init__(self, fd: int) -> None:
        os.set_blocking(fd, False)
        self._fd: int | None = fd

    async def send(self, item: bytes) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
        view = memoryview(item)
        while view:
            if self._fd is None:
                raise anyio.ClosedResourceError
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
            except BrokenPipeError as exc:
                raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            anyio.notify_closing(fd)
            os.close(fd)
        await anyio.lowlevel.checkpoint()


@dataclass
class _Stdio:
    """The three descriptors to send (closed here once sent) and the test's ends of the pipes."""

    send: list[int]
    stdin: _PipeSend | None = None
    stdout: _PipeReceive | None = None
    stderr: _PipeReceive | None = None


def _stdio(stdin: FileArg, stdout: FileArg, stderr: FileArg) -> tuple[_Stdio, list[int]]:
    """What the child gets as fds 0, 1, 2 for `subprocess`-style arguments; the fds to close once sent."""
    ours: list[int] = []
    child: list[int] = []
    stdio = _Stdio(send=child)
    for index, arg in enumerate((stdin, stdout, stderr)):
        if arg == subprocess.STDOUT and index == 2:
            child.append(child[1])
            continue
        if arg == subprocess.PIPE:
            read, write = os.pipe()
            mine, theirs = (write, read) if index == 0 else (read, write)
            ours.append(theirs)
            if index == 0:
                stdio.stdin = _PipeSend(mine)
            elif index == 1:
                stdio.stdout = _PipeReceive(mine)
            else:
                stdio.stderr = _PipeReceive(mine)
            child.append(theirs)
        elif arg == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            ours.append(fd)
            child.append(fd)
        elif arg is None:
            child.append(index)  # inherited: what this process has
        else:
            child.append(arg if isinstance(arg, int) else arg.fileno())
    for fd in child:
        if os.isatty(fd):
            raise ValueError(
                "a terminal is set up by the interpreter at start: run the installed command instead"
            )
    return stdio, ours


class BotProcess(Process):
    """A bot forked by the zygote: what tests use of `anyio.abc.Process`."""

    def __init__(self, pid: int, pidfd: int, status: socket.socket, stdio: _Stdio) -> None:
        self._pid = pid
        self._pidfd = pidfd
        self._status = status
        self._returncode: int | None = None
        self._stdio = stdio

    def __repr__(self) -> str:
        return f"<BotProcess {self._pid} returncode={self._returncode}>"

    def _read_status(self, *, block: bool) -> None:
        if self._returncode is not None:
            return
        try:
            data = self._status.recv(_STATUS.size, 0 if block else socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        if len(data) != _STATUS.size:
            raise RuntimeError(f"the zygote ended without the exit status of {self._pid}")
        (self._returncode,) = _STATUS.unpack(data)
        self._status.close()
        os.close(self._pidfd)

    async def wait(self) -> int:
        while self._returncode is None:
            self._read_status(block=False)
            if self._returncode is None:
                await anyio.wait_readable(self._status)
        await anyio.lowlevel.checkpoint()
        return self._returncode

    def send_signal(self, sig: int) -> None:
        self._read_status(block=False)
        if self._returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it ended; the zygote reaps it
                signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        with anyio.CancelScope(shield=True):
            for stream in (self._stdio.stdin, self._stdio.stdout, self._stdio.stderr):
                if stream is not None:
                    await stream.aclose()
        try:
            await self.wait()
        except BaseException:
            self.kill()
            with anyio.CancelScope(shield=True):
                await self.wait()
            raise

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        self._read_status(block=False)
        return self._returncode

    @property
    def stdin(self) -> ByteSendStream | None:
        return self._stdio.stdin

    @property
    def stdout(self) -> ByteReceiveStream | None:
        return self._stdio.stdout

    @property
    def stderr(self) -> ByteReceiveStream | None:
        return self._stdio.stderr


def server_command(module: str, *args: str) -> list[str]:
    """The command line of the stdio MCP server `python -m MODULE ARGS...` for a test's server config: the
    server forked by this process's zygote when a bot starts it (`tests/launcher.py`), or started cold with
    `TESTS_BOT_START=cold`. Only for bots of this user (the zygote's socket is this user's)."""
    if COLD:
        return [sys.executable, "-m", module, *args]
    return [sys.executable, "-S", str(LAUNCHER), str(_the_zygote().servers), module, *args]


def server_toml(module: str, *args: str) -> str:
    """`server_command` as the `command` and `args` lines of a `[servers.<name>]` table."""
    command, *rest = server_command(module, *args)
    return f"command = {json.dumps(command)}\nargs = {json.dumps(rest)}\n"


def _argv(command: Sequence[str | os.PathLike[str]]) -> list[str]:
    argv = [os.fspath(part) for part in command]
    if not argv or (argv[0] != str(EXE) and not _is_bench(argv)):
        raise ValueError(f"not the installed command {EXE} nor {' '.join(BENCH)}: {argv[:3]}")
    return argv


async def open_bot(
    command: Sequence[str | os.PathLike[str]],
    *,
    stdin: FileArg = subprocess.PIPE,
    stdout: FileArg = subprocess.PIPE,
    stderr: FileArg = subprocess.PIPE,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Process:
    """`anyio.open_process([str(EXE), ...], ...)` (or `[*BENCH, ...]`), the process forked by the zygote (by
    `anyio.open_process` itself with `TESTS_BOT_START=cold` in the environment)."""
    argv = _argv(command)
    if COLD:
        return await anyio.open_process(argv, stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, env=env)
    stdio, ours = _stdio(stdin, stdout, stderr)
    try:
        connection = _the_zygote().fork(
            argv,
            os.environ if env is None else env,
            os.fspath(cwd) if cwd is not None else os.getcwd(),
            stdio.send,
        )
    finally:
        for fd in ours:
            os.close(fd)
    connection.setblocking(False)
    while True:
        try:
            message, fds, _flags, _address = socket.recv_fds(connection, _STATUS.size, 1)
            break
        except BlockingIOError:
            await anyio.wait_readable(connection)
    if len(message) != _STATUS.size or len(fds) != 1:
        raise RuntimeError(f"the zygote did not fork {argv}")
    (pid,) = _STATUS.unpack(message)
    return BotProcess(pid, fds[0], connection, stdio)


async def run_bot(
    command: Sequence[str | os.PathLike[str]],
    *,
    input: bytes | None = None,
    check: bool = True,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """`anyio.run_process([str(EXE), ...], ...)`, the process forked by the zygote."""
    stdin = subprocess.PIPE if input else subprocess.DEVNULL
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

    async def drain(stream: ByteReceiveStream | None, into: list[bytes]) -> None:
        assert stream is not None
        async for chunk in stream:
            into.append(chunk)

    async with (
        await open_bot(command, stdin=stdin, cwd=cwd, env=env) as process,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(drain, process.stdout, chunks["stdout"])
        tg.start_soon(drain, process.stderr, chunks["stderr"])
        if process.stdin is not None:
            if input:
                await process.stdin.send(input)
            await process.stdin.aclose()
        returncode = await process.wait()
    out, err = b"".join(chunks["stdout"]), b"".join(chunks["stderr"])
    if check and returncode != 0:
        raise subprocess.CalledProcessError(returncode, _argv(command), out, err)
    return subprocess.CompletedProcess(_argv(command), returncode, out, err)


def run_bot_text(
    command: Sequence[str | os.PathLike[str]],
    *,
    input: str,
    cwd: str | os.PathLike[str],
    env: Mapping[str, str],
    timeout: float,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([str(EXE), ...], input=..., capture_output=True, text=True, timeout=...)` from a test that
    runs no event loop, the process forked by the zygote; its output decoded as `text=True` decodes it."""

    async def run() -> subprocess.CompletedProcess[bytes]:
        with anyio.fail_after(timeout):
            return await run_bot(command, input=input.encode(), check=False, cwd=cwd, env=env)

    done = anyio.run(run)
    return subprocess.CompletedProcess(done.args, done.returncode, _text(done.stdout), _text(done.stderr))


def _text(data: bytes) -> str:
    """As `subprocess` decodes output with `text=True`: the locale's encoding, universal newlines."""
    return (
        data.decode("utf-8" if sys.flags.utf8_mode else locale.getencoding())
        .replace("\r\n", "\n")
        .replace("\r", "\n")
    )


# --------------------------------------------------------------------------------------------- the zygote side


@dataclass(frozen=True)
class _Request:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    umask: int
    files: int
    """The (soft) limit of open files."""
    launcher: int = 0
    """A stdio server's: the pid of the `tests/launcher.py` that asked for it (argv is `MODULE ARGS...`)."""
    fds: tuple[int, ...] = ()
    """A stdio server's: the numbers of the descriptors past stdio its launcher was given, sent after stdio."""


def _serve(control: socket.socket, servers: socket.socket) -> _Request | None:
    """Fork a child per request until the control socket ends (None); in a child, its request.

    Bots are asked for on `control` by the test process; stdio servers on `servers`, each by its launcher on a
    connection of its own."""
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> pid, the connection to answer on
    poller = select.poll()
    poller.register(control, select.POLLIN)
    poller.register(servers, select.POLLIN)
    while True:
        for fd, _event in poller.poll():
            if fd == servers.fileno():
                connection, _address = servers.accept()
                try:
                    message, fds, _flags, _address = socket.recv_fds(connection, _REQUEST_MAX, _SERVER_FDS)
                except OSError:  # a launcher gone before it asked
                    message, fds = b"", []
                request = _Request(**json.loads(message)) if message else None
                if request is None or len(fds) != 3 + len(request.fds):
                    for unused in fds:
                        os.close(unused)
                    connection.close()
                    continue
                child = _fork(request, connection, fds, children, poller, (control, servers))
                if child is not None:
                    return child
                continue
            if fd != control.fileno():
                pid, connection = children.pop(fd)
                poller.unregister(fd)
                _pid, status = os.waitpid(pid, 0)
                os.close(fd)
                with connection, contextlib.suppress(OSError):  # OSError: the test's side is gone
                    connection.sendall(_STATUS.pack(os.waitstatus_to_exitcode(status)))
                continue
            message, fds, _flags, _address = socket.recv_fds(control, _REQUEST_MAX, 4)
            if not message:
                return None
            child = _fork(
                _Request(**json.loads(message)),
                socket.socket(fileno=fds[0]),
                fds[1:],
                children,
                poller,
                (control, servers),
            )
            if child is not None:
                return child


def _fork(
    request: _Request,
    connection: socket.socket,
    stdio: list[int],
    children: dict[int, tuple[int, socket.socket]],
    poller: select.poll,
    own: tuple[socket.socket, ...],
) -> _Request | None:
    """Fork the child of `request` with `stdio` as its fds 0, 1, 2: in the child its request, in the zygote None
    (the child's pid and pidfd sent on `connection`, its exit status later). `own`: the zygote's own sockets, which
    the child closes before its descriptors take their numbers (closed after, one of them could close a passed
    descriptor that took its number)."""
    assert threading.active_count() == 1, "the zygote forks only while it has one thread"
    pid = os.fork()
    if pid == 0:
        connection.close()
        for mine in own:
            mine.close()
        for pidfd, (_pid, other) in children.items():
            os.close(pidfd)
            other.close()
        # Out of the way first (a received descriptor may hold a number another one is to take), then in place.
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, _HIGH_FD) for fd in stdio]
        for fd in set(stdio):
            os.close(fd)
        for target, fd in zip([0, 1, 2, *request.fds], moved, strict=True):
            os.dup2(fd, target)
        for fd in moved:
            os.close(fd)
        return request
    for fd in set(stdio):
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    children[pidfd] = (pid, connection)
    poller.register(pidfd, select.POLLIN)
    with contextlib.suppress(OSError):  # the asker is gone: the child runs on its stdio, and is reaped
        socket.send_fds(connection, [_STATUS.pack(pid)], [pidfd])
    return None


def _become(request: _Request) -> None:
    """In the child: the process the installed command would have been, up to its imports."""
    os.chdir(request.cwd)
    os.umask(request.umask)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(request.files, hard), hard))
    os.environ.clear()
    os.environ.update(request.env)
    import time

    time.tzset()
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        if sig == signal.SIGINT:
            signal.signal(sig, signal.default_int_handler)
        elif sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_IGN)  # as the interpreter sets them at start
        else:
            with contextlib.suppress(OSError):  # SIGRTMIN..: some are reserved by the C library
                signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    if request.launcher:
        sys.path[0] = request.cwd  # `python -m MODULE`: the folder it started in; runpy sets sys.argv
    elif _is_bench(request.argv):
        import bench.botproc

        sys.argv = [str(bench.botproc.__file__), *request.argv[len(BENCH) :]]
        sys.path[0] = request.cwd  # `python -m`: the folder it started in
    else:
        sys.argv = list(request.argv)
        sys.path[0] = str(Path(request.argv[0]).parent)  # the script's folder, as for the installed command


def _die_with(launcher: int) -> None:
    """In a stdio server's child: SIGKILL itself as soon as its launcher is gone (killed: a SIGKILL is not
    passed on), as a server process killed by the bot would be."""
    try:
        pidfd = os.pidfd_open(launcher)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="launcher gone", daemon=True).start()


def _run_server(request: _Request) -> None:
    """In a stdio server's child: `python -m MODULE ARGS...`."""
    module, *args = request.argv
    sys.argv = [module, *args]  # runpy puts the module's file first, as `python -m` does
    # The interpreter's stdio objects were the zygote's (on /dev/null): new ones on fds 0, 1 and 2, as at start.
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    sys.stdin = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stderr = open(  # noqa: SIM115
        2, "w", encoding=encoding, errors="backslashreplace", closefd=False, buffering=1
    )
    _die_with(request.launcher)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def _is_bench(argv: Sequence[str]) -> bool:
    return tuple(argv[: len(BENCH)]) == BENCH


def _serve_forever(control_fd: int, servers_fd: int) -> None:
    # What a run, a console or a check imports before its first line of work, once for every child.
    import anyio._backends._asyncio  # noqa: F401
    import sqlalchemy.dialects.postgresql.asyncpg  # noqa: F401
    from alembic import command  # noqa: F401

    import bot.compose.console
    import bot.compose.telegram

    # And what the test servers import (the MCP SDK's server side), for the stdio servers bots start.
    import bot.demo_server
    import bot.servers.check
    import bot.store.agent_commands
    import bot.store.commands
    import bot.telegram.app
    import bot.web.server  # noqa: F401
    import tests.fakes.servers._stdio  # noqa: F401
    from bench.botproc import main as bench_main
    from bot.cli import main

    # Into the permanent generation: a child's collections would otherwise visit (and so copy) every page of it.
    gc.freeze()
    control = socket.socket(fileno=control_fd)
    request = _serve(control, socket.socket(fileno=servers_fd))
    if request is None:
        return
    _become(request)
    if request.launcher:
        _run_server(request)
        sys.exit(0)
    sys.exit(bench_main(sys.argv[1:]) if _is_bench(request.argv) else main())


if __name__ == "__main__":
    _serve_forever(int(sys.argv[1]), int(sys.argv[2]))

"""The console host's lifecycle: the terminal set up, the sign-in callback page started, signals watched, the
command loop run. Does I/O.

The parts are put together above the hosts (`bot.compose.console`), which passes in the sign-in callback page
too (a `CallbackServer`): this host and the web endpoint are layers of one level and do not import each other.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import TypeAlias

import anyio
from anyio.abc import TaskGroup
from prompt_toolkit.patch_stdout import patch_stdout

from bot.console.host import Console, ConsoleScreen
from bot.servers.oauth import SignIns

INTERRUPTED = 130
"""The exit status after SIGINT or SIGTERM with nothing to cancel (128 + SIGINT, as shells report it)."""

CallbackServer: TypeAlias = Callable[[SignIns, TaskGroup], Awaitable[None]]
"""Starts, in the task group, the loopback page a browser on this machine returns to after signing in
(`signins.redirect_uri`). Raises `OSError` when it cannot listen there."""


def set_up_terminal(stack: AsyncExitStack, screen: ConsoleScreen) -> None:
    """At a terminal, for as long as `stack` is open: output from other tasks lands above the prompt, and (but
    with `--log-level DEBUG`) log lines and the servers' stderr go to a file, whose path the screen shows. Before
    the servers start: they inherit this process's stderr."""
    if not screen.reader.interactive:
        return
    stack.enter_context(patch_stdout(raw=True))
    if logging.getLogger().getEffectiveLevel() >= logging.WARNING:  # not --log-level DEBUG
        log = stack.enter_context(_stderr_to(console_log_path(os.environ)))
        if log is not None:
            screen.say(f"Log lines and the servers' stderr go to {log} (--log-level DEBUG shows them here).")


async def run_console(console: Console, signins: SignIns | None, callback_server: CallbackServer) -> int:
    """Run the console until /quit, Ctrl-D or end of input (0), or SIGINT with nothing running / SIGTERM (130).

    SIGINT (Ctrl-C when no terminal prompt has the keyboard, e.g. with piped input) cancels the running
    call or question, as `/cancel` does. `callback_server` serves the sign-in callback page (servers with
    `oauth`, `signins`).
    """
    interrupted = False
    async with anyio.create_task_group() as tg:
        if signins is not None:
            await _serve_callback(callback_server, signins, tg, console.screen)

        async def on_signal() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    if signum == signal.SIGINT and console.interrupt():
                        continue
                    interrupted = True
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_signal)
        await console.run()
        tg.cancel_scope.cancel()
    return INTERRUPTED if interrupted else 0


def console_log_path(environ: Mapping[str, str]) -> Path:
    """Where the console at a terminal writes its log lines and the servers' stderr: the XDG state folder."""
    state = environ.get("XDG_STATE_HOME") or str(
        Path(environ.get("HOME") or Path.home()) / ".local" / "state"
    )
    return Path(state) / "toolnexus-bot" / "console.log"


@contextmanager
def _stderr_to(path: Path) -> Iterator[Path | None]:
    """This process's stderr (file descriptor 2, which every stdio server it starts inherits) to `path` for
    the block: log lines and raw server output stay out of the prompt. The path, or None when it cannot be
    opened (stderr is left as it is)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    except OSError:
        yield None
        return
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield path
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


async def _serve_callback(
    serve: CallbackServer, signins: SignIns, tg: TaskGroup, screen: ConsoleScreen
) -> None:
    """The loopback page a browser on this machine returns to after signing in (`/oauth/callback`)."""
    try:
        await serve(signins, tg)
    except OSError as exc:
        screen.say(f"  Sign-in links cannot come back to this console: {exc.strerror or exc}")
        return

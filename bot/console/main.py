"""Wires the console host: registry, hub, the line source (a terminal or a pipe) and signals. Does I/O.

The sign-in callback page is served by a `CallbackServer` passed in from above (`bot.compose.console`): this
host and the web endpoint are layers of one level and do not import each other.
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

from bot.config import Config
from bot.console.host import Console
from bot.console.terminal import LineReader, choose_reader
from bot.core import PromptRegistry
from bot.core.relay import LocalSignIns
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns, loopback_redirect_uri, sign_ins
from bot.store import open_configured_store

INTERRUPTED = 130
"""The exit status after SIGINT or SIGTERM with nothing to cancel (128 + SIGINT, as shells report it)."""

CallbackServer: TypeAlias = Callable[[SignIns, TaskGroup], Awaitable[None]]
"""Starts, in the task group, the loopback page a browser on this machine returns to after signing in
(`signins.redirect_uri`). Raises `OSError` when it cannot listen there."""


async def run_console(config: Config, callback_server: CallbackServer) -> int:
    """Run the console until /quit, Ctrl-D or end of input (0), or SIGINT with nothing running / SIGTERM (130).

    SIGINT (Ctrl-C when no terminal prompt has the keyboard, e.g. with piped input) cancels the running
    call or question, as `/cancel` does. `callback_server` serves the sign-in callback page (servers with
    `oauth`).
    """
    reader = choose_reader()
    if isinstance(reader, LineReader):
        reader.start()
    console = Console(reader)
    prompts = PromptRegistry(console, config.elicitation.timeout_s)
    interrupted = False
    oauth = any(server.oauth is not None for server in config.servers)
    async with AsyncExitStack() as stack:
        if reader.interactive:
            stack.enter_context(patch_stdout(raw=True))  # output from other tasks lands above the prompt
            if logging.getLogger().getEffectiveLevel() >= logging.WARNING:  # not --log-level DEBUG
                log = stack.enter_context(_stderr_to(console_log_path(os.environ)))
                if log is not None:
                    console.say(
                        f"Log lines and the servers' stderr go to {log} (--log-level DEBUG shows them here)."
                    )
        store = await stack.enter_async_context(open_configured_store(config)) if oauth else None
        signins = None
        if store is not None:  # the console's browser is on this machine: the loopback redirect
            redirect = loopback_redirect_uri(config)
            signins = sign_ins(
                config,
                store.signins,
                prompts,
                store.audit_sign_in,
                redirect_uri=redirect,
                relay=LocalSignIns(),
            )
        auth = None if signins is None else signins.auth_for
        # Gated calls are refused, never run: the console shows no approval cards (yet).
        hub = await stack.enter_async_context(
            Hub(config, prompts, auth=auth, no_approver_reason="the console has no approvers")
        )
        tg = await stack.enter_async_context(anyio.create_task_group())
        if signins is not None:
            await _serve_callback(callback_server, signins, tg, console)

        async def on_signal() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    if signum == signal.SIGINT and console.hub is not None and console.interrupt():
                        continue
                    interrupted = True
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(on_signal)
        await console.run(hub)
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


async def _serve_callback(serve: CallbackServer, signins: SignIns, tg: TaskGroup, console: Console) -> None:
    """The loopback page a browser on this machine returns to after signing in (`/oauth/callback`)."""
    try:
        await serve(signins, tg)
    except OSError as exc:
        console.say(f"  Sign-in links cannot come back to this console: {exc.strerror or exc}")
        return

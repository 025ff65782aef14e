"""Wires the console host: registry, hub, the line source (a terminal or a pipe) and signals. Does I/O.

The sign-in callback page is served by a `CallbackServer` passed in from above (`bot.compose.console`): this
host and the web endpoint are layers of one level and do not import each other.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TypeAlias

import anyio
from anyio.abc import TaskGroup
from prompt_toolkit.patch_stdout import patch_stdout

from bot.config import Config
from bot.console.host import Console
from bot.console.terminal import LineReader, choose_reader
from bot.core import PromptRegistry
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
        store = await stack.enter_async_context(open_configured_store(config)) if oauth else None
        signins = None
        if store is not None:  # the console's browser is on this machine: the loopback redirect
            redirect = loopback_redirect_uri(config)
            signins = sign_ins(config, store.signins, prompts, store.audit_sign_in, redirect_uri=redirect)
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


async def _serve_callback(serve: CallbackServer, signins: SignIns, tg: TaskGroup, console: Console) -> None:
    """The loopback page a browser on this machine returns to after signing in (`/oauth/callback`)."""
    try:
        await serve(signins, tg)
    except OSError as exc:
        console.say(f"  Sign-in links cannot come back to this console: {exc.strerror or exc}")
        return

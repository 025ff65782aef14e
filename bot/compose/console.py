"""The console put together: its screen, the prompt registry, sign-ins and the hub, built once, in order, and
its sign-in callback page, served on the loopback interface. Does I/O.

The console's process is smaller than the bot's (`bot.compose.process`): no claim on the database, which it
opens only for servers with `oauth`; no approvers (a gated call is refused); no fleet; no audit observer.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from urllib.parse import urlsplit

from anyio.abc import TaskGroup
from starlette.applications import Starlette

from bot.config import Config
from bot.console import main as console_main
from bot.console.host import Console, ConsoleScreen
from bot.console.terminal import LineReader, choose_reader
from bot.core import PromptRegistry
from bot.core.relay import LocalSignIns
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns, loopback_redirect_uri, sign_ins
from bot.store import open_configured_store
from bot.web import WebServer
from bot.web.oauth import SignInFleet, callback_routes

__all__ = ["loopback_callback", "run_console"]


async def run_console(config: Config) -> int:
    """`toolnexus-bot console`: the parts in order (the screen first: the registry shows questions on it; the
    terminal set up before the hub starts the servers, which inherit its stderr), then the console's lifecycle
    (`bot.console.main.run_console`) with its sign-in callback page."""
    reader = choose_reader()
    if isinstance(reader, LineReader):
        reader.start()
    screen = ConsoleScreen(reader)
    prompts = PromptRegistry(screen, config.elicitation.timeout_s)
    oauth = any(server.oauth is not None for server in config.servers)
    async with AsyncExitStack() as stack:
        console_main.set_up_terminal(stack, screen)
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
        # Gated calls are refused, never run: the console shows no approval cards (yet).
        hub = await stack.enter_async_context(
            Hub(
                config,
                prompts,
                auth=None if signins is None else signins.auth_for,
                no_approver_reason="the console has no approvers",
            )
        )
        return await console_main.run_console(Console(screen, hub), signins, loopback_callback)


async def loopback_callback(signins: SignIns, tg: TaskGroup) -> None:
    """Serve `/oauth/callback` on 127.0.0.1 at the port of `signins.redirect_uri`, in `tg`.

    Raises:
        OSError: the port cannot be listened on.
    """
    where = urlsplit(signins.redirect_uri)
    server = WebServer(
        Starlette(routes=callback_routes(SignInFleet(signins), lambda: None)), "127.0.0.1", where.port or 80
    )
    await tg.start(server.run)

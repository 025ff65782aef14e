"""The console with its sign-in callback page, served on the loopback interface. Does I/O."""

from __future__ import annotations

from urllib.parse import urlsplit

from anyio.abc import TaskGroup
from starlette.applications import Starlette

from bot.config import Config
from bot.console import main as console_main
from bot.servers.oauth import SignIns
from bot.web import WebServer
from bot.web.oauth import SignInFleet, callback_routes

__all__ = ["loopback_callback", "run_console"]


async def run_console(config: Config) -> int:
    """`toolnexus-bot console` (`bot.console.main.run_console`) with its sign-in callback page."""
    return await console_main.run_console(config, loopback_callback)


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

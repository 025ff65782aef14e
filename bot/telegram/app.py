"""Composition root and lifecycle of the Telegram bot. Does I/O.

The MCP sessions and the PTB Application live in one task and one exit stack (anyio contexts must be
left by the task that entered them), and PTB is driven by hand instead of `run_polling`, which cannot
run inside a running event loop.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import anyio
from telegram.error import InvalidToken, TelegramError
from telegram.ext import Application, ApplicationBuilder

from bot.config import Config, ServerConfig, TelegramMode
from bot.core import PromptRegistry
from bot.servers.hub import Hub
from bot.telegram.access import Access, Refusals
from bot.telegram.bot import CardBot, build_bot
from bot.telegram.flood import FloodLimiter
from bot.telegram.handlers import access, commands, forms
from bot.telegram.handlers.deps import Deps
from bot.telegram.handlers.errors import on_error
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner

logger = logging.getLogger(__name__)

POLL_TIMEOUT_S = 10
YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the GC's young generation once the bot runs (Python's default: 700)."""
ALLOWED_UPDATES = ["message", "callback_query"]


class StartFailed(Exception):
    """The bot could not start talking to the Bot API; `problem` is one line for a person, without secrets."""

    def __init__(self, problem: str, *, config: bool) -> None:
        super().__init__(problem)
        self.problem = problem
        self.config = config
        """The config is at fault (a rejected token, a wrong `api_base_url`), not the network."""


def build_application(config: Config) -> Application:  # type: ignore[type-arg]
    """The PTB Application: the configured Bot API server, flood control that waits out 429s."""
    # PTB 22 warns on every RetryAfter unless opted in to timedelta values; the rate limiter's retry of a
    # 429 would otherwise surface as that warning (an error under strict warning filters).
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    token = config.require_telegram().get()
    bot = build_bot(token, config.telegram.api_base_url, FloodLimiter())
    return ApplicationBuilder().bot(bot).concurrent_updates(True).build()


async def serve(
    config: Config,
    stop: anyio.Event,
    ready: anyio.Event | None = None,
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run the bot until `stop` is set; then cancel every pending prompt, settle its card, and shut down.

    `transport` replaces how servers are reached (tests pass in-process servers); `clock` is the time refusals
    to strangers are rationed by (tests pass a virtual one).
    """
    app = build_application(config)
    assert isinstance(app.bot, CardBot)
    allowed = Access.of(config.telegram)
    surface = TelegramSurface(app.bot, allowed)
    prompts = PromptRegistry(surface, config.elicitation.timeout_s)
    async with Hub(config, prompts, transport=transport) as hub:
        runner = ToolRunner(hub, prompts, surface, allowed)
        deps = Deps(config.telegram, allowed, hub, prompts, surface, runner, ToolButtons())
        app.add_handlers(access.handlers(allowed, Refusals(clock=clock)), group=-1)
        # The handlers match disjoint updates; taps (two of every three updates) are checked first.
        app.add_handlers(forms.handlers(deps) + commands.handlers(deps))
        app.add_error_handler(on_error)
        await _initialize(app, config)
        async with app:
            await app.bot.set_my_commands(commands.COMMANDS)
            await app.start()
            try:
                await _start_updates(app, config)
                logger.info("bot @%s is running", app.bot.username)
                if ready is not None:
                    ready.set()
                await stop.wait()
                logger.info("stopping: cancelling pending prompts")
                await hub.aclose()  # settles every card while Telegram is still reachable
            finally:
                with anyio.CancelScope(shield=True):
                    if app.updater is not None and app.updater.running:
                        await app.updater.stop()
                    if app.running:
                        await app.stop()


async def _initialize(app: Application, config: Config) -> None:  # type: ignore[type-arg]
    """PTB's initialize, whose getMe checks the token. PTB's own error for a rejected token quotes the token,
    and a network error may quote the URL, which holds it: a `StartFailed` without either is raised instead."""
    where = config.telegram.api_base_url
    try:
        await app.initialize()
    except InvalidToken:
        raise StartFailed(
            f"telegram.token: the Bot API at {where} rejects it (a wrong token, or a wrong telegram.api_base_url)",
            config=True,
        ) from None
    except TelegramError as exc:
        reason = str(exc).replace(config.require_telegram().get(), "<redacted>")
        raise StartFailed(f"cannot use the Bot API at {where}: {reason}", config=False) from None


async def _start_updates(app: Application, config: Config) -> None:  # type: ignore[type-arg]
    """Polling (the default), or a webhook that refuses requests without the secret token."""
    assert app.updater is not None
    telegram = config.telegram
    if telegram.mode is TelegramMode.WEBHOOK:
        hook = telegram.webhook
        assert hook.url is not None and hook.secret_token is not None  # checked by the config
        await app.updater.start_webhook(
            listen=hook.listen,
            port=hook.port,
            url_path=hook.path.lstrip("/"),
            webhook_url=hook.url,
            secret_token=hook.secret_token.get(),
            allowed_updates=ALLOWED_UPDATES,
        )
        logger.info("webhook listening on %s:%s%s", hook.listen, hook.port, hook.path)
        return
    await app.updater.start_polling(timeout=POLL_TIMEOUT_S, allowed_updates=ALLOWED_UPDATES)


async def run_bot(config: Config) -> int:
    """`toolnexus-bot --config PATH`: run until SIGINT or SIGTERM, then exit 0.

    Raises:
        StartFailed: the Bot API rejects the token, or cannot be reached.
    """
    stop, ready = anyio.Event(), anyio.Event()

    async def settle_heap() -> None:
        # Everything alive once the bot runs (modules, PTB, the SDK, pydantic's schemas) lives as long as the
        # process: keep the cyclic GC's full collections from walking it again and again.
        await ready.wait()
        gc.collect()
        gc.freeze()
        # A call allocates its objects in bursts that are freed by reference counting moments later (a call
        # makes no cyclic garbage: bench/, issue 5); at the default 700 the young generation was collected
        # several times per elicitation, each time walking objects about to die.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])

    async def watch_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                stop.set()
                return

    failed: StartFailed | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_signals)
        tg.start_soon(settle_heap)
        try:
            await serve(config, stop, ready)
        except StartFailed as exc:
            failed = exc  # raised below as itself, not inside the task group's ExceptionGroup
        tg.cancel_scope.cancel()
    if failed is not None:
        raise failed
    return 0

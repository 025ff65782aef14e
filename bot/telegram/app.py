"""Lifecycle of the Telegram bot over its finished parts (`BotParts`): handlers registered, PTB started, kept
questions restored, updates taken until stopped or drained, then everything stopped in order. Does I/O.

The parts are put together above the hosts (`bot.compose.process`, `bot.compose.telegram`), which pass in the
web endpoint too: this host and the web endpoint are layers of one level and do not import each other. PTB is
driven by hand instead of `run_polling`, which cannot run inside a running event loop; its Application lives in
the task that entered the MCP sessions (anyio contexts must be left by the task that entered them).
"""

from __future__ import annotations

import gc
import logging
import signal
from collections.abc import Awaitable, Callable

import anyio
from telegram.ext import Application

from bot.config import Config, TelegramMode
from bot.core import PromptRegistry, RoundBook
from bot.store.errors import SecondInstance
from bot.telegram.api_watch import ANOTHER_POLLER, ApiWatch
from bot.telegram.drain import drain, take_answers
from bot.telegram.handlers import agents, commands, second_factor
from bot.telegram.handlers.deps import Deps
from bot.telegram.handlers.register import register
from bot.telegram.parts import BotParts, Endpoint
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner

logger = logging.getLogger(__name__)

POLL_TIMEOUT_S = 10
YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the GC's young generation once the bot runs (Python's default: 700)."""
ALLOWED_UPDATES = ["message", "callback_query"]


async def serve(
    parts: BotParts,
    web: Endpoint | None,
    stop: anyio.Event,
    ready: anyio.Event | None,
    draining: anyio.Event,
) -> None:
    """Run the bot until `stop` is set; then cancel every pending prompt, settle its card, and shut down.

    Or until `draining` is set (SIGTERM): then take no new work, give running calls `[run] drain_s` to finish,
    and shut down leaving what the store keeps to the next process (`bot.telegram.drain`); `stop` during the
    drain cuts it short.

    With `[web]`, the web endpoint (`web`) runs beside PTB (webhook mode needs it): it starts once PTB can take
    updates and stops first, so no update arrives that PTB would not handle.
    """
    config, app, store, surface = parts.config, parts.app, parts.store, parts.surface
    approvals, signins, fleet, hub = parts.approvals, parts.signins, parts.fleet, parts.hub
    async with anyio.create_task_group() as tg:
        register_handlers(parts)
        fleet_done = anyio.Event()
        async with app:
            await app.bot.set_my_commands(commands.menu(agents.menu(config) + second_factor.menu(config)))
            await app.start()
            try:
                # Before updates (polled or delivered): a tap on a kept card finds it.
                await parts.place.start(tg, fleet_done)
                if approvals is not None:
                    await approvals.start(tg)
                if web is not None:
                    await tg.start(web.run)
                await _start_updates(app, config, parts.watch)
                logger.info("bot @%s is running", app.bot.username)
                _say_local_only(config)
                if store is not None and store.audit_note is not None:
                    logger.warning("%s", store.audit_note)
                if ready is not None:
                    ready.set()
                await _until_stopped(stop, draining, parts.watch)
                fleet.drain()  # takes nothing more; what it holds is given back at the end
                if draining.is_set() and not stop.is_set():
                    book = None if store is None else store.rounds
                    await _drain(config, app, parts.runner, parts.prompts, surface, stop, book)
                logger.info("stopping: cancelling pending prompts")
                if web is not None:
                    web.stop()
                if approvals is not None:
                    approvals.stop()  # calls waiting for approval end; their requests stay in the store
                if signins is not None:
                    signins.stop()  # sign-ins waiting for a browser end with their cards
                await hub.aclose()  # settles every card while Telegram is still reachable
                await surface.settle_parked()  # and answered ones still waiting for a result
            finally:
                fleet_done.set()  # the partitions are given back (and the bus closed) as the task group ends
                with anyio.CancelScope(shield=True):
                    if approvals is not None:
                        approvals.stop()  # PTB's stop waits for the calls' tasks, some maybe waiting here
                    if web is not None:
                        web.stop()
                    if app.updater is not None and app.updater.running:
                        await app.updater.stop()
                    if app.running:
                        await app.stop()


def register_handlers(parts: BotParts) -> None:
    """Every handler of the bot on its Application (`bot.telegram.handlers.register`), with the parts their
    callbacks read (`context.deps`)."""
    store = parts.store
    deps = Deps(
        config=parts.config,
        access=parts.allowed,
        hub=parts.hub,
        prompts=parts.prompts,
        surface=parts.surface,
        runner=parts.runner,
        tool_buttons=parts.buttons,
        refusals=parts.refusals,
        approvers=parts.config.approvers,
        approvals=parts.approvals,
        signins=parts.signins,
        agents=None if store is None else store.agents,
        grants=None if store is None or not parts.config.gateway.oauth else store.grants,
        audit=None if store is None else store.audit,
        memory=parts.memory,
    )
    register(parts.app, deps)


def _say_local_only(config: Config) -> None:
    """The one-line warning at start for a plain-http loopback `public_url` (trying the gateway locally)."""
    if config.web is not None and config.web.local_only:
        logger.warning(
            "[web] public_url %s is plain http on this machine: agents here can try the gateway; "
            "nothing else can reach it (use https behind a reverse proxy for real)",
            config.web.public_url,
        )


async def _until_stopped(stop: anyio.Event, draining: anyio.Event, watch: ApiWatch) -> None:
    """Wait for a stop or a drain.

    Raises:
        SecondInstance: another process polls with this token (a 409 Conflict before the first answered poll).
    """
    await _first(stop, draining, watch.another_poller)
    if watch.another_poller.is_set():
        raise SecondInstance(ANOTHER_POLLER)


async def _first(*events: anyio.Event) -> None:
    """Wait until one of `events` is set."""
    async with anyio.create_task_group() as tg:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(wait, event)


async def _drain(
    config: Config,
    app: Application,  # type: ignore[type-arg]
    runner: ToolRunner,
    prompts: PromptRegistry,
    surface: TelegramSurface,
    stop: anyio.Event,
    book: RoundBook | None,
) -> None:
    """SIGTERM: no new updates (the webhook answers 503 from now on: `bot.compose.telegram`), answers to this process's
    cards still taken, running calls given `[run] drain_s`; then what the store keeps is left for the next process."""
    logger.info("draining (SIGTERM): no new work; running calls get %g s to finish", config.run.drain_s)
    async with anyio.create_task_group() as polling:
        if app.updater is not None and app.updater.running:
            await app.updater.stop()  # confirms what it fetched; the rest waits in Telegram
            polling.start_soon(take_answers, app, surface.answers_a_card, ALLOWED_UPDATES)
        await drain(app, runner, prompts, config.run.drain_s, stop, book, surface)
        polling.cancel_scope.cancel()


async def _start_updates(app: Application, config: Config, watch: ApiWatch) -> None:  # type: ignore[type-arg]
    """Polling (the default), or a webhook registered with Telegram (the web endpoint receives it).

    The webhook stays registered when the bot stops (as PTB's own webhook server left it): Telegram keeps
    the updates meanwhile and delivers them once the bot is back.
    """
    if config.telegram.mode is TelegramMode.WEBHOOK:
        assert config.web is not None and config.telegram.webhook_secret is not None  # checked by the config
        url = config.web.webhook_url
        await app.bot.set_webhook(
            url=url, secret_token=config.telegram.webhook_secret.get(), allowed_updates=ALLOWED_UPDATES
        )
        logger.info("webhook set: %s", url)
        return
    assert app.updater is not None
    await app.updater.start_polling(
        timeout=POLL_TIMEOUT_S, allowed_updates=ALLOWED_UPDATES, error_callback=watch.poll_failed
    )


async def run_bot(serve: Callable[[anyio.Event, anyio.Event, anyio.Event], Awaitable[None]]) -> int:
    """`toolnexus-bot --config PATH`: `serve(stop, ready, drain)` until SIGINT or SIGTERM, then exit 0.

    SIGTERM drains (`serve`'s `drain`): what the store keeps stays open for the next process. SIGINT (Ctrl-C at a
    terminal) is a hard stop, also during a drain: open questions are cancelled towards their servers and their
    cards say the bot stopped.
    """
    stop, ready, draining = anyio.Event(), anyio.Event(), anyio.Event()

    async def settle_heap() -> None:
        # Everything alive once the bot runs (modules, PTB, the SDK, pydantic's schemas) lives as long as the
        # process: keep the cyclic GC's full collections from walking it again and again.
        await ready.wait()
        gc.collect()
        gc.freeze()
        # A call allocates its objects in bursts that reference counting frees moments later (a call makes no
        # cyclic garbage); at the default threshold the young generation was collected several times per
        # elicitation, each time walking objects about to die.
        gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])

    async def watch_signals() -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if signum == signal.SIGTERM and not draining.is_set():
                    draining.set()
                    continue
                stop.set()  # SIGINT, or a second SIGTERM: stop now
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_signals)
        tg.start_soon(settle_heap)
        await serve(stop, ready, draining)
        tg.cancel_scope.cancel()
    return 0

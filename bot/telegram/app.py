"""Composition root and lifecycle of the Telegram bot. Does I/O.

The MCP sessions and the PTB Application live in one task and one exit stack (anyio contexts must be
left by the task that entered them), and PTB is driven by hand instead of `run_polling`, which cannot
run inside a running event loop.

The web endpoint (`[web]`) is built by an `EndpointFactory` passed in from above (`bot.compose.telegram`):
this host and the web endpoint are layers of one level and do not import each other.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import anyio
from anyio.abc import TaskStatus
from telegram.ext import Application, ApplicationBuilder

from bot.config import Config, ServerConfig, TelegramMode
from bot.core import AgentBook, PromptRegistry, RoundBook
from bot.core.approval_service import ApprovalService
from bot.core.fleet import Fleet
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns, sign_ins
from bot.store import Store, open_configured_store
from bot.store.errors import SecondInstance
from bot.store.fleet_state import Shares, shares_of
from bot.store.inbox import InboxStore
from bot.store.postgres_fleet import fleet_of
from bot.telegram.access import Access, Refusals
from bot.telegram.api_watch import ANOTHER_POLLER, ApiWatch
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.bot import CardBot, build_bot
from bot.telegram.drain import drain, take_answers
from bot.telegram.fleet import fleet_part
from bot.telegram.flood import FloodLimiter
from bot.telegram.handlers import access, agents, audit, commands, forms, second_factor, signin
from bot.telegram.handlers import approvals as approval_taps
from bot.telegram.handlers.deps import Deps
from bot.telegram.handlers.errors import on_error
from bot.telegram.second_factor import SecondFactors
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner

logger = logging.getLogger(__name__)

POLL_TIMEOUT_S = 10
YOUNG_GC_THRESHOLD = 10_000
"""Allocations between collections of the GC's young generation once the bot runs (Python's default: 700)."""
ALLOWED_UPDATES = ["message", "callback_query"]


@dataclass(frozen=True, slots=True)
class EndpointParts:
    """What the web endpoint is built from: the bot's parts it serves (health, metrics, webhook, pages)."""

    config: Config
    app: Application  # type: ignore[type-arg]
    watch: ApiWatch
    prompts: PromptRegistry
    hub: Hub
    stop: anyio.Event
    """Set when the bot stops (then /healthz says so)."""
    surface: TelegramSurface
    signins: SignIns | None
    draining: anyio.Event
    """Set from the first moment of a drain (SIGTERM)."""
    fleet: Fleet
    """The process's fleet (alone, or an instance of a fleet on PostgreSQL): whom it owns (the webhook routes the
    others' updates), its bus (everything subscribes while the endpoint is built; the bus runs once the
    partitions do: `bot.telegram.fleet`)."""
    shares: Shares
    """What Mini App answers and sign-in returns reach the process holding their prompt through."""
    agents: AgentBook | None = None
    """The agent tokens (with a database): the gateway of `[gateway]` checks them."""
    inbox: InboxStore | None = None
    """The updates delivered (with a database): the webhook records each before handling it, once."""


class Endpoint(Protocol):
    """A server the bot runs beside PTB: started once PTB takes updates, stopped first."""

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None: ...

    def stop(self) -> None: ...


EndpointFactory: TypeAlias = Callable[[EndpointParts], Endpoint | None]
"""Builds the web endpoint of `[web]` (None without it)."""


def build_application(config: Config, watch: ApiWatch) -> Application:  # type: ignore[type-arg]
    """The PTB Application: the configured Bot API server, flood control that waits out 429s (`watch`
    counts what passes it). Webhook mode has no updater: the web endpoint feeds PTB's update queue."""
    # PTB 22 warns on every RetryAfter unless opted in to timedelta values; the rate limiter's retry of a
    # 429 would otherwise surface as that warning (an error under strict warning filters).
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    token = config.require_telegram().get()
    bot = build_bot(token, config.telegram.api_base_url, watch, Access.of(config.telegram), watch.polled)
    builder = ApplicationBuilder().bot(bot).concurrent_updates(True)
    if config.telegram.mode is TelegramMode.WEBHOOK:
        builder = builder.updater(None)
    return builder.build()


async def serve(
    config: Config,
    stop: anyio.Event,
    ready: anyio.Event | None = None,
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    endpoint: EndpointFactory,
    clock: Callable[[], float] = time.monotonic,
    drain: anyio.Event | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> None:
    """Run the bot until `stop` is set; then cancel every pending prompt, settle its card, and shut down.

    Or until `drain` is set (SIGTERM): then take no new work, give running calls `[run] drain_s` to finish, and
    shut down leaving what the store keeps to the next process (`bot.telegram.drain`); `stop` during the drain
    cuts it short.

    With `[web]`, the web endpoint (`endpoint`) runs beside PTB (webhook mode needs it): it starts once PTB
    can take updates and stops first, so no update arrives that PTB would not handle. `transport` replaces how
    servers are reached (tests pass in-process servers).
    `clock` is the time refusals to strangers are rationed by, `approval_sleep` how approvals wait for their
    reminders and escalations (tests pass virtual ones).
    """
    allowed = Access.of(config.telegram)
    fleet = fleet_of(config)  # unstarted: the store and the registry receive it
    async with open_configured_store(config, claim=True, fleet=fleet) as store:  # refuses a second bot
        shares = shares_of(config, store, fleet)  # alone in memory; in a fleet in rows, woken by its bus
        # In a fleet (PostgreSQL, webhook mode) Telegram's budget is shared through the database.
        watch = ApiWatch(FloodLimiter(fleet=shares.budget))
        app = build_application(config, watch)
        assert isinstance(app.bot, CardBot)
        surface = TelegramSurface(app.bot, allowed)
        observer = None if store is None else store.observer  # the audit log: told of every event first
        prompts = PromptRegistry(surface, config.elicitation.timeout_s, observer, fence=fleet)
        book = None if store is None else store.rounds  # open questions outlive the process
        signins = (
            None
            if store is None
            else sign_ins(
                config, store.signins, prompts, store.audit_sign_in, book=store.rounds, relay=shares.signins
            )
        )
        auth = None if signins is None else signins.auth_for
        signed_in = None if signins is None else signins.signed_in
        service, no_approver = _approval_service(config, store, fleet, approval_sleep)
        async with Hub(
            config,
            prompts,
            transport=transport,
            observer=observer,
            book=book,
            auth=auth,
            signed_in=signed_in,
            approver=service,
            no_approver_reason=no_approver,
            names=None if service is None else service.name_of,
            sign_receipts=None if store is None or store.audit.keys is None else store.audit.keys.sign,
        ) as hub:
            codes = (
                None
                if service is None or store is None or store.factors is None
                else SecondFactors(store.factors, service, surface)
            )
            approvals = None if service is None else TelegramApprovals(service, surface, hub, codes)
            await _serve(
                config,
                app,
                watch,
                surface,
                prompts,
                hub,
                stop,
                ready,
                store,
                allowed,
                clock,
                endpoint,
                approvals,
                signins,
                drain,
                fleet,
                shares,
            )


def _approval_handlers(
    app: Application,  # type: ignore[type-arg]
    config: Config,
    approvals: TelegramApprovals,
    allowed: Access,
) -> None:
    """Before the access gate (approvers need not be allowed): the names cards show, and the second factor's
    `/2fa` and codes (of the approvers of rules that ask for one)."""
    app.add_handlers(approval_taps.name_handlers(approvals, allowed, config.approvers), group=-2)
    coded = frozenset[int]().union(*(r.approvers for r in config.approvals if r.second_factor))
    if approvals.codes is not None and coded:
        app.add_handlers(second_factor.handlers(approvals.codes, coded), group=-3)


async def _serve(
    config: Config,
    app: Application,  # type: ignore[type-arg]
    watch: ApiWatch,
    surface: TelegramSurface,
    prompts: PromptRegistry,
    hub: Hub,
    stop: anyio.Event,
    ready: anyio.Event | None,
    store: Store | None,
    allowed: Access,
    clock: Callable[[], float],
    endpoint: EndpointFactory,
    approvals: TelegramApprovals | None,
    signins: SignIns | None,
    drain: anyio.Event | None,
    fleet: Fleet,
    shares: Shares,
) -> None:
    draining = drain or anyio.Event()
    async with anyio.create_task_group() as tg:
        runner = ToolRunner(hub, prompts, surface, allowed)
        buttons = ToolButtons(lists=shares.tool_lists)
        deps = Deps(config.telegram, allowed, hub, prompts, surface, runner, buttons)
        if approvals is not None:
            _approval_handlers(app, config, approvals, allowed)
        app.add_handlers(access.handlers(allowed, Refusals(clock=clock), config.approvers), group=-1)
        # The handlers match disjoint updates; taps (two of every three updates) are checked first.
        admin = [] if store is None else audit.handlers(config.telegram.admins, store.audit, surface)
        gated = [] if approvals is None else approval_taps.handlers(approvals)
        signing = [] if signins is None else signin.handlers(allowed, signins, hub, surface)
        part = fleet_part(fleet, store, prompts, runner, surface, hub, approvals)
        tokens = agents.handlers(config, None if store is None else store.agents, surface)
        app.add_handlers(
            gated
            + signing
            + tokens
            + forms.handlers(deps)
            + admin
            + commands.handlers(deps, agents.help_lines(config) + second_factor.help_lines(config))
        )
        app.add_error_handler(on_error)
        web = endpoint(
            EndpointParts(
                config,
                app,
                watch,
                prompts,
                hub,
                stop,
                surface,
                signins,
                draining,
                fleet,
                shares,
                agents=None if store is None else store.agents,
                inbox=None if store is None else store.inbox,
            )
        )
        fleet_done = anyio.Event()
        async with app:
            await app.bot.set_my_commands(commands.menu(agents.menu(config) + second_factor.menu(config)))
            await app.start()
            try:
                # Before updates (polled or delivered): a tap on a kept card finds it.
                await part.start(tg, fleet_done)
                if approvals is not None:
                    await approvals.start(tg)
                if web is not None:
                    await tg.start(web.run)
                await _start_updates(app, config, watch)
                logger.info("bot @%s is running", app.bot.username)
                _say_local_only(config)
                if store is not None and store.audit_note is not None:
                    logger.warning("%s", store.audit_note)
                if ready is not None:
                    ready.set()
                await _until_stopped(stop, draining, watch)
                fleet.drain()  # takes nothing more; what it holds is given back at the end
                if draining.is_set() and not stop.is_set():
                    book = None if store is None else store.rounds
                    await _drain(config, app, runner, prompts, surface, stop, book)
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


def _approval_service(
    config: Config,
    store: Store | None,
    fleet: Fleet,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> tuple[ApprovalService | None, str]:
    """The hub's approver for `[[approvals]]` (it needs the database: a request must outlive the process), or
    None and why gated calls are refused."""
    if not config.approvals:
        return None, "this host cannot ask approvers"
    if store is None:
        return None, "approvals need the database ([storage])"
    # Where nobody waits, the requester's owner carries a decision out; in a fleet, decisions wake the process
    # whose call waits, wherever they are taken (the store publishes them on the fleet's bus).
    service = ApprovalService(store.approvals, owns=fleet.owns, sleep=sleep)
    service.listen(fleet.bus)
    return service, ""


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


async def run_bot(config: Config, endpoint: EndpointFactory) -> int:
    """`toolnexus-bot --config PATH`: run until SIGINT or SIGTERM, then exit 0 (`endpoint`: as `serve`).

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
        await serve(config, stop, ready, endpoint=endpoint, drain=draining)
        tg.cancel_scope.cancel()
    return 0

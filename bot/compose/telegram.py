"""The Telegram bot put together: its front and its own parts on the process's (`bot.compose.process`), and its
web endpoint (`[web]`): health, metrics, the webhook, the Mini App, the sign-in callback. Does I/O."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import httpx2
from starlette.routing import BaseRoute
from telegram import Update
from telegram.ext import Application, ApplicationBuilder

from bot.compose.process import Process, open_process
from bot.config import Config, ServerConfig, TelegramMode
from bot.core import PromptRegistry
from bot.core.agent_calls import AgentCalls, LocalAgentCalls
from bot.core.fleet import Fleet
from bot.servers.hub import Hub
from bot.store import Store
from bot.store.agent_calls import FleetAgentCalls
from bot.store.fleet_state import Shares
from bot.store.inbox import InboxStore
from bot.store.postgres_fleet import PostgresFleet
from bot.telegram import app as telegram_app
from bot.telegram.access import Access, Refusals
from bot.telegram.api_watch import ApiWatch
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.bot import CardBot, build_bot
from bot.telegram.fleet import AloneRestore, FleetPart, InFleet
from bot.telegram.flood import FloodLimiter
from bot.telegram.handlers.deps import CONTEXT_TYPES
from bot.telegram.parts import BotParts
from bot.telegram.second_factor import SecondFactors
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolButtons, ToolRunner
from bot.telegram.updates import Lean
from bot.web import Webhook, WebServer, build_app, metrics_registry
from bot.web.client_documents import ClientDocuments, PublicOnly
from bot.web.gateway import GATEWAY_PATH, Gateway
from bot.web.gateway_oauth import GatewayAuthority, oauth_routes
from bot.web.hooks import Hooks, PermissionDesk
from bot.web.miniapp import MiniApp
from bot.web.miniapp.links import FormLinks
from bot.web.oauth import SignInFleet, callback_routes
from bot.web.webhook import HANDLED_HERE, Routing

__all__ = ["TelegramFront", "build_application", "run_bot", "serve", "web_endpoint"]


async def serve(
    config: Config,
    stop: anyio.Event,
    ready: anyio.Event | None = None,
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    drain: anyio.Event | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    documents: Callable[[], httpx2.AsyncBaseTransport] = PublicOnly,
) -> None:
    """Put the bot together and run it (`bot.telegram.app.serve`) until `stop` is set, or `drain` (SIGTERM) has
    run its course.

    `transport` replaces how servers are reached (tests pass in-process servers). `clock` is the time refusals
    to strangers are rationed by, `approval_sleep` how approvals wait for their reminders and escalations (tests
    pass virtual ones). `documents` makes the transport OAuth clients' metadata documents are fetched through.

    Raises:
        SecondInstance: another live bot holds this database, or polls with this token.
        StoreUnavailable: the database cannot be reached or migrated.
    """
    draining = drain or anyio.Event()
    front = functools.partial(telegram_front, config)
    async with open_process(config, front, transport=transport, approval_sleep=approval_sleep) as process:
        parts = bot_parts(process, Refusals(clock=clock))
        web = web_endpoint(parts, stop, draining, documents)
        await telegram_app.serve(parts, web, stop, ready, draining)


async def run_bot(config: Config) -> int:
    """`toolnexus-bot --config PATH`: run until SIGINT or SIGTERM, then exit 0 (`bot.telegram.app.run_bot`)."""

    async def run(stop: anyio.Event, ready: anyio.Event, drain: anyio.Event) -> None:
        await serve(config, stop, ready, drain=drain)

    return await telegram_app.run_bot(run)


@dataclass(frozen=True, slots=True)
class TelegramFront:
    """The bot's face: flood control counting what passes it, PTB, the cards."""

    watch: ApiWatch
    app: Application  # type: ignore[type-arg]
    allowed: Access
    surface: TelegramSurface


def telegram_front(config: Config, store: Store | None, shares: Shares) -> TelegramFront:
    """The front on the open store: Telegram's budget is the fleet's share (in a fleet, through the database;
    alone, its own). A form's card links to its Mini App page (`[miniapp]`), whose address the config says."""
    allowed = Access.of(config.telegram)
    outbox = None if store is None else store.outbox  # a result is kept until sent: a kill loses none
    watch = ApiWatch(FloodLimiter(fleet=shares.budget, outbox=outbox))
    app = build_application(config, watch)
    assert isinstance(app.bot, CardBot)
    return TelegramFront(watch, app, allowed, TelegramSurface(app.bot, allowed, _form_links(config)))


def build_application(config: Config, watch: ApiWatch) -> Application:  # type: ignore[type-arg]
    """The PTB Application: the configured Bot API server, flood control that waits out 429s (`watch`
    counts what passes it). Webhook mode has no updater: the web endpoint feeds PTB's update queue."""
    # PTB 22 warns on every RetryAfter unless opted in to timedelta values; the rate limiter's retry of a
    # 429 would otherwise surface as that warning (an error under strict warning filters).
    os.environ.setdefault("PTB_TIMEDELTA", "true")
    token = config.require_telegram().get()
    bot = build_bot(token, config.telegram.api_base_url, watch, Access.of(config.telegram), watch.polled)
    builder = ApplicationBuilder().bot(bot).context_types(CONTEXT_TYPES).concurrent_updates(True)
    if config.telegram.mode is TelegramMode.WEBHOOK:
        builder = builder.updater(None)
    return builder.build()


def bot_parts(process: Process[TelegramFront], refusals: Refusals) -> BotParts:
    """The bot's own parts on the process's: the approval cards (with the second factor), the runner, the
    `/tools` lists, and in a fleet this instance's partitions."""
    config, store, front, hub, prompts = (
        process.config,
        process.store,
        process.front,
        process.hub,
        process.prompts,
    )
    surface, service = front.surface, process.approver
    codes = (
        None
        if service is None or store is None or store.factors is None
        else SecondFactors(store.factors, service, surface)
    )
    approvals = (
        None
        if service is None
        else TelegramApprovals(
            service, surface, hub, codes, access=front.allowed, tasks=None if store is None else store.tasks
        )
    )
    runner = ToolRunner(hub, prompts, surface, front.allowed)
    buttons = ToolButtons(lists=process.shares.tool_lists)
    place = fleet_place(process.fleet, store, prompts, runner, surface, hub, approvals)
    return BotParts(
        config,
        store,
        front.app,
        front.watch,
        front.allowed,
        refusals,
        surface,
        prompts,
        hub,
        runner,
        buttons,
        process.signins,
        approvals,
        process.fleet,
        process.shares,
        place,
        process.memory,
    )


def fleet_place(
    fleet: Fleet,
    store: Store | None,
    prompts: PromptRegistry,
    runner: ToolRunner,
    surface: TelegramSurface,
    hub: Hub,
    approvals: TelegramApprovals | None,
) -> FleetPart:
    """What the host starts before updates: in a fleet on PostgreSQL, the partitions, what this instance drops
    when it loses some and takes up when it gains some; alone, the restart's restore of every kept question."""
    if isinstance(fleet, PostgresFleet) and store is not None:
        return InFleet(fleet, store, prompts, runner, surface, hub, approvals)
    return AloneRestore(store, surface, runner, hub)


def _form_links(config: Config) -> FormLinks | None:
    """Where long forms' Mini App pages are (`[miniapp]`, with `[web] public_url`)."""
    if not config.miniapp_on:
        return None
    assert config.web is not None and config.web.public_url is not None  # miniapp_on says so
    return FormLinks(config.miniapp, config.web.public_url)


def web_endpoint(
    parts: BotParts,
    stop: anyio.Event,
    draining: anyio.Event,
    documents: Callable[[], httpx2.AsyncBaseTransport] = PublicOnly,
) -> WebServer | None:
    """The web endpoint, when `[web]` is configured: health and metrics, and the webhook in webhook mode.

    From the first moment of a drain (`draining`) `/healthz` answers 503 and the webhook takes only answers to
    this process's cards (503 for the rest: Telegram delivers them again, to the next process); once `stop` is
    set `/healthz` says the bot stopped."""
    config, app, surface, store = parts.config, parts.app, parts.surface, parts.store
    if config.web is None:
        return None
    inbox = None if store is None else store.inbox
    webhook = None
    routing = None
    if config.telegram.mode is TelegramMode.WEBHOOK:
        assert config.telegram.webhook_secret is not None  # checked by the config

        def takes(update: Update) -> bool:
            return not draining.is_set() or surface.answers_a_card(update)

        routing = _routing(parts.fleet, inbox, app)
        webhook = Webhook(
            config.telegram.webhook_secret.get(),
            app.bot,
            app.update_queue,
            takes,
            inbox,
            config.bot_id(),
            HANDLED_HERE if routing is None else routing,
            Lean(Access.of(config.telegram)),
        )

    async def reachable() -> bool:
        return await parts.watch.reachable(app.bot)

    agents = _gateway(parts)
    gateway, hooks = (None, None) if agents is None else agents
    oauth = [] if gateway is None or not gateway.oauth else _oauth(parts, documents, lambda: app.bot.username)
    mini, mini_routes = _mini_app(parts)
    # The browser's return to a sign-in (with OAuth servers): through the fleet's share, alone or not.
    signing = [] if parts.signins is None else [SignInFleet(parts.signins)]
    web_app = build_app(
        running=lambda: app.running and not stop.is_set(),
        draining=draining.is_set,
        reachable=reachable,
        metrics=metrics_registry(parts.prompts, parts.hub, parts.watch, webhook, parts.fleet, routing),
        owning=parts.fleet.owned_count,
        webhook=webhook,
        routes=mini_routes
        + [route for one in signing for route in callback_routes(one, lambda: app.bot.username)]
        + ([] if gateway is None else gateway.routes())
        + ([] if hooks is None else hooks.routes())
        + oauth,
    )
    services = [] if gateway is None else [gateway.run]
    services += [] if routing is None else [routing.run]
    services += [] if mini is None else mini.services()
    services += [one.run for one in signing]
    return WebServer(web_app, config.web.listen, config.web.port, services)


def _routing(
    fleet: Fleet,
    inbox: InboxStore | None,
    app: Application,  # type: ignore[type-arg]
) -> Routing | None:
    """In a fleet (with its inbox): the webhook's routing of updates to the instance that owns their person."""
    if not isinstance(fleet, PostgresFleet) or inbox is None:
        return None  # alone: every update is this process's
    return Routing(fleet.partitions, fleet.bus, inbox, app.bot, app.update_queue)


def _gateway(parts: BotParts) -> tuple[Gateway, Hooks] | None:
    """The MCP endpoint for agents and the endpoint for their hooks, which share how an agent's permission
    prompt is decided (`[gateway] enabled`; the config requires a public URL and a database)."""
    if not parts.config.gateway.enabled:
        return None
    assert parts.store is not None  # the config requires [storage]
    allows = Access.of(parts.config.telegram).allows
    desk = PermissionDesk(
        parts.hub, parts.memory, parts.store.audit, parts.config.audit.content, names=parts.store.approvals
    )
    gateway = Gateway(
        parts.config,
        parts.hub,
        parts.prompts,
        parts.store.agents,
        allows=allows,
        desk=desk,
        tasks=parts.store.tasks,
        owners=parts.fleet,
        calls=_agent_calls(parts.fleet, parts.store),
        version=_version(),
        grants=parts.store.grants if parts.config.gateway.oauth else None,
    )
    return gateway, Hooks(desk, parts.store.agents, allows=allows)


def _oauth(
    parts: BotParts, documents: Callable[[], httpx2.AsyncBaseTransport], bot_username: Callable[[], str]
) -> list[BaseRoute]:
    """The gateway's own OAuth (`[gateway] oauth`): metadata, the SDK's endpoints, the consent page."""
    config, store = parts.config, parts.store
    assert store is not None and config.web is not None and config.web.public_url is not None
    issuer = config.web.public_url.rstrip("/")
    grants = store.grants
    authority = GatewayAuthority(grants, ClientDocuments(grants, documents), issuer, issuer + GATEWAY_PATH)
    return oauth_routes(authority, bot_username)


def _agent_calls(fleet: Fleet, store: Store) -> AgentCalls:
    """How agents' calls reach their person's owner: in a fleet, in rows woken by its bus (any instance may
    receive an agent's request); alone, in memory (this process owns everyone, and runs every call itself)."""
    if not isinstance(fleet, PostgresFleet):
        return LocalAgentCalls()
    return FleetAgentCalls(store.engine, fleet.bus, fleet.partitions.bot_id, fleet.partitions.instance)


def _version() -> str:
    try:
        return version("toolnexus-bot")
    except PackageNotFoundError:
        return "0"


def _mini_app(parts: BotParts) -> tuple[MiniApp | None, list[BaseRoute]]:
    """Long forms' Mini App pages (`[miniapp]`, with `[web] public_url`): the app and its routes (the cards link
    to them: `_form_links`)."""
    config = parts.config
    if not config.miniapp_on:
        return None, []
    assert config.web is not None and config.web.public_url is not None  # miniapp_on says so
    token = config.require_telegram().get()
    mini = MiniApp(
        parts.prompts,
        parts.surface.answer_from_page,
        token,
        config.miniapp,
        config.web.public_url,
        share=parts.shares.miniapp,
    )
    return mini, mini.routes()

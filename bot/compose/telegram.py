"""The Telegram bot with its web endpoint (`[web]`): health, metrics, the webhook, the Mini App, the sign-in
callback. Does I/O."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
from starlette.routing import BaseRoute
from telegram import Update

from bot.config import Config, ServerConfig, TelegramMode
from bot.core import PromptRegistry
from bot.store.postgres_fleet import PostgresFleet
from bot.telegram import app as telegram_app
from bot.telegram.access import Access
from bot.telegram.app import EndpointParts
from bot.telegram.surface import TelegramSurface
from bot.telegram.updates import Lean
from bot.web import Webhook, WebServer, build_app, metrics_registry
from bot.web.gateway import Gateway
from bot.web.miniapp import MiniApp
from bot.web.oauth import SignInFleet, callback_routes
from bot.web.webhook import Routing

__all__ = ["run_bot", "serve", "web_endpoint"]


async def serve(
    config: Config,
    stop: anyio.Event,
    ready: anyio.Event | None = None,
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    drain: anyio.Event | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> None:
    """`bot.telegram.app.serve` with the web endpoint of `[web]`."""
    await telegram_app.serve(
        config,
        stop,
        ready,
        transport=transport,
        endpoint=web_endpoint,
        clock=clock,
        drain=drain,
        approval_sleep=approval_sleep,
    )


async def run_bot(config: Config) -> int:
    """`toolnexus-bot --config PATH` (`bot.telegram.app.run_bot`) with the web endpoint of `[web]`."""
    return await telegram_app.run_bot(config, web_endpoint)


def web_endpoint(parts: EndpointParts) -> WebServer | None:
    """The web endpoint, when `[web]` is configured: health and metrics, and the webhook in webhook mode.

    From the first moment of a drain `/healthz` answers 503 and the webhook takes only answers to this process's
    cards (503 for the rest: Telegram delivers them again, to the next process)."""
    config, app, surface, leaving = parts.config, parts.app, parts.surface, parts.draining
    if config.web is None:
        return None
    webhook = None
    routing = None
    if config.telegram.mode is TelegramMode.WEBHOOK:
        assert config.telegram.webhook_secret is not None  # checked by the config

        def takes(update: Update) -> bool:
            return not leaving.is_set() or surface.answers_a_card(update)

        routing = _routing(parts)
        webhook = Webhook(
            config.telegram.webhook_secret.get(),
            app.bot,
            app.update_queue,
            takes,
            parts.inbox,
            config.bot_id(),
            routing,
            Lean(Access.of(config.telegram)),
        )

    async def reachable() -> bool:
        return await parts.watch.reachable(app.bot)

    gateway = _gateway(parts)
    mini, mini_routes = _mini_app(config, parts.prompts, surface, parts)
    # The browser's return to a sign-in (with OAuth servers): through the fleet's share, alone or not.
    signing = [] if parts.signins is None else [SignInFleet(parts.signins)]
    web_app = build_app(
        running=lambda: app.running and not parts.stop.is_set(),
        draining=leaving.is_set,
        reachable=reachable,
        metrics=metrics_registry(parts.prompts, parts.hub, parts.watch, webhook, parts.fleet, routing),
        owning=parts.fleet.owned_count,
        webhook=webhook,
        routes=mini_routes
        + [route for one in signing for route in callback_routes(one, lambda: app.bot.username)]
        + ([] if gateway is None else gateway.routes()),
    )
    services = [] if gateway is None else [gateway.run]
    services += [] if routing is None else [routing.run]
    services += [] if mini is None else mini.services()
    services += [one.run for one in signing]
    return WebServer(web_app, config.web.listen, config.web.port, services)


def _routing(parts: EndpointParts) -> Routing | None:
    """In a fleet (with its inbox): the webhook's routing of updates to the instance that owns their person."""
    fleet, inbox = parts.fleet, parts.inbox
    if not isinstance(fleet, PostgresFleet) or inbox is None:
        return None  # alone: every update is this process's
    return Routing(fleet.partitions, fleet.bus, inbox, parts.app.bot, parts.app.update_queue)


def _gateway(parts: EndpointParts) -> Gateway | None:
    """The MCP endpoint for agents (`[gateway] enabled`; the config requires a public URL and a database)."""
    if not parts.config.gateway.enabled:
        return None
    assert parts.agents is not None  # the config requires [storage]
    return Gateway(
        parts.config,
        parts.hub,
        parts.prompts,
        parts.agents,
        allows=Access.of(parts.config.telegram).allows,
        version=_version(),
    )


def _version() -> str:
    try:
        return version("toolnexus-bot")
    except PackageNotFoundError:
        return "0"


def _mini_app(
    config: Config, prompts: PromptRegistry, surface: TelegramSurface, parts: EndpointParts
) -> tuple[MiniApp | None, list[BaseRoute]]:
    """Long forms' Mini App pages (`[miniapp]`, with `[web] public_url`): the app and its routes, and the
    surface's link."""
    if not config.miniapp_on:
        return None, []
    assert config.web is not None and config.web.public_url is not None  # miniapp_on says so
    token = config.require_telegram().get()
    mini = MiniApp(
        prompts,
        surface.answer_from_page,
        token,
        config.miniapp,
        config.web.public_url,
        share=parts.shares.miniapp,
    )
    surface.form_link = mini.url_for
    return mini, mini.routes()

"""The bot's one ASGI application: the routes, and what each needs from the bot. Does I/O (HTTP answers).

POST /telegram   the webhook (webhook mode only; see `bot.web.webhook`)
GET  /healthz    200 while the bot runs and Telegram answers, else 503 (JSON says which part failed)
GET  /metrics    Prometheus text
/app/...         the Mini App's form pages, when given (`bot.web.miniapp`)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.config import WEBHOOK_PATH
from bot.web.webhook import Webhook

__all__ = ["build_app"]


def build_app(
    *,
    running: Callable[[], bool],
    reachable: Callable[[], Awaitable[bool]],
    metrics: CollectorRegistry,
    webhook: Webhook | None = None,
    routes: Sequence[BaseRoute] = (),
) -> Starlette:
    """The app: `running` says whether the bot is up, `reachable` whether Telegram answers (it may ask);
    `routes` are more of them (the Mini App's)."""

    async def healthz(request: Request) -> Response:
        up = running()
        telegram = up and await reachable()
        body = {"bot": "running" if up else "stopped", "telegram": "reachable" if telegram else "unreachable"}
        return JSONResponse(body, status_code=200 if telegram else 503, headers={"Cache-Control": "no-store"})

    async def scrape(request: Request) -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    routes_: list[Any] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", scrape, methods=["GET"]),
    ]
    if webhook is not None:
        routes_.append(Route(WEBHOOK_PATH, webhook.handle, methods=["POST"]))
    return Starlette(routes=[*routes_, *routes])

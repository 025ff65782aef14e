"""The bot's one ASGI application: the routes, and what each needs from the bot. Does I/O (HTTP answers).

POST /telegram   the webhook (webhook mode only; see `bot.web.webhook`)
GET  /healthz    200 while the bot runs and Telegram answers, else 503 (JSON says which part failed; "draining"
                 from the first moment of a SIGTERM's drain, so a load balancer sends nothing more; in a fleet,
                 "partitions": how many of the users' partitions this instance owns)
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
from bot.store.fleet import PARTITIONS
from bot.web.webhook import Webhook

__all__ = ["build_app"]


def build_app(
    *,
    running: Callable[[], bool],
    reachable: Callable[[], Awaitable[bool]],
    metrics: CollectorRegistry,
    webhook: Webhook | None = None,
    routes: Sequence[BaseRoute] = (),
    draining: Callable[[], bool] = lambda: False,
    owning: Callable[[], int | None] = lambda: None,
) -> Starlette:
    """The app: `running` says whether the bot is up, `reachable` whether Telegram answers (it may ask),
    `draining` whether it is on its way out (SIGTERM), `owning` how many partitions it owns (None alone); `routes`
    are more of them (the Mini App's)."""

    async def healthz(request: Request) -> Response:
        up, leaving = running(), draining()
        telegram = up and await reachable()
        state = "draining" if leaving else "running" if up else "stopped"
        body: dict[str, Any] = {"bot": state, "telegram": "reachable" if telegram else "unreachable"}
        owned = owning()
        if owned is not None:  # in a fleet: how many of the users' partitions this instance owns
            body["partitions"] = {"owned": owned, "of": PARTITIONS}
        healthy = telegram and not leaving
        return JSONResponse(body, status_code=200 if healthy else 503, headers={"Cache-Control": "no-store"})

    async def scrape(request: Request) -> Response:
        return Response(generate_latest(metrics), media_type=CONTENT_TYPE_LATEST)

    routes_: list[Any] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", scrape, methods=["GET"]),
    ]
    if webhook is not None:
        routes_.append(Route(WEBHOOK_PATH, webhook.handle, methods=["POST"]))
    return Starlette(routes=[*routes_, *routes])

"""The bot's one HTTP endpoint (Starlette on uvicorn): the Telegram webhook, /healthz and /metrics."""

from bot.web.app import build_app
from bot.web.metrics import metrics_registry
from bot.web.server import REQUEST_TIMEOUT_S, WebServer
from bot.web.webhook import MAX_BODY, SECRET_HEADER, Webhook

__all__ = [
    "MAX_BODY",
    "REQUEST_TIMEOUT_S",
    "SECRET_HEADER",
    "WebServer",
    "Webhook",
    "build_app",
    "metrics_registry",
]

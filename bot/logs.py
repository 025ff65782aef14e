"""Logging set-up: readable lines on stderr, and the bot token never in them. Does I/O (configures logging)."""

from __future__ import annotations

import logging
import sys

# httpx logs every request URL at INFO, and Bot API URLs contain the token.
_CHATTY = ("httpx", "httpx2", "httpcore", "apscheduler", "uvicorn.access", "mcp", "telegram.ext.Updater")


class RedactFilter(logging.Filter):
    """Replaces secrets in every formatted record, whatever logger produced it."""

    def __init__(self, *secrets: str) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        text = message
        for secret in self.secrets:
            text = text.replace(secret, "<redacted>")
        if record.exc_info and record.exc_info[1] is not None:
            rendered = logging.Formatter().formatException(record.exc_info)
            if any(s in rendered for s in self.secrets):
                for secret in self.secrets:
                    rendered = rendered.replace(secret, "<redacted>")
                text = f"{text}\n{rendered}"
                record.exc_info = None
                record.exc_text = None
        if text != message:
            record.msg, record.args = text, None
        return True


def setup_logging(level: str = "INFO", secrets: tuple[str, ...] = ()) -> None:
    """Log to stderr at `level`; chatty libraries at WARNING; `secrets` redacted everywhere."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactFilter(*secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)

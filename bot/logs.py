"""Logging set-up: readable lines on stderr, and the bot token never in them. Does I/O (configures logging)."""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

REFUSED_LOGGER: Final = "bot.refused"
"""Where a refused stranger is logged (the first argument of the record is their user id)."""
REFUSED_EVERY_S: Final = 3600.0
"""One line per stranger per hour: someone who keeps writing cannot flood the log."""

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


class OncePerKeyFilter(logging.Filter):
    """Lets a record through at most once per `every_s` per key (the record's first argument).

    Remembers at most `max_keys` keys (the oldest forgotten first), so its memory stays bounded.
    """

    def __init__(
        self, every_s: float, clock: Callable[[], float] = time.monotonic, max_keys: int = 10_000
    ) -> None:
        super().__init__()
        self.every_s = every_s
        self._clock = clock
        self._max_keys = max_keys
        self._last: OrderedDict[object, float] = OrderedDict()

    def filter(self, record: logging.LogRecord) -> bool:
        key = record.args[0] if isinstance(record.args, tuple) and record.args else record.getMessage()
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self.every_s:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self._max_keys:
            self._last.popitem(last=False)
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
    refused = logging.getLogger(REFUSED_LOGGER)
    for old_filter in list(refused.filters):
        refused.removeFilter(old_filter)
    refused.addFilter(OncePerKeyFilter(REFUSED_EVERY_S))

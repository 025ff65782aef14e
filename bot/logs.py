"""Logging set-up: readable lines on stderr, and secrets never in any record. Does I/O (configures logging).

Secrets are taken out where records are made (`logging.setLogRecordFactory`), not by a filter on one handler:
every handler sees the redacted record, ours on stderr, a library's, or a file handler an operator adds. The
message is formatted there and then, and a traceback (`exc_info`) and `stack_info` are rendered to text and
redacted, so no handler renders the original exception (or its frames) again.

At DEBUG, PTB logs every Bot API call's parameters and answer: message texts (people's typed answers among
them) and the webhook's `secret_token`, and every update it processes (what people typed). Those loggers stay
at INFO whatever `--log-level` says (`QUIET_AT_DEBUG`); secrets known to the config are redacted besides, and
agent tokens (`tnx_...`, made at run time) by their form.

Other libraries do the same at DEBUG: aiosqlite logs every SQL statement with its values (typed answers, call
arguments), asyncpg and SQLAlchemy can, the MCP SDK logs whole messages, httpcore request details. So the cap
is structural: the root logger never goes below INFO, and only the bot's own loggers (`OURS`) and libraries
known to log nothing people typed at DEBUG (`CONTENT_FREE`) follow `--log-level` down. Every other logger,
one named here or one a library adds later, inherits INFO; one a library set below INFO itself is raised to
INFO, and the bot's handler drops any DEBUG record from outside the allow-list that still gets through.
"""

from __future__ import annotations

import logging
import re
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Final

REFUSED_LOGGER: Final = "bot.refused"
"""Where a refused stranger is logged (the first argument of the record is their user id)."""
REFUSED_EVERY_S: Final = 3600.0
"""One line per stranger per hour: someone who keeps writing cannot flood the log."""

# httpx logs every request URL at INFO, and Bot API URLs contain the token.
_CHATTY: Final = (
    "httpx",
    "httpx2",
    "httpcore",
    "apscheduler",
    "uvicorn.access",
    "mcp",
    "telegram.ext.Updater",
    "alembic",  # a line per migration step at every first start; `toolnexus-bot db upgrade` reports them
)
QUIET_AT_DEBUG: Final = ("telegram.Bot", "telegram.ext.ExtBot", "telegram.ext.Application")
"""Loggers that write Bot API parameters and answers, and whole updates (texts people typed, the webhook
secret), at DEBUG."""
REDACTED: Final = "<redacted>"
AGENT_TOKEN: Final = re.compile(r"tnx_[A-Za-z0-9_-]+")
"""An agent token (`bot.core.agents.TOKEN_PREFIX` and URL-safe base64), wherever it stands in a record: people
make them at run time, so they cannot be listed among the config's secrets, and they are redacted by their form."""
OURS: Final = ("bot", "mapping")
"""The bot's own loggers: they log ids, names and counts, never values people typed."""
CONTENT_FREE: Final = ("asyncio", "uvicorn.error")
"""Libraries whose DEBUG lines carry no content: asyncio's slow-callback and task notes, uvicorn's server and
connection life cycle (addresses, never paths or bodies; request lines are `uvicorn.access`, kept quiet)."""

_base_factory: Callable[..., logging.LogRecord] = logging.getLogRecordFactory()
"""The record factory before ours (installing ours again replaces ours, never stacks it)."""


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` without `secrets` and without agent tokens."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return AGENT_TOKEN.sub(REDACTED, text)


def redacting_factory(secrets: tuple[str, ...]) -> Callable[..., logging.LogRecord]:
    """A `LogRecord` factory whose records carry no secret (nor any agent token): in the message, the traceback
    or the stack."""
    secrets = tuple(s for s in secrets if s)

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = _base_factory(*args, **kwargs)
        _scrub(record, secrets)  # always: an agent token may appear whatever the config's secrets are
        return record

    return make


def _scrub(record: logging.LogRecord, secrets: tuple[str, ...]) -> None:
    try:
        message = record.getMessage()
    except Exception:  # any error of the caller's format string: keep what there is, redacted
        message = f"{record.msg} (arguments that do not format: {record.args!r})"
    record.msg, record.args = redact(message, secrets), None
    if record.exc_info and record.exc_info[1] is not None:
        rendered = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        record.exc_text = redact(rendered, secrets)
    elif record.exc_text:
        record.exc_text = redact(record.exc_text, secrets)
    # Only text leaves the record: a handler that renders the exception itself (with its frames' locals, say)
    # would show what is redacted here.
    record.exc_info = None
    if record.stack_info:
        record.stack_info = redact(record.stack_info, secrets)


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


def _allowed_below_info(name: str) -> bool:
    """Whether the logger `name` may log below INFO: it is ours or allow-listed (or a child of one)."""
    return any(name == top or name.startswith(top + ".") for top in (*OURS, *CONTENT_FREE))


class _CapOthersAtInfo(logging.Filter):
    """Drops records below INFO from loggers outside the allow-list (one a library set to DEBUG after us)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO or _allowed_below_info(record.name)


def setup_logging(level: str = "INFO", secrets: tuple[str, ...] = ()) -> None:
    """Log to stderr at `level`; chatty libraries at WARNING; other libraries at INFO at most (see the module
    docstring); `secrets` redacted from every record."""
    logging.setLogRecordFactory(redacting_factory(secrets))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_CapOthersAtInfo())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelNamesMapping()[level]
    root.setLevel(max(numeric, logging.INFO))
    for name in (*OURS, *CONTENT_FREE):
        logging.getLogger(name).setLevel(numeric)
    for name, existing in list(logging.root.manager.loggerDict.items()):
        if not isinstance(existing, logging.Logger) or _allowed_below_info(name):
            continue
        if logging.NOTSET < existing.level < logging.INFO:
            existing.setLevel(logging.INFO)
    for name in _CHATTY:
        logging.getLogger(name).setLevel(logging.WARNING)
    refused = logging.getLogger(REFUSED_LOGGER)
    for old_filter in list(refused.filters):
        refused.removeFilter(old_filter)
    refused.addFilter(OncePerKeyFilter(REFUSED_EVERY_S))
    for name in QUIET_AT_DEBUG:
        logging.getLogger(name).setLevel(logging.INFO)

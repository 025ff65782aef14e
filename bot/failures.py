"""The expected ways a command fails at start, each as one line naming what to do. Pure (no I/O).

`run`, `check` and `console` print `error: <line>` and exit 1 for these; anything else is a bug and keeps its
traceback.
"""

from __future__ import annotations

import errno
import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

from telegram.error import Forbidden, InvalidToken, NetworkError, TimedOut

from bot.config import Config

__all__ = ["failure_line"]


def failure_line(exc: BaseException, config: Config | None = None) -> str | None:
    """One line for an expected failure (no network, DNS, a rejected token, a port in use); None for a bug."""
    for error in _leaves(exc):
        line = _line(error, config)
        if line is not None:
            return line
    return None


def _line(exc: BaseException, config: Config | None) -> str | None:
    from bot.store import StoreUnavailable  # the store pulls in SQLAlchemy: only once a command failed
    from bot.store.errors import AuditUnsealed, SecondInstance

    if isinstance(exc, SecondInstance | AuditUnsealed):
        return str(exc)
    if isinstance(exc, StoreUnavailable):
        return str(exc) if exc.file else f"{exc}: check [storage] url and that the database is running"
    host = _telegram_host(config)
    if isinstance(exc, InvalidToken | Forbidden) and not isinstance(exc, NetworkError):
        return (
            "Telegram rejected the bot token: check telegram.token (a token from @BotFather, "
            f"e.g. 123456:ABC...), that the bot was not deleted, and telegram.api_base_url ({host})"
        )
    if isinstance(exc, NetworkError | TimedOut):
        causes = list(_causes(exc))
        if any(isinstance(c, socket.gaierror) for c in causes):
            return f"cannot find {host} (DNS): check the network connection and telegram.api_base_url"
        if any(isinstance(c, ConnectionRefusedError) for c in causes):
            return f"{host} refused the connection: check telegram.api_base_url and any firewall or proxy"
        tls = next((c for c in causes if isinstance(c, ssl.SSLError)), None)
        if tls is not None:
            return f"TLS failure talking to {host} ({tls.reason or tls}): check the system's CA certificates"
        if isinstance(exc, TimedOut):
            return f"{host} did not answer in time: check the network connection"
        return f"cannot reach {host}: check the network connection and telegram.api_base_url"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return (
            "the address to listen on is already in use (another toolnexus-bot?): stop that process or "
            "choose another port in the config"
        )
    if isinstance(exc, OSError) and exc.errno == errno.EADDRNOTAVAIL:
        return "cannot listen on that address: it is not one of this machine's; check the listen address"
    if isinstance(exc, PermissionError) and exc.errno == errno.EACCES and _is_bind(exc):
        return "not allowed to listen on that port (below 1024 needs privileges): choose a port from 1024 up"
    return None


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exception, or every exception inside its (nested) groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_bind(exc: OSError) -> bool:
    return "bind" in str(exc).lower() or "address" in str(exc).lower()


def _telegram_host(config: Config | None) -> str:
    url = config.telegram.api_base_url if config is not None else ""
    return urlsplit(url).hostname or "the Telegram Bot API"

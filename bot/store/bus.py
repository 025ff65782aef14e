"""Wake-ups between the instances of a fleet, through PostgreSQL's `LISTEN`/`NOTIFY`. Does I/O.

The database holds the truth; a notification only says "look again". That keeps the rules simple:
- `publish` runs inside the transaction that changed the rows, so the notification is delivered when the change
  commits and never when it rolls back: a listener that looks finds the change.
- Notifications sent while a listener is disconnected are lost. After every (re)connect each subscriber's
  `on_connect` runs, so it sweeps the tables for whatever it may have missed (at start too).
- Payloads are short (an id, a partition number): PostgreSQL caps them at 8,000 bytes, and the row has the rest.

Channels are per bot (`tnx_<bot id>_<topic>`), so bots sharing a database do not wake each other. Only on
PostgreSQL: a single instance (SQLite, or polling) has nobody to wake (`bot.core.fleet.ALONE`'s bus).

The listening connection is asyncpg's own (`asyncpg.connect`, `add_listener`), held for the process's life and
opened again after a loss, waiting `retry_s` between attempts.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import anyio
import asyncpg
from anyio.abc import TaskStatus
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.store.engine import database_url, display_url, failure_reason

__all__ = ["MAX_PAYLOAD", "FleetBus"]

logger = logging.getLogger(__name__)

MAX_PAYLOAD: Final = 7999
"""Bytes: PostgreSQL refuses a notification payload of 8,000 bytes or more."""
_TOPIC: Final = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(slots=True)
class _Subscriber:
    on_message: Callable[[str], None]
    on_connect: Callable[[], None] | None


class FleetBus:
    """The fleet's wake-ups for the bot `bot_id` on the PostgreSQL database at `url`.

    Subscribe first, then `run` (in a task group) for the process's life; `publish` inside a transaction.
    """

    def __init__(self, url: str, bot_id: int, *, retry_s: float = 1.0) -> None:
        self._dsn = database_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._shown = display_url(url)
        self._bot_id = bot_id
        self._retry_s = retry_s
        self._subscribers: dict[str, list[_Subscriber]] = {}
        self.listener_pid: int | None = None
        """The backend of the listening connection while it is up (tests end it to see a reconnect)."""
        self.connects = 0
        """How many times the listener (re)connected."""
        self._running = False

    @property
    def shared(self) -> bool:
        """Other instances publish on it too (`bot.core.fleet.Bus`)."""
        return True

    def channel(self, topic: str) -> str:
        """The channel of `topic` for this bot.

        Raises:
            ValueError: not a lowercase identifier of up to 32 characters.
        """
        if not _TOPIC.fullmatch(topic):
            raise ValueError(f"bus topic {topic!r}: lowercase letters, digits and _, up to 32")
        return f"tnx_{self._bot_id}_{topic}"

    def subscribe(
        self,
        topic: str,
        on_message: Callable[[str], None],
        on_connect: Callable[[], None] | None = None,
    ) -> None:
        """Call `on_message(payload)` for each notification of `topic`, and `on_connect()` after every (re)connect
        of the listener (look for what may have been missed). Both run on the event loop and must not block.
        Subscribe before `run`.

        Raises:
            RuntimeError: the bus runs already (its connection would not listen to the topic: a silent miss).
        """
        if self._running:
            raise RuntimeError(f"bus topic {topic!r}: subscribe before the bus runs")
        self._subscribers.setdefault(self.channel(topic), []).append(_Subscriber(on_message, on_connect))

    async def publish(self, conn: AsyncConnection, topic: str, payload: str) -> None:
        """Notify `topic` with `payload` when `conn`'s transaction commits (nothing if it rolls back).

        Raises:
            ValueError: the payload is too long (send an id and keep the rest in a row).
        """
        if len(payload.encode()) > MAX_PAYLOAD:
            raise ValueError(f"bus payload of {len(payload.encode())} bytes: at most {MAX_PAYLOAD}")
        await conn.execute(select(func.pg_notify(self.channel(topic), payload)))

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled, connecting again after a loss. Started (`task_status`) once the first
        connection listens, or after the first failed attempt (the bot runs on; a later attempt may succeed)."""
        self._running = True
        started = False

        def ready() -> None:
            nonlocal started
            if not started:
                task_status.started()
                started = True

        while True:
            try:
                await self._listen(ready)
            except (OSError, asyncpg.PostgresError) as exc:
                logger.warning("fleet bus: listening on %s failed: %s", self._shown, failure_reason(exc))
            ready()
            await anyio.sleep(self._retry_s)

    async def _listen(self, ready: Callable[[], None]) -> None:
        """One listening connection: subscribe, tell every `on_connect`, and return when the connection ends."""
        conn = await asyncpg.connect(self._dsn)
        lost = anyio.Event()
        try:
            conn.add_termination_listener(lambda _conn: lost.set())
            for channel in self._subscribers:
                await conn.add_listener(channel, self._deliver)
            self.listener_pid = conn.get_server_pid()
            self.connects += 1
            if self.connects > 1:
                logger.info("fleet bus: listening again on %s", self._shown)
            for subscribers in self._subscribers.values():
                for subscriber in subscribers:
                    if subscriber.on_connect is not None:
                        subscriber.on_connect()
            ready()
            await lost.wait()
            logger.warning("fleet bus: lost the listening connection to %s", self._shown)
        finally:
            self.listener_pid = None
            conn.terminate()  # no goodbye on a connection that may be gone

    def _deliver(self, _conn: object, _pid: int, channel: str, payload: object) -> None:
        for subscriber in self._subscribers.get(channel, ()):
            try:
                subscriber.on_message(str(payload))
            except Exception:  # one subscriber's bug must not stop the others' wake-ups
                logger.exception("fleet bus: a subscriber of %s failed", channel)

"""The fleet on PostgreSQL (`bot.core.Fleet`): partitions held through advisory locks, the bus through
`LISTEN`/`NOTIFY`; and `fleet_of`, which says which fleet a config's process is part of. Does I/O (when run).

A process may be one of several only on PostgreSQL in webhook mode (on SQLite, or polling, a second instance is
refused at start): then it is a `PostgresFleet`; otherwise it runs alone (`bot.core.fleet.ALONE`). Both are built
from the config before the store, unstarted, so the store and the registry receive them at construction.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus

from bot.config import Config, TelegramMode
from bot.core.fleet import ALONE, Bus, Fence, Fleet
from bot.store.bus import FleetBus
from bot.store.engine import database_url
from bot.store.fleet import Partitions

__all__ = ["PostgresFleet", "fleet_of"]


class PostgresFleet:
    """This process's part in a fleet on one PostgreSQL database: its `partitions` (who owns whom, and the fence
    of kept-question writes) and its `bus` (wake-ups between the instances)."""

    def __init__(self, partitions: Partitions, bus: FleetBus) -> None:
        self.partitions = partitions
        self._bus = bus

    @property
    def bus(self) -> Bus:
        return self._bus

    @property
    def fence(self) -> Fence:
        return self.partitions

    def owns(self, user_id: int) -> bool:
        return self.partitions.owns(user_id)

    async def acts_for(self, user_id: int) -> bool:
        return await self.partitions.acts_for(user_id)

    def owned_count(self) -> int | None:
        return self.partitions.owned_count()

    @property
    def takeovers(self) -> int:
        return self.partitions.takeovers

    def drain(self) -> None:
        self.partitions.drain()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The partitions' heartbeats (started after the first)."""
        await self.partitions.run(task_status=task_status)

    async def listen(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The bus (started once it listens): everything subscribed by now."""
        await self._bus.run(task_status=task_status)


def fleet_of(config: Config, *, busy: Callable[[int], bool] = lambda partition: False) -> Fleet:
    """The fleet this config's process is part of: PostgreSQL and webhook mode, a `PostgresFleet`; otherwise
    (no database, SQLite, polling: a second instance is refused) `ALONE`. Unstarted (no I/O here)."""
    if config.storage is None or config.telegram.mode is not TelegramMode.WEBHOOK:
        return ALONE
    url = config.storage.url.get()
    if not database_url(url).drivername.startswith("postgresql"):
        return ALONE
    return PostgresFleet(Partitions(url, config.bot_id(), busy=busy), FleetBus(url, config.bot_id()))

"""The MCP session pool: one session per (server, chat, user), or per server when shared. Async, does I/O.

Sessions open on first use (at most `OPENING_AT_ONCE` at a time per server, first asked first opened), back
off after a failed connect, make room past `sessions.max_open` by closing
the least recently used idle one, and close after `sessions.idle_timeout_s` unused. Past `limits.stdio_processes`
server processes, an unshared stdio session closes the least recently used idle one or is refused. Each `Connection` lives
in an owner task of the pool's task group (anyio contexts exit in the task that entered them).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

import anyio
from anyio.abc import TaskGroup, TaskStatus

from bot.config import Config, ServerConfig, Transport
from bot.core import Origin, Outcome, PromptRegistry
from bot.errors import ToolnexusError
from bot.servers.connections import Connection, ElicitHandler, MessageHandler
from bot.servers.limits import Limits, Refusal

BACKOFF_CAP_S: Final = 60.0
"""The longest wait before a server that keeps failing is tried again."""
REAP_EVERY_MIN_S: Final = 1.0
REAP_EVERY_MAX_S: Final = 30.0
"""Idle sessions are looked for every quarter of `[sessions] idle_timeout_s`, but no more often than every
`REAP_EVERY_MIN_S` and no less often than every `REAP_EVERY_MAX_S`."""
OPENING_AT_ONCE: Final = 16
"""Sessions of one server being opened at once; more wait their turn in order. Under a burst of first calls
(a flood of people at once), opening every session together shares the process between them all, so even
the first person's question comes only once nearly all are open; in turn, the first come first."""


class Unavailable(ToolnexusError):
    """A server cannot be used right now (`reason` is shown to the person)."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"{server}: {reason}")
        self.server = server
        self.reason = reason


@dataclass(slots=True)
class _Health:
    failures: int = 0
    retry_at: float = 0.0
    last_error: str | None = None


class Pool:
    """Every open MCP session of the process, by key; `start` it in a task group that outlives them."""

    def __init__(
        self,
        config: Config,
        prompts: PromptRegistry,
        on_elicit: ElicitHandler,
        on_message: MessageHandler,
        *,
        transport: Callable[[ServerConfig], Any] | None = None,
        clock: Callable[[], float] | None = None,
        limits: Limits | None = None,
        auth: Callable[[ServerConfig, Origin], Any] | None = None,
    ) -> None:
        self.config = config
        self._auth = auth
        """OAuth per (server, person): `SignIns.auth_for` (`bot.servers.oauth`)."""
        self.limits = limits if limits is not None else Limits(config.limits)
        self.prompts = prompts
        self.servers: Mapping[str, ServerConfig] = {s.name: s for s in config.servers}
        self.connections: dict[Hashable, Connection] = {}
        self._connecting: dict[Hashable, anyio.Lock] = {}
        self._health: dict[str, _Health] = {name: _Health() for name in self.servers}
        self._on_elicit = on_elicit
        self._on_message = on_message
        self._transport = transport
        self._now = clock or anyio.current_time
        self._tg: TaskGroup | None = None
        self._spawning = 0
        self._opening = {name: anyio.Semaphore(OPENING_AT_ONCE) for name in self.servers}

    def start(self, tg: TaskGroup) -> None:
        """Owner tasks and the idle sweep run in `tg` from now on."""
        self._tg = tg
        tg.start_soon(self._reap_idle)

    def server(self, name: str) -> ServerConfig:
        """The configured server.

        Raises:
            Unavailable: no server has that name.
        """
        try:
            return self.servers[name]
        except KeyError:
            raise Unavailable(name, "no such server") from None

    @property
    def open_count(self) -> int:
        """Sessions open now."""
        return len(self.connections)

    @property
    def processes(self) -> int:
        """Server processes running or starting now (stdio sessions, shared ones included)."""
        return self._spawning + sum(
            1 for c in self.connections.values() if c.server.transport is Transport.STDIO
        )

    def refusal(self, server: ServerConfig, origin: Origin) -> Refusal | None:
        """Whether `origin`'s call on `server` would need a server process past `limits.stdio_processes`
        (after closing an idle one). Shared servers and open sessions are never refused."""
        if server.shared or server.transport is not Transport.STDIO or self.get(server, origin) is not None:
            return None
        if not self.limits.processes_full(self.processes) or self._close_idle_process():
            return None
        return self.limits.process(origin.user_id, self.processes)

    def key(self, server: ServerConfig, origin: Origin | None) -> Hashable:
        return (server.name,) if server.shared else (server.name, origin)

    def get(self, server: ServerConfig, origin: Origin) -> Connection | None:
        """The open session for `origin` on `server`, if any (never connects); not one that is closing."""
        return _live(self.connections.get(self.key(server, origin)))

    @asynccontextmanager
    async def use(self, server: ServerConfig, origin: Origin) -> AsyncIterator[Connection]:
        """Borrow the session (connecting if needed) for one request; it is not idle meanwhile.

        Raises:
            Unavailable: the server cannot be reached (or is backing off after failing to connect).
        """
        conn = await self._connect(server, origin)
        conn.begin_call()
        try:
            yield conn
        finally:
            if conn.end_call(self._now()):
                for prompt in self.prompts.drop_awaiting(conn.key):
                    await self.prompts.settle_completed(prompt)

    def close_person(self, server: str, user_id: int) -> None:
        """Close one person's sessions on `server`, in every chat (they signed out)."""
        for key, conn in list(self.connections.items()):
            if conn.server.name == server and not conn.server.shared and key[1].user_id == user_id:  # type: ignore[index]
                conn.close()

    def close_all(self) -> None:
        """Ask every session to close (each leaves in its own owner task)."""
        for conn in list(self.connections.values()):
            conn.close()

    async def wait_closed(self) -> None:
        for conn in list(self.connections.values()):
            await conn.gone.wait()

    async def _connect(self, server: ServerConfig, origin: Origin) -> Connection:
        key = self.key(server, origin)
        conn = _live(self.connections.get(key))
        if conn is not None:
            return conn  # the common case, without the lock (it only orders first connects and reconnects)
        async with (
            self._connecting.setdefault(key, anyio.Lock(fast_acquire=True)),
            self._opening[server.name],
        ):
            conn = _live(self.connections.get(key))
            if conn is not None:
                return conn
            health = self._health[server.name]
            now = self._now()
            if health.failures and now < health.retry_at:
                raise Unavailable(
                    server.name, f"{health.last_error}; retrying in {max(1, round(health.retry_at - now))} s"
                )
            refusal = self.refusal(server, origin)
            if refusal is not None:
                raise Unavailable(server.name, refusal.reason)
            self._make_room()
            auth = None if self._auth is None or server.shared else self._auth(server, origin)
            conn = Connection(server, key, self._on_elicit, self._on_message, self._transport, auth)
            assert self._tg is not None, "Pool.start() was not called"
            spawns = server.transport is Transport.STDIO
            self._spawning += spawns
            try:
                await self._tg.start(self._own, conn)
            finally:
                self._spawning -= spawns
            if conn.client is None and conn.sign_in_failed:
                raise Unavailable(server.name, conn.error or "sign-in was not completed")
            if conn.client is None:
                health.failures += 1
                health.last_error = conn.error or "connection failed"
                health.retry_at = self._now() + min(BACKOFF_CAP_S, 2.0 ** (health.failures - 1))
                raise Unavailable(server.name, health.last_error)
            health.failures, health.last_error = 0, None
            self.connections[key] = conn
            return conn

    async def _own(self, conn: Connection, *, task_status: TaskStatus[None]) -> None:
        try:
            await conn.own(task_status=task_status)
        finally:
            if self.connections.get(conn.key) is conn:
                del self.connections[conn.key]
            lock = self._connecting.get(conn.key)
            if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
                del self._connecting[conn.key]  # else one lock per person who ever called stays for good
            if not conn.closing:
                self.prompts.abort_all(Outcome.SERVER_GONE, scope=conn.key)
            conn.finished.set()

    def _make_room(self) -> None:
        limit = self.config.sessions.max_open
        if len(self.connections) < limit:
            return
        idle = sorted((c for c in self.connections.values() if c.idle), key=lambda c: c.last_used)
        if not idle:
            raise Unavailable("sessions", f"all {limit} MCP sessions are busy; try again shortly")
        idle[0].close()
        del self.connections[idle[0].key]

    def _close_idle_process(self) -> bool:
        """Close the least recently used idle unshared stdio session, if there is one."""
        idle = [
            c
            for c in self.connections.values()
            if c.idle and not c.server.shared and c.server.transport is Transport.STDIO
        ]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.last_used)
        oldest.close()
        del self.connections[oldest.key]
        return True

    async def _reap_idle(self) -> None:
        idle_s = self.config.sessions.idle_timeout_s
        while True:
            await anyio.sleep(max(REAP_EVERY_MIN_S, min(REAP_EVERY_MAX_S, idle_s / 4)))
            now = self._now()
            for conn in list(self.connections.values()):
                if conn.idle and now - conn.last_used >= idle_s:
                    conn.close()


def _live(conn: Connection | None) -> Connection | None:
    """The session if a call may still use it: not gone, and not closing. A session being closed (a /logout, the
    idle sweep) stays in `connections` until its owner has left it, which takes the transport's own time (a
    2025-era HTTP session sends its DELETE first); a call handed it meanwhile would fail on its closed streams
    ("Connection closed"), so the next call opens a new one instead."""
    return conn if conn is not None and not conn.gone.is_set() and not conn.closing else None

"""A TCP proxy on 127.0.0.1 in front of one server (a test's PostgreSQL): the network between a process and it,
steered by the test. Does I/O (sockets both ways, in the test's event loop).

    async with tcp_proxy("127.0.0.1", 5432) as proxy:     # connect to proxy.port instead
        proxy.cut()              # a cable pulled: nothing is carried either way, nothing is closed
        proxy.mend()             # carried again, what waited included
        proxy.hold_closes()      # a side's close does not reach the other (its last bytes do)
        proxy.release_closes()

`hold_closes` shows what a process finds for a moment when it wakes from SIGSTOP after the server ended its
session: the server's last words are there to read, its close is not yet. Every connection the proxy carried
is counted when its server closed it (`closed_by_server`); `wait` waits for a condition on the counts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketStream, TaskGroup

__all__ = ["TcpProxy", "tcp_proxy"]


@dataclass
class TcpProxy:
    """The proxy's state and steering; `port` once it listens."""

    host: str
    upstream_port: int
    port: int = 0
    connections: int = 0
    """Connections carried so far."""
    closed_by_server: int = 0
    """Connections the server closed (seen by the proxy, whether or not their close was passed on)."""
    _flowing: anyio.Event = field(default_factory=anyio.Event)
    _closing: anyio.Event = field(default_factory=anyio.Event)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self._flowing.set()
        self._closing.set()

    def cut(self) -> None:
        """Carry nothing from now on, either way (bytes read meanwhile wait); nothing is closed."""
        self._flowing = anyio.Event()

    def mend(self) -> None:
        """Carry bytes again, those that waited first."""
        self._flowing.set()

    def hold_closes(self) -> None:
        """A side that closes its connection: its bytes still go through, its close does not (yet)."""
        self._closing = anyio.Event()

    def release_closes(self) -> None:
        self._closing.set()

    async def wait(self, condition: Callable[[], bool], timeout: float = 10) -> None:  # noqa: ASYNC109 - like FakeTelegram.wait_for
        """Wait until `condition()` holds, looked at whenever a count changes."""
        with anyio.fail_after(timeout):
            while not condition():
                changed = self._changed
                await changed.wait()

    def _count(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _carry(self, source: SocketStream, sink: SocketStream) -> None:
        """Bytes from `source` to `sink` until `source` ends (as long as the network is not cut)."""
        while True:
            await self._flowing.wait()
            try:
                data = await source.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return
            await self._flowing.wait()  # cut while reading: these bytes wait for the mend
            try:
                await sink.send(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return

    async def _serve(self, client: SocketStream) -> None:
        try:
            server = await anyio.connect_tcp(self.host, self.upstream_port)
        except OSError:
            await client.aclose()
            return
        self.connections += 1
        self._count()
        async with client, server, anyio.create_task_group() as tg:

            async def from_server() -> None:
                await self._carry(server, client)
                self.closed_by_server += 1
                self._count()
                await self._closing.wait()
                await self._flowing.wait()
                tg.cancel_scope.cancel()

            async def from_client() -> None:
                await self._carry(client, server)
                await self._closing.wait()
                await self._flowing.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(from_server)
            tg.start_soon(from_client)


@asynccontextmanager
async def tcp_proxy(host: str, port: int) -> AsyncIterator[TcpProxy]:
    """A proxy to `host:port`, listening on 127.0.0.1 while the block runs."""
    proxy = TcpProxy(host, port)
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        proxy.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        tg: TaskGroup
        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, proxy._serve, tg)
            try:
                yield proxy
            finally:
                proxy.mend()
                proxy.release_closes()
                tg.cancel_scope.cancel()

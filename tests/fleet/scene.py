"""The fleet's proving ground: 2-3 real `toolnexus-bot` processes with one config on one PostgreSQL, in webhook
mode behind a round-robin proxy (`tests.fleet.proxy`), against the fake Bot API and real MCP servers (docs/fleet.md).

    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        call = await fleet.alice.send("/call d stamp n=1")       # delivered by the fake to the proxy, then on
        await fleet.fake.wait_for(lambda m: is_result(m, call), timeout=60)
        await fleet.bots[0].stop()                               # SIGTERM: drains, exits; `.kill()` SIGKILL,
        await fleet.bots[0].start()                              # `.pause()`/`.resume()` SIGSTOP/SIGCONT
        fleet.proxy.duplicate_next()                             # the next update reaches two instances at once

The bots are the installed command (`toolnexus-bot --config`), each with its own config file that differs only in
its web port. Their one MCP server is `tests.fakes.servers.durable` in a process of its own (it outlives every
bot): `d` speaks 2026-07-28 (its `requestState` sealed with a key it keeps), `l` is the same server spoken to as a
2025-era one. The fake delivers updates as Telegram does (`deliver_via_webhook(retry=True)`: in order, again until
answered 2xx) to the proxy's `/telegram`. Each bot's stderr is kept in the test's tmp dir (`bot<i>.<run>.log`)
and printed when the block ends (pytest shows it when the test failed). Waits are on log lines, the fake's
messages and the proxy's deliveries, never on the clock.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process, TaskGroup

from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.fleet.proxy import RoundRobinProxy, round_robin_proxy
from tests.ports import free_port
from tests.telegram.test_restart import EXE, REPO, Durable, durable_server
from tests.zygote import open_bot

__all__ = ["ALICE", "BOB", "SECRET", "Fleet", "FleetBot", "fleet_scene", "stamps"]

ALICE, BOB = 1001, 1002
SECRET = "fleet-webhook-secret"
START_S = 120
"""A bot's start on a loaded 2-core machine (migrations, PTB, the web endpoint) may take tens of seconds."""


def write_config(
    path: Path, fake: FakeTelegram, server: Durable, store_url: str, port: int, drain_s: float, more: str = ""
) -> Path:
    """The fleet's one config (only the web port differs between instances); `more` is added at its end."""
    path.write_text(
        "[telegram]\n"
        'token = "${TELEGRAM_BOT_TOKEN}"\n'
        f'api_base_url = "{fake.base_url}"\n'
        f"allowed_users = [{ALICE}, {BOB}]\n"
        f'mode = "webhook"\nwebhook_secret = "{SECRET}"\n'
        f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "https://bot.example.com"\n'
        f'[storage]\nurl = "{store_url}"\n'
        f"[run]\ndrain_s = {drain_s}\n"
        f'[servers.d]\nurl = "{server.url}"\nprotocol = "2026-07-28"\n'
        f'[servers.l]\nurl = "{server.url}"\nprotocol = "legacy"\n' + more
    )
    return path


class FleetBot:
    """One instance of the fleet: its process across starts, and the log lines of the current run."""

    def __init__(self, index: int, config: Path, port: int, fake: FakeTelegram, logs: Path, tg: TaskGroup):
        self.index = index
        self.config = config
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._fake = fake
        self._logs = logs
        self._tg = tg
        self.process: Process | None = None
        self.runs = 0
        self.lines: list[str] = []
        """What the current (or last) run logged, line by line."""
        self._logged = anyio.Event()
        self._read_all = False
        """The current run's log is read to its end (the process closed its stderr)."""

    def __repr__(self) -> str:
        return f"<FleetBot {self.index} run {self.runs} on {self.port}>"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def log_path(self) -> Path:
        return self._logs / f"bot{self.index}.{self.runs}.log"

    async def start(self) -> None:
        """Start the process (again) and wait until it says it is running (its webhook then takes updates)."""
        assert not self.alive, f"{self!r} runs already"
        self.runs += 1
        self.lines = []
        self._read_all = False
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": self._fake.token}
        self.process = await open_bot(
            [str(EXE), "--config", str(self.config)], env=env, cwd=REPO, stdout=None
        )
        self._tg.start_soon(self._read, self.process, self.log_path)
        await self.logged("is running", timeout=START_S)

    async def _read(self, process: Process, path: Path) -> None:
        assert process.stderr is not None
        pending = b""
        with path.open("wb") as out:
            async for chunk in process.stderr:
                out.write(chunk)
                out.flush()
                pending += chunk
                *complete, pending = pending.split(b"\n")
                if process is self.process:
                    self.lines += [line.decode(errors="replace") for line in complete]
                    self._wake()
        if process is self.process:
            self._read_all = True
            self._wake()

    def _wake(self) -> None:
        self._logged.set()
        self._logged = anyio.Event()

    async def logged(self, text: str, timeout: float = 60) -> str:  # noqa: ASYNC109 - like FakeTelegram.wait_for
        """Wait for a line of this run's log containing `text`."""
        with anyio.fail_after(timeout):
            while True:
                found = next((line for line in self.lines if text in line), None)
                if found is not None:
                    return found
                if self._read_all:
                    raise AssertionError(f"{self!r} ended its log without {text!r}:\n" + self.tail())
                await self._logged.wait()

    async def stop(self) -> int:
        """SIGTERM (a deploy): the bot drains and exits; its exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(60):
            return await self.process.wait()

    async def kill(self) -> None:
        """SIGKILL (a crash): nothing runs on the bot's side; its sockets close at once."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        with anyio.fail_after(10):
            await self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: the process holds its connections and locks but does nothing (a zombie, a GC pause)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    async def close(self) -> None:
        """At the end of the scene: a paused bot is resumed, a running one killed (the test is over)."""
        if self.process is None:
            return
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
        with anyio.CancelScope(shield=True):
            await self.process.wait()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.lines[-lines:])


@dataclass
class Fleet:
    """The scene: the fake Bot API and its people, the proxy, the bots, the MCP server."""

    fake: FakeTelegram
    proxy: RoundRobinProxy
    bots: list[FleetBot]
    server: Durable
    alice: FakeUser
    bob: FakeUser
    logs: Path
    store_url: str

    def received(self, tool: str = "stamp") -> list[dict[str, object]]:
        """The answers and plain calls the MCP server received for `tool`, in order."""
        return [r for r in self.server.received() if r["tool"] == tool]

    def logs_text(self) -> str:
        """Every run's whole log, for a failing test's output."""
        parts = []
        for path in sorted(self.logs.glob("bot*.log")):
            parts.append(f"----- {path.name} -----\n{path.read_text(errors='replace')}")
        return "\n".join(parts)


def stamps(fleet: Fleet) -> list[int]:
    """The `n` of every `stamp` call the server received, in order (a number twice: a call run twice)."""
    found = []
    for record in fleet.received("stamp"):
        data = record["data"]
        assert isinstance(data, dict)
        found.append(int(data["n"]))
    return found


def results(fake: FakeTelegram, user: FakeUser, prefix: str = "stamp ") -> list[Msg]:
    """The bot's messages in `user`'s chat showing a result line starting with `prefix` (one per call)."""
    return [
        m for m in fake.messages(user, from_bot=True) if any(x.startswith(prefix) for x in m.text.split("\n"))
    ]


@asynccontextmanager
async def fleet_scene(
    tmp_path: Path, store_url: str, *, n: int = 2, drain_s: float = 3, start: bool = True, config: str = ""
) -> AsyncIterator[Fleet]:
    """`n` bots behind the proxy on `store_url` (PostgreSQL), started one after the other unless `start` is
    False (then the test starts them); everything is stopped when the block ends. `config` is added to the
    end of the bots' config (e.g. `[[approvals]]`)."""
    logs = tmp_path / "fleet-logs"
    logs.mkdir()
    async with AsyncExitStack() as stack:
        fake = await stack.enter_async_context(FakeTelegram())
        server = await stack.enter_async_context(durable_server(tmp_path))
        alice = fake.user(id=ALICE, first_name="Alice")
        bob = fake.user(id=BOB, first_name="Bob")
        ports = [free_port() for _ in range(n)]
        proxy = await stack.enter_async_context(round_robin_proxy([f"http://127.0.0.1:{p}" for p in ports]))
        tg = await stack.enter_async_context(anyio.create_task_group())
        bots = [
            FleetBot(
                i,
                write_config(tmp_path / f"bot{i}.toml", fake, server, store_url, p, drain_s, config),
                p,
                fake,
                logs,
                tg,
            )
            for i, p in enumerate(ports)
        ]
        fleet = Fleet(fake, proxy, bots, server, alice, bob, logs, store_url)

        async def close() -> None:
            for bot in bots:
                await bot.close()
            tg.cancel_scope.cancel()  # the log readers end with their processes; nothing else runs here

        stack.push_async_callback(close)
        try:
            if start:
                for bot in bots:  # one after the other: a start migrates the database under a lock anyway
                    await bot.start()
            fake.deliver_via_webhook(f"{proxy.url}/telegram", secret_token=SECRET, retry=True)
            yield fleet
        finally:
            print(fleet.logs_text())  # pytest shows it when the test failed

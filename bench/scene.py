"""The bench's stage: the fake Bot API (fit for a thousand users), the bot and server processes, /proc readings.

I/O: starts and stops processes, serves the fake in this process's event loop, reads /proc.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from subprocess import DEVNULL
from typing import Any, Final

import anyio
from anyio.abc import Process

from tests.fakes.telegram import FakeTelegram, Msg, RateLimits
from tests.ports import free_port

ROOT: Final = Path(__file__).resolve().parent.parent
SERVER: Final = "b"
PUBLIC_URL: Final = "https://bench.example.com"
"""The bot's `[web] public_url` when it has one: Mini App buttons point there; the bench posts to 127.0.0.1."""
"""The bench server's name in the bot's config (it appears in every status line: `b · pick`)."""
_TICK: Final = os.sysconf("SC_CLK_TCK")
_PAGE: Final = os.sysconf("SC_PAGE_SIZE")


class BenchFake(FakeTelegram):
    """`FakeTelegram` with per-chat waits and first-arrival times.

    The fake's own `wait_for` scans every message on every change, which is quadratic with a thousand users
    waiting at once; here each wait looks only at its chat and is woken only by changes there.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.arrived: dict[tuple[int, int], float] = {}
        """(chat_id, message_id) -> `time.monotonic()` when the bot's message first reached the fake."""
        self.last_change = time.monotonic()
        """When a bot message was last sent, edited or deleted."""
        self._watchers: dict[int, list[tuple[Callable[[Msg], bool], asyncio.Future[Msg]]]] = defaultdict(list)

    def touch(self, msg: Msg) -> None:
        super().touch(msg)
        self.arrived.setdefault((msg.chat_id, msg.message_id), time.monotonic())
        if msg.from_bot:
            self.last_change = time.monotonic()
        watchers = self._watchers.get(msg.chat_id)
        if not watchers:
            return
        waiting = []
        for predicate, future in watchers:
            if future.done():
                continue
            if msg.from_bot and not msg.deleted and predicate(msg):
                future.set_result(msg)
            else:
                waiting.append((predicate, future))
        self._watchers[msg.chat_id] = waiting

    async def until(self, chat_id: int, predicate: Callable[[Msg], bool], timeout: float = 30) -> Msg:  # noqa: ASYNC109 - mirrors FakeTelegram.wait_for
        """The newest live bot message in `chat_id` matching `predicate`, now or when one changes to match."""
        for msg in reversed(self.messages(chat_id, from_bot=True)):
            if predicate(msg):
                return msg
        future: asyncio.Future[Msg] = asyncio.get_running_loop().create_future()
        self._watchers[chat_id].append((predicate, future))
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            recent = self.messages(chat_id, from_bot=True)[-3:]
            raise TimeoutError(f"chat {chat_id}: nothing matched in {timeout}s; last: {recent}") from None

    def call_counts(self) -> Counter[str]:
        return Counter(method for method, _ in self.calls)


def rate_limited_fake() -> BenchFake:
    """A fake enforcing Telegram's limits (30 messages/s overall, ...), answering 429 beyond them."""
    return BenchFake(rate_limit=RateLimits())


# --- /proc ---------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process itself (children excluded), in seconds."""
    with open(f"/proc/{pid}/stat") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # fields 14 and 15 of proc(5), counted after the ")"


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in KiB."""
    out = {}
    with open(f"/proc/{pid}/status") as file:
        for line in file:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


# --- processes -------------------------------------------------------------------------------------------


def server_command(module: str, *args: str) -> list[str]:
    """How the bench's MCP server is started (`python -m bench.server ...`). The test suite puts in its place a
    start that forks it from a process that has imported the MCP SDK already (tests/zygote.py), as it does for
    the bots (`open_bot_process`)."""
    return [sys.executable, "-m", module, *args]


def stdio_server_entry(log: Path, protocol: str) -> dict[str, Any]:
    command, *args = server_command("bench.server", "--log", str(log))
    return {"command": command, "args": args, "cwd": str(ROOT), "protocol": protocol}


def http_server_entry(url: str, protocol: str) -> dict[str, Any]:
    return {"url": url, "protocol": protocol}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(value)


def write_config(
    path: Path,
    fake: FakeTelegram,
    server: dict[str, Any],
    *,
    max_open: int = 100,
    web_port: int | None = None,
    gateway: bool = False,
    webhook_secret: str | None = None,
    storage_url: str | None = None,
) -> None:
    """The bot's config; with `web_port`, a `[web]` endpoint there whose public URL is `PUBLIC_URL`.

    `gateway` turns `[gateway]` on (agents at `<public_url>/mcp`, so it needs `web_port`), with `[storage]` named
    as it requires: the same SQLite file the bot uses without it (`database_of(path)`). `webhook_secret` puts
    the bot in webhook mode (on the endpoint at `web_port`); `storage_url` is its `[storage] url`."""
    web = (
        []
        if web_port is None
        else ["[web]", 'listen = "127.0.0.1"', f"port = {web_port}", f"public_url = {_toml(PUBLIC_URL)}"]
    )
    if gateway or storage_url is not None:
        web += ["[storage]", f"url = {_toml(storage_url or f'sqlite:///{database_of(path)}')}"]
    if gateway:
        assert web_port is not None, "the gateway is served on the web endpoint"
        web += ["[gateway]", "enabled = true"]
    webhook = []
    if webhook_secret is not None:
        assert web_port is not None, "the webhook is served on the web endpoint"
        webhook = ['mode = "webhook"', f"webhook_secret = {_toml(webhook_secret)}"]
    lines = [
        "[telegram]",
        f"token = {_toml(fake.token)}",
        f"api_base_url = {_toml(fake.base_url)}",
        "allow_everyone = true",
        *webhook,
        "[elicitation]",
        "timeout_s = 600",
        "[sessions]",
        f"max_open = {max_open}",
        "idle_timeout_s = 3600",
        # The bench's scripted people call far faster than the per-person limits of a public bot allow.
        "[limits]",
        "calls_per_minute = 0",
        "concurrent_calls = 0",
        "open_questions = 0",
        "stdio_processes = 0",
        *web,
        f"[servers.{SERVER}]",
        *(f"{k} = {_toml(v)}" for k, v in server.items()),
    ]
    path.write_text("\n".join(lines) + "\n")


def database_of(config: Path) -> Path:
    """The bot's SQLite database: beside its config (the default without `[storage]`, and what `gateway` names)."""
    return config.parent / "toolnexus.db"


@dataclass
class BotProcess:
    """The bot running as its own process; `pid` is the bot itself (no shell in between)."""

    process: Process
    fake: BenchFake
    stderr: Path
    log_text: str = ""
    """The bot's stderr (warnings and errors), read when it has stopped."""
    callgrind_out: Path | None = None
    """Where callgrind writes its counts (a bot started with `callgrind=True`)."""
    database: Path | None = None
    """The bot's SQLite database (beside its config: the config has no `[storage]`)."""
    _dumps: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def memory(self) -> dict[str, int]:
        return memory_kb(self.pid)

    def count(self, on: bool) -> None:
        """Switch callgrind's counting on or off (a bot started with `callgrind=True`)."""
        self._callgrind("-i", "on" if on else "off")

    def instructions(self) -> int:
        """Instructions counted since counting was switched on or since the last call (callgrind dumps a part)."""
        assert self.callgrind_out is not None, "started without callgrind"
        self._callgrind("-d")
        self._dumps += 1
        part = self.callgrind_out.with_name(f"{self.callgrind_out.name}.{self._dumps}").read_text()
        found = re.search(r"^summary: (\d+)$", part, re.MULTILINE)
        if found is None:
            raise RuntimeError(f"no summary line in callgrind's part {self._dumps}")
        return int(found.group(1))

    def keep_counts(self, folder: Path, name: str) -> None:
        """Copy the parts callgrind dumped so far to `folder` as `<name>.<part>` (for `callgrind_annotate`)."""
        assert self.callgrind_out is not None, "started without callgrind"
        folder.mkdir(parents=True, exist_ok=True)
        for part in range(1, self._dumps + 1):
            source = self.callgrind_out.with_name(f"{self.callgrind_out.name}.{part}")
            (folder / f"{name}.{part}").write_bytes(source.read_bytes())

    def _callgrind(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.pid)], check=True, capture_output=True)

    def profile(self, on: bool) -> None:
        """Start (True) or stop and write (False) the profile (or memory comparison) of a bot started with
        `profile=` (or `memory=`)."""
        self.process.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)


@asynccontextmanager
async def bot_process(
    fake: BenchFake,
    server: dict[str, Any],
    *,
    unthrottled: bool = True,
    max_open: int = 100,
    profile: Path | None = None,
    memory: Path | None = None,
    callgrind: bool = False,
    web_port: int | None = None,
    client: str = "aiohttp",
    config_text: str | None = None,
    env: dict[str, str] | None = None,
    store: bool = True,
    gateway: bool = False,
    started_by: str = "getUpdates",
    start_s: float = 30,
) -> AsyncIterator[BotProcess]:
    """Start `python -m bench.botproc [--unthrottled] [--client C] --config <tmp>` and wait until it polls the
    fake. `client` is the Bot API client under the bot: "aiohttp" (shipped) or "httpx" (PTB's own).

    `config_text` is the whole config file instead of one written for `server`; `env` adds to the environment.
    `store=False` runs the bot without its database (`bench.botproc --no-store`). `gateway` serves `[gateway]`
    on the web endpoint at `web_port` (agent tokens are made in `BotProcess.database`). `started_by` is the Bot
    API call that says the bot is fully started: its first poll, or "setWebhook" in webhook mode; it must come
    within `start_s` (else the bot's stderr is raised).

    With `callgrind`, the bot runs under valgrind's callgrind with instrumentation off; `BotProcess.count`
    switches it on and off, and `instructions()` reads what was counted since the last reading.
    """
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        config = Path(tmp) / "bot.toml"
        if config_text is None:
            write_config(config, fake, server, max_open=max_open, web_port=web_port, gateway=gateway)
        else:
            config.write_text(config_text)
        stderr = Path(tmp) / "bot.stderr"
        command = [sys.executable, "-m", "bench.botproc", "--config", str(config), "--log-level", "WARNING"]
        if unthrottled:
            command.insert(3, "--unthrottled")
        if not store:
            command.insert(3, "--no-store")
        if client != "aiohttp":
            command[3:3] = ["--client", client]
        if profile is not None:
            command[3:3] = ["--profile", str(profile)]
        if memory is not None:
            command[3:3] = ["--memory", str(memory)]
        if callgrind:
            command[:0] = [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={tmp}/cg",
            ]
        polls = fake.call_counts()[started_by]
        start = anyio.open_process if callgrind else open_bot_process
        with _sink(stderr) as err:
            process = await start(
                command,
                cwd=ROOT,
                stdin=DEVNULL,
                stdout=DEVNULL,
                stderr=err,
                env={**os.environ, **(env or {})},
            )
        bot = BotProcess(
            process,
            fake,
            stderr,
            callgrind_out=Path(tmp) / "cg" if callgrind else None,
            database=database_of(config),
        )
        try:
            try:
                with anyio.fail_after(300 if callgrind else start_s):
                    while (
                        fake.call_counts()[started_by] <= polls
                    ):  # it polls (or sets its webhook) once started
                        await fake.next_change()
            except TimeoutError:
                said = stderr.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the bot did not start within {start_s:g} s; it said:\n{said}") from None
            yield bot
        finally:
            await _stop(process)
            bot.log_text = stderr.read_text(errors="replace")


async def open_bot_process(command: list[str], **options: Any) -> Process:
    """How `bot_process` starts `python -m bench.botproc ...` (not under callgrind): `anyio.open_process(command,
    **options)`. The test suite puts in its place a start that forks the same command from a process that has
    imported the bot already (tests/zygote.py): its tests check what the scenarios do, not the bot's start."""
    return await anyio.open_process(command, **options)


def _sink(path: Path) -> Any:
    return path.open("wb")


async def _stop(process: Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(15):
            await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


@dataclass
class HttpServer:
    """The bench MCP server over streamable HTTP, in its own process."""

    url: str
    log: Path
    process: Process

    def read_log(self) -> list[dict[str, Any]]:
        return read_log(self.log)


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@asynccontextmanager
async def http_server(workdir: Path) -> AsyncIterator[HttpServer]:
    port = free_port()
    log = workdir / f"http-{port}.jsonl"
    # Started cold whatever the test suite puts in `server_command`: the scenarios read its CPU from its pid.
    command = [sys.executable, "-m", "bench.server", "--http", str(port), "--log", str(log)]
    with _sink(workdir / f"http-{port}.stderr") as err:  # its shutdown complaints are not the bench's output
        process = await anyio.open_process(command, cwd=ROOT, stdin=DEVNULL, stdout=DEVNULL, stderr=err)
    try:
        with anyio.fail_after(30):
            while True:
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", port)
                except OSError:
                    await anyio.sleep(0.05)
                    continue
                await stream.aclose()
                break
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", log, process)
    finally:
        await _stop(process)

"""Bench g (issue 34): what the MCP gateway adds to an agent's call, and a hundred agents calling at once. Does I/O.

An agent is the SDK's own `Client` over streamable HTTP with an agent token, made in the bot's database as
`/agents new` makes it. It calls the bench server's `hello` (no question) as `b__hello` through the bot's `/mcp`:
agent -> gateway -> the bench MCP server (its own process, streamable HTTP) -> back. Beside it the same kind of
`Client` calls `hello` on that server directly. The bot runs as its own process (`bench.botproc`, flood limits
off, the fake Bot API in this process, `[gateway]` on with its `[storage]`). Every result must carry the
caller's own tag (nothing lost or crossed); the timings are measured, never asserted.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench import flows
from bench.scenarios import FIRST_USER_ID, percentile, progress
from bench.scene import (
    SERVER,
    BenchFake,
    BotProcess,
    bot_process,
    cpu_seconds,
    http_server,
    http_server_entry,
)
from tests.ports import free_port

TOOL: Final = "hello"
"""The bench server's tool without a question: the call is all there is."""
CHUNK: Final = 10
"""Calls in a row through one path before switching to the other: both see the same load on a shared machine,
and the bot's CPU is read around its own chunks only."""
TIMEOUT_S: Final = 600.0


class WrongResult(AssertionError):
    """A call's result is not the server's `hello` for that caller's tag."""


async def _tokens(database: Path, people: Sequence[int]) -> list[str]:
    """One agent token per person, made in the bot's database while it runs (SQLite takes a second writer)."""
    from bot.config import Secret, StorageConfig
    from bot.store import open_store

    async with open_store(StorageConfig(url=Secret(f"sqlite:///{database}"))) as store:
        return [str((await store.agents.create(person, f"bench-{person}", 0))[1]) for person in people]


@asynccontextmanager
async def _client(url: str, protocol: str, token: str | None = None) -> AsyncIterator[Client]:
    """The SDK's `Client` over streamable HTTP in `protocol`'s era; with `token`, as an agent."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30.0, read=TIMEOUT_S), trust_env=False
        ) as http,
        Client(
            streamable_http_client(url, http_client=http), mode=protocol, read_timeout_seconds=None
        ) as client,
    ):
        yield client


async def _hello(client: Client, name: str, tag: str) -> float:
    """Call `name` with `tag`; the seconds it took. Raises `WrongResult` unless the server said hello to `tag`."""
    started = time.perf_counter()
    result = await client.call_tool(name, {"tag": tag})
    took = time.perf_counter() - started
    block = result.content[0] if result.content else None
    text = block.text if isinstance(block, types.TextContent) else repr(result.content)
    if result.is_error or text != f"hello {tag}":
        raise WrongResult(f"{name}({tag}): {text!r}")
    return took


def _reason(exc: BaseException) -> str:
    """The first innermost exception of `exc` (the SDK's task groups wrap what went wrong), named."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _through_gateway() -> str:
    """The tool's name as the gateway lists it to agents: `<server>__<tool>`."""
    from bot.web.gateway import SEPARATOR

    return f"{SERVER}{SEPARATOR}{TOOL}"


def _ms(seconds: Sequence[float], q: float) -> float:
    return round(percentile(seconds, q) * 1000, 2)


@asynccontextmanager
async def _gateway_bot(
    fake: BenchFake, server_url: str, protocol: str, **kwargs: Any
) -> AsyncIterator[tuple[BotProcess, str]]:
    """The bot with `[gateway]` on, its one server the bench's over HTTP; (the bot, its `/mcp` URL)."""
    port = free_port()
    async with bot_process(
        fake, http_server_entry(server_url, protocol), web_port=port, gateway=True, **kwargs
    ) as bot:
        yield bot, f"http://127.0.0.1:{port}/mcp"


# --- the cost of one call ------------------------------------------------------------------------------------


async def gateway_overhead(
    calls: int, protocol: str, *, warm: int = 5, profile: Path | None = None
) -> dict[str, Any]:
    """`calls` sequential `hello`s by one agent through the gateway and as many by a `Client` straight to the
    server, in alternating chunks: latency p50/p99 each way, and the CPU of the bot and the server per call.
    `profile`: cProfile the bot during the agent's chunks into this file (`python -m bench.shares` reads it);
    its figures are then inflated."""
    through_name = _through_gateway()
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        async with (
            http_server(Path(tmp)) as server,
            BenchFake() as fake,
            _gateway_bot(fake, server.url, protocol, profile=profile) as (bot, gateway_url),
        ):
            assert bot.database is not None
            (token,) = await _tokens(bot.database, [FIRST_USER_ID])
            progress(
                f"g. gateway ({protocol}): {calls} calls through /mcp and {calls} straight to the server"
            )
            via: list[float] = []
            straight: list[float] = []
            spent = {"bot_via": 0.0, "server_via": 0.0, "bot_straight": 0.0, "server_straight": 0.0}
            load_before = os.getloadavg()[0]
            with anyio.fail_after(TIMEOUT_S):
                async with (
                    _client(gateway_url, protocol, token) as agent,
                    _client(server.url, protocol) as direct,
                ):
                    for n in range(warm):  # the person's session to the server opens on the first
                        await _hello(agent, through_name, f"gw-warm{n}")
                        await _hello(direct, TOOL, f"d-warm{n}")
                    for first in range(0, calls, CHUNK):
                        for path, client, name, into in (
                            ("via", agent, through_name, via),
                            ("straight", direct, TOOL, straight),
                        ):
                            profiled = profile is not None and path == "via"
                            if profiled:
                                bot.profile(True)
                            bot_cpu, server_cpu = bot.cpu(), cpu_seconds(server.process.pid)
                            for n in range(first, min(first + CHUNK, calls)):
                                into.append(await _hello(client, name, f"{path}{n}"))
                            if profiled:
                                bot.profile(False)
                            spent[f"bot_{path}"] += bot.cpu() - bot_cpu
                            spent[f"server_{path}"] += cpu_seconds(server.process.pid) - server_cpu
    p50_via, p50_straight = _ms(via, 50), _ms(straight, 50)
    load = {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}
    return {
        "protocol": protocol,
        "calls": calls,
        "completed": {"through_gateway": len(via), "straight": len(straight)},
        "through_gateway_ms": {"p50": p50_via, "p99": _ms(via, 99)},
        "straight_ms": {"p50": p50_straight, "p99": _ms(straight, 99)},
        "overhead_ms_p50": round(p50_via - p50_straight, 2),
        "bot_cpu_ms_per_call": round(spent["bot_via"] * 1000 / max(1, calls), 3),
        "bot_cpu_ms_per_straight_call": round(spent["bot_straight"] * 1000 / max(1, calls), 3),
        "server_cpu_ms_per_call": {
            "through_gateway": round(spent["server_via"] * 1000 / max(1, calls), 3),
            "straight": round(spent["server_straight"] * 1000 / max(1, calls), 3),
        },
        "load_average_1min": load,
    }


async def gateway_instructions(calls: int, protocol: str) -> dict[str, Any] | None:
    """Instructions the bot executes per agent call through the gateway, counted by callgrind as bench a counts
    an elicitation, and per `/call` of the same tool by the same person in the chat, for comparison. None when
    valgrind is not installed."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        progress("g. instructions: valgrind not installed, skipped")
        return None
    through_name = _through_gateway()
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        async with (
            http_server(Path(tmp)) as server,
            BenchFake() as fake,
            _gateway_bot(fake, server.url, protocol, callgrind=True) as (bot, gateway_url),
        ):
            assert bot.database is not None
            (token,) = await _tokens(bot.database, [FIRST_USER_ID])
            person = fake.user(id=FIRST_USER_ID, first_name="Agent's person")
            progress(
                f"g. instructions ({protocol}): the bot under callgrind, {calls} agent calls, {calls} /calls"
            )
            with anyio.fail_after(TIMEOUT_S * 2):
                async with _client(gateway_url, protocol, token) as agent:
                    await _hello(agent, through_name, "gi-warm")
                    await flows.hello(fake, person, "ci-warm")
                    bot.count(True)
                    for n in range(calls):
                        await _hello(agent, through_name, f"gi{n}")
                    through = bot.instructions()
                    for n in range(calls):
                        await flows.hello(fake, person, f"ci{n}")
                    chat = bot.instructions()
                    bot.count(False)
    return {
        "protocol": protocol,
        "calls": calls,
        "bot_instructions_per_agent_call": round(through / calls),
        "bot_instructions_per_chat_call": round(chat / calls),
    }


# --- many agents at once ---------------------------------------------------------------------------------------


class _Barrier:
    """`parties` arrivals set `all`: every agent arrives once, whether it got there or failed on the way."""

    def __init__(self, parties: int) -> None:
        self.left = parties
        self.all = anyio.Event()

    def arrive(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.all.set()


async def agents_at_once(agents: int, protocol: str) -> dict[str, Any]:
    """`agents` agents, each with its own person's token and its own session to `/mcp`, all connected first, then
    one call each at the same moment (which opens each person's session to the server), then a second round at
    once on the open sessions: per round the wall time until the last result, each call's latency, the bot's and
    the server's CPU; the errors (connecting, calling or closing), with the first reasons."""
    through_name = _through_gateway()
    people = [FIRST_USER_ID + i for i in range(agents)]
    rounds = ("first", "warm")
    latencies: dict[str, list[float]] = {r: [] for r in rounds}
    finished: dict[str, list[float]] = {r: [] for r in rounds}
    errors: list[str] = []
    connected, *done = [_Barrier(agents) for _ in range(1 + len(rounds))]
    go = {r: anyio.Event() for r in rounds}
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        async with (
            http_server(Path(tmp)) as server,
            BenchFake() as fake,
            _gateway_bot(fake, server.url, protocol, max_open=agents + 100) as (bot, gateway_url),
        ):
            assert bot.database is not None
            tokens = await _tokens(bot.database, people)
            progress(f"g. agents ({protocol}): {agents} agents connect, then call at once, twice")

            async def one(i: int) -> None:
                ahead = [connected, *done]
                try:
                    async with _client(gateway_url, protocol, tokens[i]) as client:
                        ahead.pop(0).arrive()
                        for name in rounds:
                            await go[name].wait()
                            latencies[name].append(await _hello(client, through_name, f"{name}{i}"))
                            finished[name].append(time.perf_counter())
                            ahead.pop(0).arrive()
                except Exception as exc:  # every failure is a figure of this bench: counted, with its reason
                    errors.append(f"agent {i}: {_reason(exc)}"[:300])
                    for barrier in ahead:
                        barrier.arrive()

            figures: dict[str, dict[str, Any]] = {}
            load_before = os.getloadavg()[0]
            with anyio.fail_after(TIMEOUT_S):
                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for i in range(agents):
                        tg.start_soon(one, i)
                    await connected.all.wait()
                    connected_s = time.perf_counter() - started
                    for name, barrier in zip(rounds, done, strict=True):
                        bot_cpu, server_cpu = bot.cpu(), cpu_seconds(server.process.pid)
                        go_at = time.perf_counter()
                        go[name].set()
                        await barrier.all.wait()
                        figures[name] = {
                            "completed": len(latencies[name]),
                            "all_calls_s": round(max(finished[name], default=go_at) - go_at, 3),
                            "call_ms": {"p50": _ms(latencies[name], 50), "p99": _ms(latencies[name], 99)},
                            "cpu_s": {
                                "bot": round(bot.cpu() - bot_cpu, 2),
                                "mcp_server": round(cpu_seconds(server.process.pid) - server_cpu, 2),
                            },
                        }
    return {
        "protocol": protocol,
        "agents": agents,
        "completed": figures["first"]["completed"],
        "errors": len(errors),
        "first_errors": errors[:3],
        "connect_all_s": round(connected_s, 2),
        **figures["first"],
        "warm": figures["warm"],
        "load_average_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
    }

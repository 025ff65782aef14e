"""The four measurements of issue 5: bridge cost, Bot API calls per form kind, 1,000 pending users, flood.

I/O: each scenario starts the fake Bot API here, the bot (and an MCP server) as processes, drives scripted
people, and returns plain figures (dicts of numbers) for `bench.report`. Correctness is checked on the way
(every answer must reach the server for its person); timings are only measured, never asserted.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from subprocess import DEVNULL
from typing import TYPE_CHECKING, Any, Final

import anyio
import mcp_types as types
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import ClientRequestContext

from bench import flows, scene
from bench.scene import (
    ROOT,
    BenchFake,
    bot_process,
    cpu_seconds,
    http_server,
    http_server_entry,
    rate_limited_fake,
    read_log,
    stdio_server_entry,
)
from bench.server import CHOICES
from tests.fakes.telegram import FakeUser
from tests.ports import free_port

if TYPE_CHECKING:
    from bot.core import Era, KeptQuestion

METHODS: Final = ("sendMessage", "editMessageText", "deleteMessage", "answerCallbackQuery", "getUpdates")
FIRST_USER_ID: Final = 100_000


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def _users(fake: BenchFake, count: int, first: int = FIRST_USER_ID) -> list[FakeUser]:
    return [fake.user(id=first + i, first_name=f"P{i}") for i in range(count)]


def _cpus(*pids: int) -> list[float]:
    """CPU seconds of each process, then of this one (the fake Bot API and the scripted people)."""
    return [*(cpu_seconds(pid) for pid in pids), time.process_time()]


def _choice(user: FakeUser) -> str:
    return CHOICES[user.id % len(CHOICES)]


def _per(counts: Counter[str], n: int) -> dict[str, float]:
    return {m: round(counts.get(m, 0) / n, 2) for m in METHODS}


async def _each(
    items: Sequence[Any], work: Callable[[Any], Awaitable[None]], limit: int | None = None
) -> None:
    """Run `work(item)` for every item concurrently (at most `limit` at a time); the first failure propagates."""
    gate = anyio.Semaphore(limit or max(1, len(items)))

    async def one(item: Any) -> None:
        async with gate:
            await work(item)

    async with anyio.create_task_group() as tg:
        for item in items:
            tg.start_soon(one, item)


def _check_log(records: list[dict[str, Any]], expected: Mapping[str, dict[str, Any] | None]) -> int:
    """How many of `expected` (tag -> content) the server received exactly once, with that content."""
    seen = Counter(r["tag"] for r in records if r["tag"] in expected)
    good = {r["tag"] for r in records if r["tag"] in expected and r["content"] == expected[r["tag"]]}
    return sum(1 for tag in expected if seen[tag] == 1 and tag in good)


# --- a. bridge cost per elicitation ----------------------------------------------------------------------


async def bridge_cost(
    elicitations: int,
    users: int,
    protocol: str,
    *,
    sequential: int = 50,
    profile: Path | None = None,
    client: str = "aiohttp",
    bare: bool = True,
) -> dict[str, Any]:
    """Bot CPU and wall time per single-choice elicitation, against a bare `mcp` Client doing the same
    (unless `bare` is False). `client` is the Bot API client under the bot (`bench.botproc --client`)."""
    per_user = -(-elicitations // users)
    total = per_user * users
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        log = Path(tmp) / "a.jsonl"
        async with (
            BenchFake() as fake,
            bot_process(fake, stdio_server_entry(log, protocol), profile=profile, client=client) as bot,
        ):
            people = _users(fake, users)
            progress(
                f"a. bridge ({protocol}, {client}): {users} people open their sessions (stdio server each)"
            )
            await _each(people, lambda u: _warm_up(fake, u))
            progress(
                f"a. bridge ({protocol}, {client}): {total} single-choice elicitations, {users} people in parallel"
            )
            latencies: list[float] = []
            expected: dict[str, dict[str, Any] | None] = {}
            if profile is not None:
                bot.profile(True)
            calls_before, cpu_before, t0 = fake.call_counts(), bot.cpu(), time.perf_counter()
            own_before = time.process_time()

            async def run(user: FakeUser) -> None:
                for n in range(per_user):
                    tag = f"a{user.id}-{n}"
                    expected[tag] = {"colour": _choice(user)}
                    done = await flows.pick(fake, user, tag, _choice(user))
                    latencies.append(done.finished - done.started)

            await _each(people, run)
            wall, cpu = time.perf_counter() - t0, bot.cpu() - cpu_before
            fake_cpu = time.process_time() - own_before
            calls = fake.call_counts() - calls_before
            if profile is not None:
                bot.profile(False)
            one_at_a_time = await _sequential_latency(fake, people[0], sequential)
        received = _check_log(read_log(log), expected)
        figures: dict[str, Any] = {}
        if bare:
            progress(f"a. bridge ({protocol}): the same through a bare mcp Client")
            figures = await _bare_client(total, users, protocol, Path(tmp), sequential)
    out = {
        "protocol": protocol,
        "client": client,
        "elicitations": total,
        "people_in_parallel": users,
        "answered_correctly": received,
        "taps_per_elicitation": 2,
        "bot_cpu_ms_per_elicitation": round(cpu * 1000 / total, 3),
        "bot_cpu_s_total": round(cpu, 2),
        "fake_and_people_cpu_ms_per_elicitation": round(fake_cpu * 1000 / total, 3),
        "wall_s": round(wall, 2),
        "wall_ms_per_elicitation": round(wall * 1000 / total, 3),
        "latency_ms_p50": round(percentile(latencies, 50) * 1000, 1),
        "latency_ms_p99": round(percentile(latencies, 99) * 1000, 1),
        "sequential_latency_ms_p50": round(one_at_a_time * 1000, 1),
        "bot_api_calls_per_elicitation": _per(calls, total),
    }
    if figures:
        out["bare_client"] = figures
        out["wall_ratio_bot_over_bare"] = round(wall / figures["wall_s"], 2)
        out["sequential_latency_ratio_bot_over_bare"] = round(
            one_at_a_time / figures["sequential_latency_s_p50"], 2
        )
    return out


async def bridge_instructions(
    per_user: int,
    users: int,
    protocol: str,
    client: str = "aiohttp",
    *,
    store: bool = True,
    keep: Path | None = None,
) -> dict[str, Any] | None:
    """Instructions the bot executes per single-choice elicitation, counted by valgrind's callgrind.

    CPU time on a shared machine drifts with its neighbours (the same code measured 2.4 to 5 ms here); an
    instruction count does not (0.3% between runs), so it is the figure to compare commits by. The same
    people then make as many plain calls (`/call`, no question): what a call costs on its own, so the
    elicitation's own share is the difference. The bot is about 50 times slower under valgrind, so this runs
    few elicitations. `store=False` runs the bot without its database (what the store costs is the difference).
    `keep`: a folder where callgrind's two parts (the elicitations, the plain calls) are copied, for
    `callgrind_annotate`. None when valgrind is not installed.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        progress("a. instructions: valgrind not installed, skipped")
        return None
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        log = Path(tmp) / "i.jsonl"
        async with BenchFake() as fake:
            progress(
                f"a. instructions ({protocol}, {client}): the bot under callgrind, {per_user * users} elicitations"
            )
            async with bot_process(
                fake, stdio_server_entry(log, protocol), callgrind=True, client=client, store=store
            ) as bot:
                people = _users(fake, users)
                await _each(people, lambda u: _warm_up(fake, u))
                expected: dict[str, dict[str, Any] | None] = {}

                async def run(user: FakeUser) -> None:
                    for n in range(per_user):
                        tag = f"i{user.id}-{n}"
                        expected[tag] = {"colour": _choice(user)}
                        await flows.pick(fake, user, tag, _choice(user))

                async def plain(user: FakeUser) -> None:
                    for n in range(per_user):
                        await flows.hello(fake, user, f"ih{user.id}-{n}")

                bot.count(True)
                calls_before = fake.call_counts()
                await _each(people, run)
                calls = fake.call_counts() - calls_before
                elicitations = bot.instructions()
                await _each(people, plain)
                plain_calls = bot.instructions()
                bot.count(False)
                if keep is not None:
                    bot.keep_counts(keep, f"{protocol}-{client}{'' if store else '-no-store'}")
        total = per_user * users
        return {
            "protocol": protocol,
            "client": client,
            "store": store,
            "elicitations": total,
            "people_in_parallel": users,
            "answered_correctly": _check_log(read_log(log), expected),
            "bot_instructions_per_elicitation": round(elicitations / total),
            "bot_instructions_per_plain_call": round(plain_calls / total),
            "bot_api_calls_per_elicitation": _per(calls, total),
        }


async def bare_instructions(count: int, protocol: str) -> dict[str, Any] | None:
    """Instructions a bare `mcp` Client (`bench.bare`) executes per single-choice elicitation with its call,
    counted by callgrind as the bot's are (its stdio server, a child process, is not counted in either).
    None when valgrind is not installed."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return None
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        out, log = Path(tmp) / "cg", Path(tmp) / "bare.jsonl"
        command = [
            *("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"),
            *(sys.executable, "-m", "bench.bare", "--protocol", protocol, "--count", str(count)),
            *("--log", str(log)),
        ]
        progress(f"a. instructions ({protocol}): the bare mcp Client under callgrind, {count} elicitations")
        async with await anyio.open_process(command, cwd=ROOT, stderr=DEVNULL) as process:
            assert process.stdin is not None and process.stdout is not None
            lines = BufferedByteReceiveStream(process.stdout)
            with anyio.fail_after(300):
                assert await lines.receive_until(b"\n", 100) == b"ready"
            await anyio.run_process(["callgrind_control", "-i", "on", str(process.pid)])
            await process.stdin.send(b"go\n")
            with anyio.fail_after(300):
                assert await lines.receive_until(b"\n", 100) == b"done"
            await anyio.run_process(["callgrind_control", "-d", str(process.pid)])
            await process.stdin.send(b"exit\n")
            with anyio.fail_after(60):
                await process.wait()
        found = re.search(r"^summary: (\d+)$", out.with_name("cg.1").read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError("no summary line in the bare client's callgrind counts")
        answered = sum(1 for r in read_log(log) if r["tag"].startswith("bare-") and r["tag"] != "bare-warm")
    return {
        "protocol": protocol,
        "elicitations": count,
        "answered": answered,
        "instructions_per_elicitation": round(int(found.group(1)) / count),
    }


async def _warm_up(fake: BenchFake, user: FakeUser) -> None:
    await flows.hello(fake, user, f"w{user.id}")
    await flows.pick(fake, user, f"w{user.id}-pick", _choice(user))


async def _sequential_latency(fake: BenchFake, user: FakeUser, count: int) -> float:
    """Median time of one elicitation when nothing else runs (one person, one after another)."""
    times = []
    for n in range(count):
        done = await flows.pick(fake, user, f"s{user.id}-{n}", _choice(user))
        times.append(done.finished - done.started)
    return statistics.median(times)


async def _bare_client(
    elicitations: int, clients: int, protocol: str, workdir: Path, sequential_count: int
) -> dict[str, Any]:
    """The same tool calls and answers through `mcp.Client` with an elicitation callback that answers at once."""
    per_client = elicitations // clients
    command, *args = scene.server_command("bench.server", "--log", str(workdir / "bare.jsonl"))
    params = StdioServerParameters(command=command, args=args, cwd=str(ROOT))

    async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"colour": "green"})

    def client() -> Client:
        return Client(
            stdio_client(params, errlog=sys.stderr),
            elicitation_callback=answer,
            mode=protocol,
            read_timeout_seconds=None,
        )

    sequential = []
    async with client() as alone:
        await alone.call_tool("pick", {"tag": "bs-warm"})
        for n in range(sequential_count):
            started = time.perf_counter()
            await alone.call_tool("pick", {"tag": f"bs-{n}"})
            sequential.append(time.perf_counter() - started)

    counts = Counter[str]()
    all_connected, go, all_done = anyio.Event(), anyio.Event(), anyio.Event()
    wall: dict[str, float] = {}

    async def run(index: int) -> None:
        async with client() as session:
            await session.call_tool("pick", {"tag": f"bw{index}"})
            counts["connected"] += 1
            if counts["connected"] == clients:
                all_connected.set()
            await go.wait()
            for n in range(per_client):
                await session.call_tool("pick", {"tag": f"b{index}-{n}"})
            counts["done"] += 1
            if counts["done"] == clients:
                wall["end"] = time.perf_counter()
                all_done.set()
            await all_done.wait()  # nobody disconnects (and stops a server) while others still run

    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(run, index)
        await all_connected.wait()
        cpu0, wall["start"] = time.process_time(), time.perf_counter()
        go.set()
        await all_done.wait()
        cpu = time.process_time() - cpu0
    seconds = wall["end"] - wall["start"]
    return {
        "elicitations": per_client * clients,
        "wall_s": round(seconds, 2),
        "wall_ms_per_elicitation": round(seconds * 1000 / (per_client * clients), 3),
        "client_cpu_ms_per_elicitation": round(cpu * 1000 / (per_client * clients), 3),
        "sequential_latency_s_p50": statistics.median(sequential),
        "sequential_latency_ms_p50": round(statistics.median(sequential) * 1000, 1),
    }


# --- b. Bot API calls per elicitation, by form kind ------------------------------------------------------

KINDS: Final = {
    "single_choice": flows.pick,
    "three_field_form": flows.form3,
    "url_consent": flows.consent,
    "six_field_form_chat": flows.form6,
}


async def calls_per_kind(per_kind: int, protocol: str, people: int = 4) -> dict[str, Any]:
    """Bot API calls (by method), taps and bot CPU per completed elicitation, for each form kind; the six-field
    form both in the chat and on the Mini App page (the bot has a `[web]` endpoint for it)."""
    out: dict[str, Any] = {"protocol": protocol, "per_kind": per_kind}
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        log = Path(tmp) / "b.jsonl"
        server = stdio_server_entry(log, protocol)
        async with BenchFake() as fake, bot_process(fake, server, web_port=port) as bot:
            persons = _users(fake, people)
            await _each(persons, lambda u: flows.hello(fake, u, f"w{u.id}"))
            kinds: dict[str, Callable[..., Awaitable[flows.Answered]]] = {
                "plain_call_no_question": _plain,
                **KINDS,
                "six_field_form_page": functools.partial(flows.form6_page, port=port),
            }
            for kind, flow in kinds.items():
                await flow(fake, persons[0], f"warm-{kind}")  # first use of each code path is not measured
                progress(f"b. calls per kind ({protocol}): {per_kind} × {kind}")
                before, cpu0 = fake.call_counts(), bot.cpu()
                answered: list[flows.Answered] = []

                async def run(
                    user: FakeUser, kind: str = kind, flow: Any = flow, sink: list[Any] = answered
                ) -> None:
                    for n in range(per_kind // len(persons)):
                        sink.append(await flow(fake, user, f"{_initials(kind)}{user.id}-{n}"))

                await _each(persons, run)
                n = len(answered)
                calls = fake.call_counts() - before
                out[kind] = {
                    "completed": n,
                    "bot_api_calls": _per(calls, n),
                    "rate_limited_calls": round(
                        (calls["sendMessage"] + calls["editMessageText"] + calls["deleteMessage"]) / n, 2
                    ),
                    "messages": {
                        "sends": round(calls["sendMessage"] / n, 2),
                        "edits": round(calls["editMessageText"] / n, 2),
                        "total": round((calls["sendMessage"] + calls["editMessageText"]) / n, 2),
                    },
                    "submit_to_result_ms": _submit_to_result_ms(answered),
                    "taps": answered[0].taps if answered and kind != "plain_call_no_question" else 0,
                    "typed_replies": answered[0].typed if answered else 0,
                    "bot_cpu_ms": round((bot.cpu() - cpu0) * 1000 / n, 2),
                }
    return out


def _submit_to_result_ms(answered: Sequence[flows.Answered]) -> dict[str, float] | None:
    """From the Submit tap's answer to the result in the chat (p50, p99, max), where the flow records it."""
    delays = [a.finished - a.submitted for a in answered if a.submitted is not None]
    if not delays:
        return None
    return {
        "p50": round(percentile(delays, 50) * 1000, 1),
        "p99": round(percentile(delays, 99) * 1000, 1),
        "max": round(max(delays) * 1000, 1),
    }


def _status_messages(fake: BenchFake, people: Sequence[FakeUser]) -> dict[str, int]:
    """The calls that showed a status message ("⏳ Running"), before their card or after it was answered."""
    out = {"before_card": 0, "after_card": 0}
    for user in people:
        kinds = [
            "status" if m.history[0].text.startswith("⏳") else "card" if "asks" in m.text else "other"
            for m in fake.messages(user.id, from_bot=True)
        ]
        if "status" in kinds:
            before = "card" not in kinds or kinds.index("status") < kinds.index("card")
            out["before_card" if before else "after_card"] += 1
    return out


def _initials(kind: str) -> str:
    """A short tag prefix, distinct for every kind ("six_field_form_page" -> "sffp")."""
    return "".join(word[0] for word in kind.split("_"))


async def _plain(fake: BenchFake, user: FakeUser, tag: str) -> flows.Answered:
    started = time.monotonic()
    await flows.hello(fake, user, tag)
    return flows.Answered(tag, started, started, time.monotonic(), taps=0, typed=0)


# --- c. many people with a prompt pending at once ---------------------------------------------------------


async def pending_users(
    users: int, protocol: str = "legacy", *, profile: Path | None = None, memory: Path | None = None
) -> dict[str, Any]:
    """`users` people, each with their own MCP session (streamable HTTP) and one prompt pending at once."""
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        async with (
            http_server(Path(tmp)) as server,
            BenchFake() as fake,
            bot_process(
                fake,
                http_server_entry(server.url, protocol),
                max_open=users + 100,
                profile=profile,
                memory=memory,
            ) as bot,
        ):
            people = _users(fake, users)
            rss_start = bot.memory()["VmRSS"]
            progress(f"c. pending: {users} people open their MCP sessions (HTTP, {protocol})")
            t0, cpu0 = time.perf_counter(), bot.cpu()
            await _each(people, lambda u: flows.hello(fake, u, f"h{u.id}"), limit=100)
            sessions_s, sessions_cpu = time.perf_counter() - t0, bot.cpu() - cpu0
            rss_sessions = bot.memory()["VmRSS"]
            progress(f"c. pending: {users} prompts at once")
            cards: dict[int, tuple[float, Any]] = {}
            # Whose call ended before it asked (a broken connection): counted, not waited for.
            failed: dict[int, str] = {}
            # Whose call ended after the answer without its result (its connection broke): counted, as those.
            lost: dict[int, str] = {}
            all_shown, answer_now = anyio.Event(), anyio.Event()
            if profile is not None or memory is not None:
                bot.profile(True)
            t1, cpu1 = time.perf_counter(), _cpus(bot.pid, server.process.pid)
            calls_before = fake.call_counts()
            rows_before = audit_rows(bot.database)

            async def ask(user: FakeUser) -> None:
                try:
                    started, card = await flows.start_pick(fake, user, f"c{user.id}")
                    cards[user.id] = (started, card)
                except flows.CallFailed as ended:
                    failed[user.id] = str(ended)
                if len(cards) + len(failed) == users:
                    all_shown.set()
                if user.id in failed:
                    return
                await answer_now.wait()
                try:
                    await flows.finish_pick(fake, user, f"c{user.id}", _choice(user), started, card)
                except flows.AnswerLost as ended:
                    lost[user.id] = str(ended)

            async with anyio.create_task_group() as tg:
                for user in people:
                    tg.start_soon(ask, user)
                await all_shown.wait()
                shown_s = time.perf_counter() - t1
                shown_cpu = [b - a for a, b in zip(cpu1, _cpus(bot.pid, server.process.pid), strict=True)]
                shown_calls = fake.call_counts() - calls_before
                rss = bot.memory()
                kept_at_once = kept_rows(bot.database)
                if memory is not None:
                    bot.profile(False)
                pending_now = len(cards)
                if not pending_now:
                    raise RuntimeError(f"c: every call ended before it asked: {set(failed.values())}")
                progress(f"c. pending: all {pending_now} cards shown; everyone answers")
                t2, cpu2 = time.perf_counter(), bot.cpu()
                answer_now.set()
            answered_s, answered_cpu = time.perf_counter() - t2, bot.cpu() - cpu2
            rows_written = audit_rows(bot.database) - rows_before
            heard = questions_heard(bot.database, {u.id for u in people})
            if profile is not None:
                bot.profile(False)
            peak = bot.memory()["VmHWM"]
        records = server.read_log()
    expected = {f"c{u.id}": {"colour": _choice(u)} for u in people if u.id not in failed and u.id not in lost}
    mine = [r for r in records if r["tag"] in expected]
    delays, to_bot, to_card = [], [], []
    for record in mine:
        user_id = int(record["tag"][1:])
        _, card = cards[user_id]
        arrived = fake.arrived[(card.chat_id, card.message_id)]
        delays.append(arrived - record["asked_at"])
        if user_id in heard:  # the bot's wall clock, on this machine's monotonic one
            to_bot.append(heard[user_id] - record["asked_at"])
            to_card.append(arrived - heard[user_id])
    per_row = await store_cost_per_row()
    per_kept = await kept_question_cost(protocol)
    per_prompt = await store_cost_per_prompt(protocol)
    return {
        "protocol": protocol,
        "transport": "streamable HTTP, one MCP session per person",
        "people": users,
        "pending_at_once": pending_now,
        "calls_failed_before_asking": dict(Counter(text.partition("\n")[2] for text in failed.values())),
        "calls_failed_after_answering": dict(Counter(_how_it_ended(text) for text in lost.values())),
        "answered_correctly": _check_log(records, expected),
        "distinct_server_sessions": len({r["session"] for r in mine}),
        "rss_kb_bot_started": rss_start,
        "rss_kb_sessions_open": rss_sessions,
        "rss_kb_all_pending": rss["VmRSS"],
        "rss_kb_peak": peak,
        "rss_kb_per_session": round((rss_sessions - rss_start) / users, 1),
        "rss_kb_per_pending_prompt": round((rss["VmRSS"] - rss_sessions) / pending_now, 1),
        "request_to_card_ms_p50": round(percentile(delays, 50) * 1000, 1),
        "request_to_card_ms_p99": round(percentile(delays, 99) * 1000, 1),
        "request_to_card_ms_max": round(max(delays, default=float("nan")) * 1000, 1),
        "request_to_bot_ms_p50_p99": _p50_p99_ms(to_bot),
        "bot_to_card_ms_p50_p99": _p50_p99_ms(to_card),
        "open_sessions_s": round(sessions_s, 2),
        "all_cards_shown_s": round(shown_s, 2),
        "all_answered_s": round(answered_s, 2),
        "bot_cpu_ms_per_session_opened": round(sessions_cpu * 1000 / users, 2),
        "bot_cpu_ms_per_prompt_shown": round(shown_cpu[0] * 1000 / pending_now, 2),
        "bot_api_calls_per_prompt_shown": _per(shown_calls, pending_now),
        "bot_cpu_ms_per_prompt_answered": round(answered_cpu * 1000 / pending_now, 2),
        "store_rows_written_per_prompt": round(rows_written / pending_now, 2),
        "store_cpu_ms_per_row": per_row,
        "store_cpu_ms_per_prompt": round(per_row * rows_written / pending_now, 2),
        "store_questions_kept_at_once": kept_at_once,
        "store_keeping_writes_per_prompt": per_kept[0],
        "store_keeping_cpu_ms_per_prompt": per_kept[1],
        "store_all_rows_transactions_per_prompt": per_prompt[0],
        "store_all_rows_cpu_ms_per_prompt": per_prompt[1],
        "cpu_s_while_showing": {
            "bot": round(shown_cpu[0], 2),
            "mcp_server": round(shown_cpu[1], 2),
            "bench_fake_and_people": round(shown_cpu[2], 2),
            "wall": round(shown_s, 2),
        },
    }


def _how_it_ended(text: str) -> str:
    """The reason line of a call's failure message (the line under its "⚠️ b · pick — failed" head)."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if " · pick — " in line), len(lines) - 1)
    return lines[head + 1] if head + 1 < len(lines) else lines[head]


def questions_heard(database: Path | None, users: set[int]) -> dict[int, float]:
    """When (this process's `time.monotonic`) the bot recorded each person's latest question as shown: its audit
    row's time, written once the bot has the server's question and before it sends the card. The audit log keeps
    UTC wall time; both clocks are this machine's, so their difference now converts one into the other."""
    if database is None or not database.exists():
        return {}
    offset = time.time() - time.monotonic()
    with contextlib.closing(sqlite3.connect(database)) as db:
        rows = db.execute(
            "select user_id, at from audit where event = 'question_shown' order by seq"
        ).fetchall()
    return {
        int(user): dt.datetime.fromisoformat(at).timestamp() - offset for user, at in rows if user in users
    }


def _p50_p99_ms(values: list[float]) -> list[float] | None:
    if not values:
        return None
    return [round(percentile(values, 50) * 1000, 1), round(percentile(values, 99) * 1000, 1)]


def audit_rows(database: Path | None) -> int:
    """Rows in the bot's audit log now (read beside the running bot; SQLite readers never block it)."""
    if database is None or not database.exists():
        return 0
    with contextlib.closing(sqlite3.connect(database)) as db:
        return int(db.execute("select count(*) from audit").fetchone()[0])


def kept_rows(database: Path | None) -> int:
    """Open questions the bot keeps now (`rounds` rows: what a restart would take back up)."""
    if database is None or not database.exists():
        return 0
    with contextlib.closing(sqlite3.connect(database)) as db:
        return int(db.execute("select count(*) from rounds").fetchone()[0])


def _bench_question(i: int, era: Era) -> KeptQuestion:
    """Person i's one-choice question as the bot keeps it (a legacy question has no request state)."""
    from bot.core import Era, KeptQuestion, Origin

    user = FIRST_USER_ID + i
    params = {"mode": "form", "message": "Pick a colour", "requestedSchema": {"type": "object"}}
    return KeptQuestion(
        id=f"elc-bench-{i}",
        round_id=f"r{i}",
        input_key="pick",
        era=era,
        server="bench",
        tool="pick",
        arguments={"tag": f"c{i}"},
        origin=Origin(user, user),
        token=f"t{i}",
        deadline=time.time() + 600,
        input_requests={"pick": {"method": "elicitation/create", "params": params}},
        request_state=None if era is Era.LEGACY else "v1." + "x" * 200,
    )


async def kept_question_cost(protocol: str, questions: int = 300) -> tuple[int, float]:
    """Writes per question, and CPU ms (all threads) of them, for keeping one open question in a SQLite store
    through its life as the bot keeps it (`bot.servers.keeper`): saved, its card placed, then answered and closed
    (2026-07-28: the answer is recorded first, until the round went back), measured in this process."""
    from bot.config import Secret, StorageConfig
    from bot.core import Era
    from bot.store import open_store

    era = Era.LEGACY if protocol == "legacy" else Era.MODERN
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-store-") as tmp:
        async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp}/bench.db"))) as store:
            book = store.rounds

            def question(i: int) -> KeptQuestion:
                return _bench_question(i, era)

            await book.keep(question(-1))  # warm: connection, statement cache
            await book.close("elc-bench--1")
            before, cpu = book.rows_written, time.process_time()
            for i in range(questions):
                kept = question(i)
                await book.keep(kept)
                await book.placed(kept.id, kept.origin.chat_id, 1000 + i)
                if era is Era.MODERN:
                    await book.answered(kept.id, {"action": "accept", "content": {"colour": "red"}})
                await book.close(kept.id)
            spent = time.process_time() - cpu
            writes = (book.rows_written - before) / questions + 1  # + the close
            return round(writes), round(spent * 1000 / questions, 3)


async def store_cost_per_prompt(protocol: str, prompts: int = 400, at_once: int = 100) -> tuple[float, float]:
    """Transactions per prompt, and CPU ms (all threads) per prompt, of every store write one prompt makes, as
    the bot makes them, with `at_once` prompts in flight (under load), on a fresh SQLite store in this process:
    the call's row; the question's row and its kept copy (together, before the card); where its card stands;
    the answer's row and the kept question closed (2026-07-28: its answer kept, then the round closed); the
    call's end."""
    from bot.config import Secret, StorageConfig
    from bot.core import Era
    from bot.store import AuditEvent, open_store

    era = Era.LEGACY if protocol == "legacy" else Era.MODERN
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-store-") as tmp:
        async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp}/bench.db"))) as store:
            log, book = store.audit, store.rounds

            async def one(i: int) -> None:
                user = FIRST_USER_ID + i
                who: dict[str, Any] = {"user_id": user, "chat_id": user, "server": "bench", "tool": "pick"}
                await log.append(
                    AuditEvent.CALL_STARTED, **who, detail={"arguments": {"content": {"tag": i}}}
                )
                kept = _bench_question(i, era)
                shown = {"kind": "input", "message": "Pick a colour", "schema_sha256": "0" * 64}
                async with anyio.create_task_group() as tg:
                    tg.start_soon(
                        functools.partial(log.append, AuditEvent.QUESTION_SHOWN, **who, detail=shown)
                    )
                    tg.start_soon(book.keep, kept)
                await book.placed(kept.id, user, 1000 + i)
                answer = {"action": "accept", "content": {"colour": "red"}}
                async with anyio.create_task_group() as tg:
                    ended = {"outcome": "answered", "action": "accept", "content": {"colour": "red"}}
                    tg.start_soon(functools.partial(log.append, AuditEvent.ANSWERED, **who, detail=ended))
                    if era is Era.LEGACY:
                        tg.start_soon(book.close, kept.id)
                    else:
                        tg.start_soon(book.answered, kept.id, answer)
                if era is Era.MODERN:
                    await book.close(kept.id)
                await log.append(AuditEvent.CALL_ENDED, **who, detail={"status": "ok", "text": "red"})

            await one(-1)  # warm: connections, statement caches
            before, cpu = store.audit.writer.transactions, time.process_time()
            limit = anyio.Semaphore(at_once)

            async def limited(i: int) -> None:
                async with limit:
                    await one(i)

            async with anyio.create_task_group() as tg:
                for i in range(prompts):
                    tg.start_soon(limited, i)
            spent = time.process_time() - cpu
            return round((store.audit.writer.transactions - before) / prompts, 2), round(
                spent * 1000 / prompts, 3
            )


async def store_cost_per_row(rows: int = 300) -> float:
    """CPU ms (all threads: aiosqlite writes in its own) of appending one audit row to a SQLite store, as the
    bot does for each event of a prompt, measured in this process on a fresh database."""
    from bot.config import Secret, StorageConfig
    from bot.store import AuditEvent, open_store

    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-store-") as tmp:
        async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp}/bench.db"))) as store:
            await store.audit.append(AuditEvent.CALL_STARTED)  # warm: connection, statement cache
            cpu = time.process_time()
            for i in range(rows):
                await store.audit.append(
                    AuditEvent.QUESTION_SHOWN,
                    user_id=FIRST_USER_ID + i,
                    chat_id=FIRST_USER_ID + i,
                    server="bench",
                    tool="pick",
                    request_id=f"elc-bench-{i}",
                    detail={"kind": "input", "message": "Pick a colour", "schema_sha256": "0" * 64},
                )
            return round((time.process_time() - cpu) * 1000 / rows, 3)


# --- d. flood ---------------------------------------------------------------------------------------------


async def flood(prompts: int, protocol: str = "legacy", within_s: float = 1.0) -> dict[str, Any]:
    """`prompts` people each start a call within `within_s`, against a fake enforcing 30 messages/s."""
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp:
        async with (
            http_server(Path(tmp)) as server,
            rate_limited_fake() as fake,
            bot_process(
                fake, http_server_entry(server.url, protocol), unthrottled=False, max_open=prompts + 100
            ) as bot,
        ):
            people = _users(fake, prompts)
            progress(f"d. flood: {prompts} prompts within {within_s:g} s, fake limited to 30 messages/s")
            before = fake.call_counts()
            answered: list[flows.Answered] = []
            load_before = os.getloadavg()[0]
            cpu0 = _cpus(bot.pid, server.process.pid)
            t0 = time.monotonic()

            async def one(user: FakeUser) -> None:
                await anyio.sleep(within_s * (user.id - FIRST_USER_ID) / prompts)
                answered.append(await flows.pick(fake, user, f"f{user.id}", _choice(user)))

            await _each(people, one)
            total_s = time.monotonic() - t0
            cpu = [b - a for a, b in zip(cpu0, _cpus(bot.pid, server.process.pid), strict=True)]
            load_after = os.getloadavg()[0]
            calls = fake.call_counts() - before
            statuses = _status_messages(fake, people)
        records = server.read_log()
    expected = {f"f{u.id}": {"colour": _choice(u)} for u in people}
    last_card = max(a.card_at for a in answered) - t0
    asked = {r["tag"]: r["asked_at"] for r in records if r["tag"] in expected}
    to_card = [a.card_at - asked[a.tag] for a in answered if a.tag in asked]
    too_many = [e for e in fake.errors if e.status == 429]
    refused = Counter(e.method for e in too_many)
    messages = sum(calls[m] - refused[m] for m in ("sendMessage", "editMessageText"))
    cards_theory, messages_theory = prompts / 30, messages / 30
    return {
        "protocol": protocol,
        "prompts": prompts,
        "started_within_s": within_s,
        "cards_delivered": len(answered),
        "answers_reached_server": _check_log(records, expected),
        "all_cards_delivered_s": round(last_card, 2),
        "theoretical_min_cards_s": round(cards_theory, 2),
        "cards_over_theory": round(last_card / cards_theory, 2),
        "messages_accepted": messages,
        "messages_per_prompt": round(messages / prompts, 2),
        "theoretical_min_all_messages_s": round(messages_theory, 2),
        "everything_answered_s": round(total_s, 2),
        "everything_over_theory": round(total_s / messages_theory, 2),
        "submit_to_result_ms": _submit_to_result_ms(answered),
        "status_messages": statuses,
        "first_question_asked_s": round(min(asked.values(), default=t0) - t0, 2),
        "last_question_asked_s": round(max(asked.values(), default=t0) - t0, 2),
        "question_to_card_ms_p50": round(percentile(to_card, 50) * 1000, 1),
        "question_to_card_ms_max": round(max(to_card, default=float("nan")) * 1000, 1),
        "fake_429s": len(too_many),
        "other_errors": len([e for e in fake.errors if e.status != 429]),
        "cpu_s": {
            "bot": round(cpu[0], 2),
            "mcp_server": round(cpu[1], 2),
            "bench_fake_and_people": round(cpu[2], 2),
        },
        "load_average_1min": {"before": round(load_before, 2), "after": round(load_after, 2)},
    }

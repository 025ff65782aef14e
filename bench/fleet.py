"""f. A fleet (issue 32): 2 bot processes on one PostgreSQL in webhook mode behind a round-robin proxy, the
300-prompt flood against a fake enforcing 30 messages/s; then the same with one instance SIGKILLed half-way.

I/O: starts PostgreSQL (the distribution's binaries, as the tests do), the bench MCP server, the bots and the
proxy (`tests.fleet.proxy`), and drives scripted people. The fake delivers updates as Telegram does to a webhook:
up to 40 at once, each again until answered 2xx. Figures only: nothing here is a goal checked.

A person is the single-choice flow of bench d, with what a person does when the chat does not move: a tap
answered with an alert ("This prompt has expired": it landed on an instance that does not hold the question) or
not answered is tapped again after a pause (`RETAP_S`). Those taps are counted (`taps_refused`): with the fleet's
partition ownership there are none. In the run with a kill, every `HOLD_BACK`-th person taps Submit only once
the kill happened, so that some of the killed instance's people still have a tap to make then. After the kill,
"its people" are the unfinished people of the partitions it owned (read from `fleet_partitions` before the kill
and after the run: those whose owner changed); the takeover time of each is from the kill to the first card or
result (a sendMessage or editMessageText to their chat that the fake accepted) the survivor sent them. Whoever
has not finished `takeover_wait_s` after the kill (or `TIMEOUT_S` after a step) is lost. Duplicates are results
shown twice in a chat (two messages with it; a result edited onto the same card again is not seen twice).

The flood starts once the instances have split the people between them (each `/healthz` says it owns its share
of the partitions, up to `BALANCE_S`), as in a fleet that has been running: an instance gives back only partitions
with nothing live in them, so a flood that starts within its first heartbeat would leave one instance owning
nearly everyone until their questions end.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import httpx
from port_for import select_random
from pytest_postgresql.executors.proc import PostgreSQLExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from sqlalchemy import select

from bench.flows import SUBMIT, TIMEOUT_S, _card_for, _content, _result_for
from bench.scene import (
    BenchFake,
    BotProcess,
    bot_process,
    http_server,
    http_server_entry,
    write_config,
)
from bench.server import CHOICES
from bot.store import open_engine
from bot.store.fleet import partition_of
from bot.store.tables import fleet_partitions
from tests.fakes.telegram import FakeUser, Msg, RateLimits, ScriptError
from tests.fleet.proxy import RoundRobinProxy, round_robin_proxy
from tests.ports import free_port

__all__ = ["fleet_flood", "postgresql_database"]

SECRET: Final = "bench-fleet-secret"
RETAP_S: Final = (0.25, 0.75)
"""A person taps again this long (seconds, at random between) after a tap that was refused or not answered: at a
fixed pause, people retapping in step would each land on the same instance of the round robin every time."""
CONNECTIONS: Final = 40
"""Telegram's default `max_connections` for a webhook: deliveries at once."""
FIRST_USER_ID: Final = 200_000
HOLD_BACK: Final = 5
"""With a kill: every 5th person taps Submit only after it (a tap left to make at the kill)."""
BALANCE_S: Final = 30.0
"""How long the instances are given to split the partitions before the flood starts (then it starts anyway)."""
PG_CTL: Final = Path(__file__).resolve().parent.parent / "tests" / "store" / "pg_ctl.sh"


def _progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (nearest rank); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5))) - 1]


async def _owners(url: str) -> dict[int, str | None]:
    """Each partition's owner now (`fleet_partitions`)."""
    engine = await open_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(fleet_partitions.c.partition, fleet_partitions.c.owner))).all()
    finally:
        await engine.dispose()
    return {row.partition: row.owner for row in rows}


def _first_after_kill(fake: BenchFake, killed_at: float | None, chats: set[int]) -> dict[int, float]:
    """Seconds from the kill to the first card or result (a send or an edit the fake accepted) in each of
    `chats` after it: the survivor's, the killed instance being gone."""
    if killed_at is None:
        return {}
    refused = {id(e.params) for e in fake.errors}
    firsts: dict[int, float] = {}
    for (method, params), at in zip(fake.calls, fake.call_times, strict=True):
        if at < killed_at or method not in ("sendMessage", "editMessageText") or id(params) in refused:
            continue
        chat = params.get("chat_id")
        if isinstance(chat, int) and chat in chats and chat not in firsts:
            firsts[chat] = at - killed_at
    return firsts


def most_in_a_second(stamps: list[float]) -> int:
    """The most of `stamps` (seconds) within any window of one second."""
    ordered, most, start = sorted(stamps), 0, 0
    for end, t in enumerate(ordered):
        while t - ordered[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


@contextmanager
def postgresql_database() -> Iterator[str]:
    """A PostgreSQL server of its own for the bench (as tests/conftest.py starts one), and a fresh database on it."""
    base = Path(tempfile.mkdtemp(prefix="toolnexus-bench-pg-"))
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root: pg_ctl.sh runs it as `postgres`
        owner = pwd.getpwnam("postgres")
        os.chown(base, owner.pw_uid, owner.pw_gid)
    base.chmod(0o755)
    executor = PostgreSQLExecutor(
        executable=str(PG_CTL),
        host="127.0.0.1",
        port=select_random(),
        datadir=str(base / "data"),
        unixsocketdir=str(base),
        logfile=str(base / "log"),
        startparams="-w",
        dbname="bench",
    )
    try:
        with executor:
            name = "f_" + uuid.uuid4().hex[:12]
            with DatabaseJanitor(user=executor.user, host=executor.host, port=executor.port, dbname=name):
                yield f"postgresql://{executor.user}@{executor.host}:{executor.port}/{name}"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class _Person:
    user: FakeUser
    tag: str
    choice: str
    scope: anyio.CancelScope
    finished: float | None = None
    wrong: bool = False
    taps_refused: int = 0
    taps_unanswered: int = 0
    holds_back: bool = False
    """Taps Submit only once the kill happened."""


@dataclass
class _Run:
    fake: BenchFake
    proxy: RoundRobinProxy
    killed_at: float | None = None
    killed: anyio.Event = field(default_factory=anyio.Event)


async def _tap(run: _Run, person: _Person, label: str, then: Callable[[Msg], bool]) -> None:
    """Tap `label` on the person's newest card offering it, again after a pause (`RETAP_S`) until the tap is
    taken, or until the chat shows what follows it (`then`: a tap whose answer came too late was taken)."""
    while True:
        card: Msg = await run.fake.until(
            person.user.id, lambda m: (_card_for(person.tag)(m) and label in m.buttons) or then(m), TIMEOUT_S
        )
        if then(card):
            return
        try:
            answer = await person.user.press(card, label, timeout=TIMEOUT_S / 4)
        except TimeoutError:
            person.taps_unanswered += 1
        except ScriptError:  # the card changed under the tap (re-placed, or answered meanwhile): look again
            continue
        else:
            if not answer.show_alert:
                return
            person.taps_refused += 1
        await anyio.sleep(random.uniform(*RETAP_S))


async def _one(run: _Run, person: _Person, delay: float) -> None:
    """One person's flow; one that does not finish (a step timed out, or its deadline passed) is lost."""
    with person.scope:
        await anyio.sleep(delay)
        try:
            await person.user.send(f"/call b pick tag={person.tag}")
            await _tap(run, person, person.choice, lambda m: _card_for(person.tag)(m) and SUBMIT in m.buttons)
            if person.holds_back:
                await run.killed.wait()
                await anyio.sleep(random.uniform(*RETAP_S))  # people notice at different moments
            await _tap(run, person, SUBMIT, _result_for(person.tag))
            result = await run.fake.until(person.user.id, _result_for(person.tag), TIMEOUT_S)
        except TimeoutError:
            return
        expected = {"tag": person.tag, "action": "accept", "content": {"colour": person.choice}}
        person.wrong = _content(result) != expected
        person.finished = time.monotonic()


@asynccontextmanager
async def _fleet(
    tmp: Path, fake: BenchFake, server_url: str, protocol: str, store_url: str, instances: int, prompts: int
) -> AsyncIterator[tuple[RoundRobinProxy, list[BotProcess]]]:
    """The bots (one config, each its own web port) behind the proxy, the fake delivering to it."""
    ports = [free_port() for _ in range(instances)]
    async with AsyncExitStack() as stack:
        proxy = await stack.enter_async_context(round_robin_proxy([f"http://127.0.0.1:{p}" for p in ports]))
        bots = []
        for port in ports:
            config = tmp / f"fleet-{port}.toml"
            write_config(
                config,
                fake,
                http_server_entry(server_url, protocol),
                max_open=prompts + 100,
                web_port=port,
                webhook_secret=SECRET,
                storage_url=store_url,
            )
            bots.append(
                await stack.enter_async_context(
                    bot_process(
                        fake,
                        {},
                        unthrottled=False,
                        config_text=config.read_text(),
                        started_by="setWebhook",
                        start_s=120,  # migrations on PostgreSQL, on a loaded machine
                    )
                )
            )
        fake.deliver_via_webhook(
            f"{proxy.url}/telegram", secret_token=SECRET, retry=True, connections=CONNECTIONS
        )
        await _balanced(ports)
        yield proxy, bots


async def _balanced(ports: list[int]) -> None:
    """Wait (up to `BALANCE_S`) until every instance owns its share of the partitions (less one)."""
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        with anyio.move_on_after(BALANCE_S):
            while True:
                said = [(await client.get(f"http://127.0.0.1:{port}/healthz")).json() for port in ports]
                share = -(-said[0]["partitions"]["of"] // len(ports))
                if all(body["partitions"]["owned"] >= share - 1 for body in said):
                    return
                # A heartbeat is a second: polling /healthz is what a deploy script does.
                await anyio.sleep(0.2)


async def fleet_flood(
    prompts: int,
    *,
    kill: bool = False,
    instances: int = 2,
    protocol: str = "2026-07-28",
    within_s: float = 1.0,
    takeover_wait_s: float = 30.0,
    store_url: str | None = None,
) -> dict[str, Any]:
    """`prompts` people each start a call within `within_s` through the fleet; with `kill`, instance 0 is
    SIGKILLed once half of them have their result. `store_url`: an empty PostgreSQL database (else one is
    started for the run)."""
    with (
        tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as tmp,
        nullcontext(store_url) if store_url else postgresql_database() as url,
    ):
        assert url is not None
        async with (
            http_server(Path(tmp)) as server,
            BenchFake(rate_limit=RateLimits()) as fake,
            _fleet(Path(tmp), fake, server.url, protocol, url, instances, prompts) as (proxy, bots),
        ):
            run = _Run(fake, proxy)
            people = [
                _Person(
                    fake.user(id=FIRST_USER_ID + i, first_name=f"F{i}"),
                    f"f{i}",
                    CHOICES[i % len(CHOICES)],
                    anyio.CancelScope(deadline=anyio.current_time() + 20 * TIMEOUT_S),
                    holds_back=kill and i % HOLD_BACK == 0,
                )
                for i in range(prompts)
            ]
            what = "killing instance 0 half-way" if kill else "no kill"
            _progress(f"f. fleet: {instances} instances, {prompts} prompts within {within_s:g} s, {what}")
            before = fake.call_counts()
            t0 = time.monotonic()
            its_people: list[_Person] = []

            unfinished: list[_Person] = []
            owners_before: dict[int, str | None] = {}

            async def killer() -> None:
                while sum(p.finished is not None for p in people) < prompts // 2:
                    await fake.next_change()
                owners_before.update(await _owners(url))
                bots[0].process.kill()
                run.killed_at = time.monotonic()
                run.killed.set()
                await bots[0].process.wait()
                for person in people:
                    if person.finished is None:
                        unfinished.append(person)
                        person.scope.deadline = min(
                            person.scope.deadline, anyio.current_time() + takeover_wait_s
                        )

            async def everyone() -> None:
                async with anyio.create_task_group() as each:
                    for i, person in enumerate(people):
                        each.start_soon(_one, run, person, within_s * i / prompts)

            async with anyio.create_task_group() as tg:
                if kill:
                    tg.start_soon(killer)
                await everyone()
                tg.cancel_scope.cancel()
            ended = time.monotonic()
            if kill:  # the killed instance's partitions: their owner changed at the takeover
                owners_after = await _owners(url)
                moved = {n for n, owner in owners_before.items() if owners_after.get(n) != owner}
                its_people += [p for p in unfinished if partition_of(p.user.id) in moved]
            firsts = _first_after_kill(fake, run.killed_at, {p.user.id for p in its_people})
            calls = fake.call_counts() - before
            records = server.read_log()
            sends = list(fake.flood.tried) if fake.flood is not None else []
            too_many = [e for e in fake.errors if e.status == 429]
            other_errors = [e for e in fake.errors if e.status != 429]
            results_shown = Counter(
                p.tag for p in people for m in fake.messages(p.user, from_bot=True) if _result_for(p.tag)(m)
            )
            by_instance = Counter(
                d.instance for d in proxy.deliveries if d.kind == "message" and d.status == 200
            )
    refused = Counter(e.method for e in too_many)
    messages = sum(calls[m] - refused[m] for m in ("sendMessage", "editMessageText"))
    finished = [p for p in people if p.finished is not None and not p.wrong]
    # answered with their own choice; `wrong` ones got another answer, `lost` ones none
    seen = Counter(r["tag"] for r in records)
    theory = messages / 30
    last = max((p.finished for p in finished if p.finished is not None), default=ended)
    figures: dict[str, Any] = {
        "protocol": protocol,
        "instances": instances,
        "prompts": prompts,
        "started_within_s": within_s,
        "kill": kill,
        "answered": len(finished),
        "lost": sum(1 for p in people if p.finished is None),
        "wrong": sum(p.wrong for p in people),
        "duplicate_calls_at_server": sum(1 for n in seen.values() if n > 1),
        "duplicate_results_in_chat": sum(1 for n in results_shown.values() if n > 1),
        "most_sends_in_1s": most_in_a_second(sends),
        "fake_429s": len(too_many),
        "other_errors": len(other_errors),
        "other_errors_by_kind": dict(
            Counter(f"{e.method} {e.status} {e.description[:60]}" for e in other_errors).most_common(3)
        ),
        "messages_accepted": messages,
        "everything_answered_s": round(last - t0, 2),
        "theoretical_min_s": round(theory, 2),
        "over_theory": round((last - t0) / theory, 2) if theory else None,
        "taps_refused": sum(p.taps_refused for p in people),
        "taps_unanswered": sum(p.taps_unanswered for p in people),
        "calls_by_instance": {str(k): v for k, v in sorted(by_instance.items())},
    }
    if kill:
        taken = [firsts[p.user.id] for p in its_people if p.user.id in firsts]
        p50, p99 = _percentile(taken, 50), _percentile(taken, 99)
        figures.update(
            killed_at_s=round((run.killed_at or t0) - t0, 2),
            its_people=len(its_people),
            its_people_with_a_tap_left=sum(1 for p in its_people if p.holds_back),
            its_people_taken_over=len(taken),
            sent_again_not_modified=sum(1 for e in other_errors if "not modified" in e.description),
            its_people_lost=sum(1 for p in its_people if p.finished is None),
            takeover_s_p50=None if p50 is None else round(p50, 2),
            takeover_s_p99=None if p99 is None else round(p99, 2),
            takeover_wait_s=takeover_wait_s,
        )
    return figures

"""A hostile MCP server cannot take the bot down: too many questions at once, huge results, and a stop while a
server floods questions or the Bot API hangs. Real MCP servers; the hub over a recording surface, or the whole
bot against the fake Bot API."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from bot.core import CallStatus, Progress
from bot.servers.elicitation import MAX_OPEN_PER_SESSION
from tests.fakes.servers.elicit import build_server
from tests.fakes.surface import ALICE, BOB, make_config, placeholder, running_hub
from tests.telegram.harness import bot_scene, is_result

pytestmark = pytest.mark.anyio

STOPPING = "Cancelled: the bot is stopping"
GO_ON = json.dumps({"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]})
REFUSED = -32600
"""INVALID_REQUEST: what a 2025-11-25 server hears for a question past the cap."""


def in_process(protocol: str) -> Any:
    return running_hub(make_config(placeholder(["t"], protocol=protocol)), in_process={"t": build_server})


async def _collect(into: list[Any], awaitable: Any) -> None:
    into.append(await awaitable)


async def test_past_the_cap_a_2025_server_gets_an_error_per_question_and_the_person_one_line() -> None:
    """2025-11-25, eight questions at once: five cards are shown, the other three are refused with a JSON-RPC
    error, and the person is told once (a flood of refusals is one line)."""
    extra = 3
    async with in_process("legacy") as (hub, _prompts, surface), anyio.create_task_group() as tg:
        results: list[Any] = []
        n = MAX_OPEN_PER_SESSION + extra
        errors: list[str] = []
        all_refused = anyio.Event()

        async def server_heard(progress: Progress) -> None:
            errors.extend([progress.message] if progress.message and "error" in progress.message else [])
            if len(errors) == extra:
                all_refused.set()

        tg.start_soon(
            lambda: _collect(results, hub.call_tool("t", "ask_many", {"n": n}, ALICE, server_heard))
        )
        with anyio.fail_after(10):
            await all_refused.wait()
        await surface.wait_for(lambda: len(surface.shown) == MAX_OPEN_PER_SESSION)
        hub.cancel(ALICE)
    got = json.loads(results[0].text)
    assert sorted(got) == ["cancel"] * MAX_OPEN_PER_SESSION + [f"error {REFUSED}"] * extra
    assert len(surface.shown) == MAX_OPEN_PER_SESSION
    ((origin, server, _message, reason),) = surface.unsupported
    assert origin == ALICE and server == "t" and f"more than {MAX_OPEN_PER_SESSION} questions" in reason


async def test_a_2026_round_with_more_questions_than_the_cap_is_refused_whole() -> None:
    """2026-07-28, one `input_required` result asking six things: nothing is shown, the call fails, and the
    person is told once; a round of exactly the cap is shown whole."""
    async with in_process("2026-07-28") as (hub, _prompts, surface):
        refused = None
        with anyio.move_on_after(10):  # without the cap, six cards would wait for answers
            refused = await hub.call_tool("t", "ask_many", {"n": MAX_OPEN_PER_SESSION + 1}, ALICE)
        assert (
            refused is not None
            and refused.status is CallStatus.FAILED
            and "too many questions" in refused.text
        )
        assert surface.shown == [] and len(surface.unsupported) == 1
        async with anyio.create_task_group() as tg:
            results: list[Any] = []
            tg.start_soon(
                lambda: _collect(results, hub.call_tool("t", "ask_many", {"n": MAX_OPEN_PER_SESSION}, ALICE))
            )
            await surface.wait_for(lambda: len(surface.shown) == MAX_OPEN_PER_SESSION)
            hub.cancel(ALICE)
    assert json.loads(results[0].text) == ["cancel"] * MAX_OPEN_PER_SESSION


async def test_on_a_shared_2026_session_the_cap_counts_each_call_not_everyones_questions() -> None:
    """2026-07-28, one session shared by everyone: Alice's and Bob's calls each ask the cap's worth at once
    and both rounds are shown whole (the other person's questions do not count against a call), while a
    call asking past the cap is still refused whole and only its person is told."""
    config = make_config(placeholder(["t"], protocol="2026-07-28", shared=True))
    async with running_hub(config, in_process={"t": build_server}) as (hub, _prompts, surface):
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            for who in (ALICE, BOB):
                tg.start_soon(
                    _collect, results, hub.call_tool("t", "ask_many", {"n": MAX_OPEN_PER_SESSION}, who)
                )
            await surface.wait_for(lambda: len(surface.shown) == 2 * MAX_OPEN_PER_SESSION)
            refused = None
            with anyio.move_on_after(10):  # without the cap, six more cards would wait for answers
                refused = await hub.call_tool("t", "ask_many", {"n": MAX_OPEN_PER_SESSION + 1}, BOB)
            hub.cancel(ALICE)
            hub.cancel(BOB)
    assert (
        refused is not None and refused.status is CallStatus.FAILED and "too many questions" in refused.text
    )
    assert [json.loads(r.text) for r in results] == [["cancel"] * MAX_OPEN_PER_SESSION] * 2
    assert len(surface.shown) == 2 * MAX_OPEN_PER_SESSION
    assert {p.origin for p in surface.shown} == {ALICE, BOB}
    ((origin, _server, _message, reason),) = surface.unsupported
    assert origin == BOB and f"more than {MAX_OPEN_PER_SESSION} questions" in reason


async def test_a_50_mb_result_is_shown_trimmed_with_a_note_and_others_calls_still_complete() -> None:
    """A tool returns 50 MB of text: its result is at most four messages within Telegram's limits, the last
    saying how much was left out, and another person's call made meanwhile completes too."""
    size = 50_000_000
    async with bot_scene() as s:
        big = await s.alice.send(f"/call t long_text chars={size}")
        small = await s.bob.send("/call t whoami")
        with anyio.fail_after(
            120
        ):  # generous: the server builds and the SDK checks 50 MB; no timing asserted
            mine = await s.fake.wait_for(lambda m: is_result(m, small), timeout=120)
            note = await s.fake.wait_for(lambda m: "output trimmed" in m.text, timeout=120)
        assert json.loads(mine.text.split("\n", 1)[1])["client"] == "toolnexus-bot"
        shown = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > big.message_id]
        assert 1 < len(shown) <= 4 and all(len(m.text) <= 4096 for m in shown)
        assert is_result(shown[0], big) and shown[0].text.splitlines()[1].startswith("00001 ")
        left_out = int(note.text.split("output trimmed: ")[1].split()[0])
        assert size - sum(len(m.text) for m in shown) <= left_out < size


async def test_stop_completes_while_a_server_floods_questions() -> None:
    """SIGTERM while a server sends questions without end: serve() returns within 5 s, the open cards are
    settled as stopping."""
    async with bot_scene(protocol="legacy") as s:
        await s.alice.send("/call t flood_questions")
        await s.fake.wait_for(lambda m: "more than" in m.text and "questions at once" in m.text, timeout=20)
        s.stop.set()
        with anyio.fail_after(5):
            await s.stopped.wait()
        cards = [m for m in s.fake.messages(s.alice, from_bot=True) if "asks:" in m.text]
        assert len(cards) == MAX_OPEN_PER_SESSION
        assert all(STOPPING in m.text and not m.buttons for m in cards)


async def test_stop_completes_while_a_bot_api_call_hangs() -> None:
    """SIGTERM while the Bot API holds a sendMessage unanswered: serve() still returns within 5 s."""
    async with bot_scene() as s:
        s.fake.fail_next("sendMessage", status=500, hang=True)
        await s.alice.send(f"/call t ask_form message=Go? schema_json={GO_ON}")
        await s.fake.wait_for_call("sendMessage", lambda p: "Go?" in str(p.get("text")))
        s.stop.set()
        with anyio.fail_after(5):
            await s.stopped.wait()

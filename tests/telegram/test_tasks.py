"""Tool calls made as tasks (2025-11-25), end to end: the real bot against the fake Bot API and the reference
server-everything (pinned in tests/conformance, installed by `.ci/run`) over stdio."""

from __future__ import annotations

import os

import pytest

from tests.conformance import suite
from tests.fakes.telegram import Msg
from tests.telegram.harness import bot_scene, is_result

pytestmark = pytest.mark.anyio

EVERYTHING = (
    suite.CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)
SERVERS = {"everything": {"command": str(suite.NODE), "args": [str(EVERYTHING), "stdio"]}}


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not EVERYTHING.exists() or not suite.NODE.exists():
        why = f"server-everything not installed; run: {suite.INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def said(m: Msg, text: str) -> bool:
    return any(text in v.text for v in m.history)


async def test_a_research_task_shows_its_stages_asks_its_question_once_and_its_report_arrives() -> None:
    """simulate-research-query (taskSupport "required") runs as a task: its stages show on the call's status
    line, its clarifying question (`input_required`, asked through `tasks/result`) is one card, the person's
    choice reaches the server, and the report carries it."""
    async with bot_scene(servers=SERVERS, timeout_s=60) as s:
        call = await s.alice.send("/call everything simulate-research-query topic=python ambiguous=true")
        card = await s.fake.wait_for(lambda m: "multiple interpretations" in m.text and bool(m.buttons), 20)
        await s.alice.press(card, "Python snake species")
        await s.fake.wait_for(lambda m: m is card and "review" in m.text)
        await s.alice.press(card, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 20)
        assert result.text.startswith("✅")
        assert "Research Report: python (snake)" in result.text
        status = await s.fake.wait_for(lambda m: said(m, "Gathering sources"))
        assert said(status, "Synthesizing findings") or said(status, "Requesting clarification")
        asked = [m for m in s.fake.messages(s.alice) if "multiple interpretations" in m.text]
        assert asked == [card]


async def test_cancel_stops_a_running_task_and_the_result_says_cancelled() -> None:
    """/cancel while the research task works (no question out): the call ends cancelled (the server hears
    `tasks/cancel`: tests/servers/test_tasks.py)."""
    async with bot_scene(servers=SERVERS, timeout_s=60) as s:
        call = await s.alice.send("/call everything simulate-research-query topic=tides")
        await s.fake.wait_for(lambda m: "Gathering sources" in m.text, 20)
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 20)
        assert result.text.startswith("⏹") and "cancelled" in result.text


async def test_a_long_running_operation_shows_its_progress_and_its_result_arrives() -> None:
    """trigger-long-running-operation (no task support: an ordinary call) reports progress on its status line,
    then its result arrives."""
    async with bot_scene(servers=SERVERS, timeout_s=60) as s:
        call = await s.alice.send("/call everything trigger-long-running-operation duration=2 steps=2")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 20)
        assert "Long running operation completed. Duration: 2 seconds, Steps: 2." in result.text
        status = await s.fake.wait_for(lambda m: said(m, "50%"))
        assert said(status, "Running")

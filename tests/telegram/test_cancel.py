"""/cancel end to end: the real bot against the fake Bot API and a real MCP server that reports what it received,
in both protocol eras (2025-11-25 requests; 2026-07-28 answers carried in the call's next round)."""

from __future__ import annotations

import json

import pytest

from tests.telegram.harness import bot_scene, is_result

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "2026-07-28"]
GO_ON = json.dumps({"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]})


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_answers_the_question_with_cancel_and_the_tools_own_result_is_shown(
    protocol: str,
) -> None:
    """/cancel while a card waits: the server receives `cancel` for its question, as from the Cancel button,
    the card says so, and the tool's own result (what it received) is the call's result."""
    async with bot_scene(protocol=protocol) as s:
        call = await s.alice.send(f"/call t ask_form message=Go? schema_json={GO_ON}")
        card = await s.fake.wait_for(lambda m: "Go?" in m.text and bool(m.buttons))
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert json.loads(result.text.split("\n", 1)[1]) == {"action": "cancel", "content": None}
        assert result.text.startswith("✅")
        assert "Cancelled" in card.text and not card.buttons


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_stops_a_call_with_no_question_pending(protocol: str) -> None:
    """/cancel while a tool just runs (no card): the call is cancelled outright and its result says so."""
    async with bot_scene(protocol=protocol) as s:
        call = await s.alice.send("/call t runs_until_cancelled")
        await s.fake.wait_for(lambda m: "running" in m.text and m.chat_id == s.alice.id)  # its status message
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        assert result.text.startswith("⏹") and "cancelled" in result.text

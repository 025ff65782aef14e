"""A 2026-07-28 result without `resultType` is complete (the spec), through the whole bot.

Real PTB against the fake Bot API; the server is a real stdio process (`tests.fakes.servers.untagged`) that leaves
the tag out of its complete tool results, which the SDK's own wire check refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp_types.methods import validate_server_result
from pydantic import ValidationError

from bot.servers.rounds import untagged_result
from tests.fakes.surface import stdio_server
from tests.telegram.harness import bot_scene, is_result, result_body

REPO = Path(__file__).resolve().parents[2]
UNTAGGED = {"u": stdio_server("tests.fakes.servers.untagged", protocol="2026-07-28", cwd=str(REPO))}


@pytest.mark.anyio
async def test_a_result_without_result_type_is_shown_to_the_person_as_the_tools_result() -> None:
    """A tool answers at once, without `resultType`: the person gets its text as a successful result, not a
    validation error."""
    async with bot_scene(servers=UNTAGGED, in_process={}) as s:
        call = await s.alice.send("/call u greet name=Alice")
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=30)
    assert "✅ u · greet" in result.text, result.text
    assert result_body(result) == "Hello Alice"
    assert "validation error" not in result.text


@pytest.mark.anyio
async def test_a_round_ending_in_a_result_without_result_type_completes_the_call() -> None:
    """A tool asks one question (an input_required round), then answers without `resultType`: once the
    person has answered, the call's result shows the answer."""
    async with bot_scene(servers=UNTAGGED, in_process={}) as s:
        call = await s.alice.send("/call u ask_then_greet name=Alice")
        card = await s.fake.wait_for(lambda m: "Go on?" in m.text and bool(m.buttons), timeout=30)
        await s.alice.press(card, "Yes")
        await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call) and "Hello" in m.text, timeout=30)
    assert "✅ u · ask_then_greet" in result.text, result.text  # folded into the answered card
    assert result_body(result) == "Hello Alice, go on: True"


def _refusal(raw: dict[str, Any]) -> ValidationError:
    """The error the SDK's wire check raises for `raw` as a 2026-07-28 `tools/call` result."""
    with pytest.raises(ValidationError) as info:
        validate_server_result("tools/call", "2026-07-28", raw)
    return info.value


def test_only_a_missing_result_type_is_forgiven_and_the_rest_of_the_result_is_still_checked() -> None:
    """Untagged and otherwise valid: a complete `CallToolResult`. Untagged with a broken content block: the
    SDK's parser still refuses it. Any other error: not this function's business (None)."""
    text = {"type": "text", "text": "hi"}
    result = untagged_result(_refusal({"content": [text]}), "2026-07-28")
    assert isinstance(result, types.CallToolResult)
    assert result.content == [types.TextContent(type="text", text="hi")] and result.result_type == "complete"
    with pytest.raises(ValidationError):
        untagged_result(_refusal({"content": [{"type": "text"}]}), "2026-07-28")
    with pytest.raises(ValidationError) as other:
        types.CallToolResult.model_validate({"content": "hi", "resultType": "complete"})
    assert untagged_result(other.value, "2026-07-28") is None

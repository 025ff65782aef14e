"""Reading MCP tool results into text (bot.servers.results): pure, SDK models in, values out."""

from __future__ import annotations

import mcp_types as types

from bot.core import CallStatus
from bot.servers.results import outcome_of_result


def test_a_long_result_is_read_only_up_to_the_limit_and_says_how_much_was_left_out() -> None:
    """Text blocks are read up to the limit; the rest, across blocks, is counted, not converted."""
    result = types.CallToolResult(
        content=[
            types.TextContent(type="text", text="a" * 30_000),
            types.TextContent(type="text", text="b" * 5_000),
        ]
    )
    outcome = outcome_of_result(result, limit=20_000)
    assert outcome.status is CallStatus.OK
    assert outcome.text == "a" * 20_000 and outcome.omitted == 15_000


def test_a_short_result_is_read_whole() -> None:
    """Below the limit nothing is left out, and blocks are joined by a blank line."""
    result = types.CallToolResult(
        content=[types.TextContent(type="text", text="one"), types.TextContent(type="text", text="two")]
    )
    outcome = outcome_of_result(result, limit=20_000)
    assert outcome.text == "one\n\ntwo" and outcome.omitted == 0


def test_long_structured_content_is_encoded_only_up_to_the_limit() -> None:
    """Structured content without text is shown as JSON, encoded piece by piece and stopped at the limit."""
    result = types.CallToolResult(content=[], structured_content={"rows": list(range(1_000_000))})
    outcome = outcome_of_result(result, limit=1_000)
    assert len(outcome.text) == 1_000 and outcome.text.startswith('{\n  "rows": [\n    0,')
    assert outcome.omitted is None and outcome.structured == {"rows": list(range(1_000_000))}

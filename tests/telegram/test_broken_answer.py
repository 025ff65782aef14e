"""An answer sent, then the connection breaks: the call ends in a failure its person sees below their card, with
Run again, in both protocol eras; never silence. Real PTB against the fake Bot API, a real MCP server over
streamable HTTP behind a proxy that resets the connection carrying the answer."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from bot.telegram import tool_runs
from tests.fakes.servers.dropping import serve_dropping
from tests.fakes.servers.elicit import build_server
from tests.fakes.telegram import Msg
from tests.telegram.harness import Chat, bot_scene, is_result

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "2026-07-28"]
GO_ON = json.dumps({"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]})
ASK = f"/call t ask_form message=Go? schema_json={GO_ON}"
BROKE = "the connection to t broke after your answer; the server may or may not have it"
RUN_AGAIN = "🔁 Run again"


async def answer_yes(s: Chat, call: Msg) -> Msg:
    """Alice answers the Go? card that `call` brought: Yes, then Submit; the card."""
    card = await s.fake.wait_for(
        lambda m: (
            m.chat_id == s.alice.id and m.message_id > call.message_id and "Go?" in m.text and bool(m.buttons)
        )
    )
    await s.alice.press(card, "Yes")
    await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
    await s.alice.press(card, "✅ Submit")
    return card


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_connection_that_breaks_as_the_answer_goes_ends_the_call_with_run_again(
    protocol: str, tmp_path: Path
) -> None:
    """The HTTP connection carrying Alice's answer is reset (2026-07-28: the `tools/call` retry with her
    `inputResponses`; legacy: the JSON-RPC response on the call's session): within seconds she reads, below her
    card, that the connection broke after her answer, with Run again; tapping it runs the call afresh, and that
    run's answer reaches the tool."""
    storage = f"sqlite:///{tmp_path / 'bot.db'}"
    async with (
        serve_dropping(build_server) as dropping,
        bot_scene(
            servers={"t": {"url": dropping.url, "protocol": protocol}}, in_process={}, storage=storage
        ) as s,
    ):
        call = await s.alice.send(ASK)
        card = await answer_yes(s, call)
        with anyio.fail_after(10):
            await dropping.reset.wait()
        broke = await s.fake.wait_for(lambda m: m.chat_id == s.alice.id and BROKE in m.text, timeout=15)
        assert broke.message_id > card.message_id and "Answer sent" in card.text
        assert broke.buttons == [RUN_AGAIN] and broke.text.startswith("⚠️ t · ask_form — failed")

        again = await s.alice.press(broke, RUN_AGAIN)
        assert not again.show_alert
        second = await answer_yes(s, broke)
        assert second is not card
        result = await s.fake.wait_for(lambda m: is_result(m, broke) and "✅" in m.text, timeout=15)
        assert json.loads(result.text.split("t · ask_form\n", 1)[1]) == {
            "action": "accept",
            "content": {"go": True},
        }
        assert dropping.resets == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_result_goes_below_a_card_that_came_after_the_status_message(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose status message went out before its card (the card was slow to come): its result comes
    below the card, where Alice looks, and the status message above is taken away; edited in place above the
    card, a result (a failure, say) would go unseen."""
    monkeypatch.setattr(tool_runs, "STATUS_AFTER_S", 0.0)  # the status goes at once, before the card
    async with bot_scene(protocol=protocol) as s:
        call = await s.alice.send(ASK)
        status = await s.fake.next_message(s.alice, containing="Running")
        card = await answer_yes(s, call)
        assert card.message_id > status.message_id
        result = await s.fake.wait_for(lambda m: is_result(m, call) and '"go": true' in m.text)
        assert result.message_id >= card.message_id
        assert status.deleted or "continued below" in status.text

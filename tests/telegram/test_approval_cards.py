"""Tests for bot/telegram/approval_cards.py: who asks, as the approvers read it (HTML, every name escaped)."""

from __future__ import annotations

from dataclasses import replace

from bot.core import Origin
from bot.core.approvals import ApprovalAsk, ApprovalRecord, ApprovalState, ApprovalStatus
from bot.telegram.approval_cards import approval_screen, reminder_screen, request_line
from tests.fakes.telegram.formatting import parse_html


def ask(agent: str | None) -> ApprovalAsk:
    return ApprovalAsk(
        origin=Origin(chat_id=1001, user_id=1001, agent=agent),
        requester="Alice <3",
        server="prod",
        tool="deploy",
        content={"service": "web"},
        approvers=frozenset({1002, 3003}),
        quorum=2,
        chat=None,
        self_approval=False,
        timeout_s=60.0,
    )


def test_an_agents_request_names_the_agent_escaped_and_a_chat_request_names_none() -> None:
    """The approvers see that an agent, not the person, made the call; markup in a name is text."""
    assert request_line(ask("<i>ci</i>")) == (
        "<b>Alice &lt;3</b> (agent <code>&lt;i&gt;ci&lt;/i&gt;</code>) asks to call <b>deploy</b> on <b>prod</b>"
    )
    assert request_line(ask(None)) == "<b>Alice &lt;3</b> asks to call <b>deploy</b> on <b>prod</b>"


def test_an_answer_given_during_an_agents_call_is_the_persons_and_names_the_agent_by_the_tool() -> None:
    """Gate "answers": Alice answered on her phone; the agent made the call that asked."""
    line = request_line(replace(ask("ci"), question="Which region?"))
    assert line == (
        "<b>Alice &lt;3</b>'s answer to <b>prod</b>'s question (tool <b>deploy</b>, agent <code>ci</code>):\n"
        "<i>Which region?</i>"
    )


def test_an_agents_request_decided_where_its_call_is_gone_says_it_was_not_run() -> None:
    """`gone`: the settled card adds that the agent's call was not run (and only then)."""
    state = ApprovalState("a-1", 1001, frozenset({1002, 3003}), 2, False, "0" * 64, ApprovalStatus.APPROVED)
    gone = approval_screen(ask("ci"), state, lambda u: f"user {u}", gone=True)
    plain = approval_screen(ask("ci"), state, lambda u: f"user {u}")
    assert "The agent that asked is gone; not run" in gone.text
    assert "not run" not in plain.text and gone.keyboard is None


def test_arguments_show_short_values_inline_objects_as_indented_json_and_long_values_folded() -> None:
    """What will be sent, readably: a short value on its line, an object as indented JSON, a long string and a
    many-line one folded in expandable quotes (all of it there), all valid Telegram HTML; the content hash's
    first 8 characters are shown (not the whole hash: nothing was cut)."""
    content = {
        "service": "web",
        "env": {"region": "eu", "replicas": 3},
        "script": "x" * 500,
        "notes": "first <line>\nsecond",
    }
    request = replace(ask(None), content=content)
    state = ApprovalState("a-1", 1001, frozenset({1002, 3003}), 2, False, request.hash)
    text = approval_screen(request, state, lambda u: f"user {u}").text
    assert "• <b>service</b>: <code>web</code>" in text
    assert (
        '• <b>env</b>:\n<pre><code class="language-json">{\n  "region": "eu",\n  "replicas": 3\n}</code></pre>'
        in text
    )
    assert f"• <b>script</b> (500 characters):\n<blockquote expandable>{'x' * 500}</blockquote>" in text
    assert "• <b>notes</b> (2 lines):\n<blockquote expandable>first &lt;line&gt;\nsecond</blockquote>" in text
    assert f"SHA-256 <code>{request.hash[:8]}</code>…" in text and request.hash not in text
    _plain, entities = parse_html(text)
    kinds = [(e["type"], e.get("language")) for e in entities]
    assert ("pre", "json") in kinds and kinds.count(("expandable_blockquote", None)) == 2


def test_content_too_long_for_a_card_is_cut_with_a_warning_and_the_whole_hash() -> None:
    """Past the card's room the content is cut, said so, and the full SHA-256 is shown to compare."""
    request = replace(ask(None), content={f"k{i}": "y" * 90 for i in range(60)})
    state = ApprovalState("a-1", 1001, frozenset({1002, 3003}), 2, False, request.hash)
    text = approval_screen(request, state, lambda u: f"user {u}").text
    assert "Too long to show in full here" in text and f"SHA-256 <code>{request.hash}</code>" in text


def test_a_reminder_lists_each_waiting_request_with_its_short_hash_escaped() -> None:
    """One message for all of an approver's waiting requests: who asks (escaped), tool, server, hash, where."""
    records = [
        ApprovalRecord(
            replace(ask(None), content={"n": i}),
            ApprovalState(f"a-{i}", 1001, frozenset({1002}), 1, False, f"{i:x}" * 64),
            "call",
            1_800_000_000.0,
            "2027-01-15T08:00:00+00:00",
        )
        for i in range(1, 4)
    ]
    text = reminder_screen(records, lambda u: "Alice <3").text
    lines = text.split("\n")
    assert lines[0] == "⏰ <b>Waiting for your approval</b> (3):"
    assert lines[1] == (
        "• Alice &lt;3: <b>deploy</b> on <b>prod</b> · <code>11111111</code> · card above in this chat"
        " · expires 2027-01-15 08:00 UTC"
    )
    assert len(lines) == 4 and "<code>33333333</code>" in lines[3]
    parse_html(text)

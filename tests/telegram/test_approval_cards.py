"""Tests for bot/telegram/approval_cards.py: who asks, as the approvers read it (HTML, every name escaped)."""

from __future__ import annotations

from dataclasses import replace

from bot.core import Origin
from bot.core.approvals import ApprovalAsk, ApprovalState, ApprovalStatus
from bot.telegram.approval_cards import approval_screen, request_line


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

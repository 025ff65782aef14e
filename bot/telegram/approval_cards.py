"""Approval cards as Telegram shows them: (request, tally) -> `Screen`. Builds values, awaits nothing.

A card says who asks, on which server, which tool, and exactly what will be sent, readably: a short value on
its line, an object or a list as indented JSON, a long or many-line value folded (an expandable quote: all of
it is there, one tap away), and the first characters of the content's SHA-256 the approvals are bound to. When
the whole content does not fit a message, the card says so and shows the full SHA-256. (No MCP server sends a
diff of what a call changes today, so there is none to show.) Every server and user string is escaped.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from bot.approvals import AGENT_GONE
from bot.core.approvals import (
    ApprovalAsk,
    ApprovalRecord,
    ApprovalState,
    ApprovalStatus,
    Ballot,
    names,
    short_hash,
)
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.render import LONG_TEXT_CLIP, NAME_CLIP, Screen, callback_button, esc, fit

__all__ = [
    "agent_note",
    "approval_screen",
    "change_screen",
    "decided_line",
    "reminder_screen",
    "request_line",
    "show_value",
]

CONTENT_CHARS: Final = 3000
"""Room for the content on a card (Telegram's 4096 minus the rest); more is never cut silently."""


def show_value(value: Any) -> str:
    """A value as it will be sent: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


INLINE_CHARS: Final = 100
"""A value longer than this (or of several lines) is folded; shorter ones stand on their key's line."""
JSON_LINES: Final = 12
"""An object or list of more lines than this, indented, is folded."""


def _value_line(key: str, value: Any) -> str:
    """One argument, readably (HTML): inline, indented JSON, or folded in an expandable quote."""
    name = f"• <b>{esc(key)}</b>"
    if isinstance(value, dict | list):
        pretty = json.dumps(value, ensure_ascii=False, sort_keys=True, indent=2)
        lines = pretty.count("\n") + 1
        if lines > 1 and lines <= JSON_LINES:
            return f'{name}:\n<pre><code class="language-json">{esc(pretty)}</code></pre>'
        if lines > JSON_LINES:
            return f"{name} ({lines} lines of JSON):\n<blockquote expandable>{esc(pretty)}</blockquote>"
    text = show_value(value)
    if len(text) <= INLINE_CHARS and "\n" not in text:
        return f"{name}: <code>{esc(text)}</code>"
    size = f"{text.count(chr(10)) + 1} lines" if "\n" in text else f"{len(text)} characters"
    return f"{name} ({size}):\n<blockquote expandable>{esc(text)}</blockquote>"


def _content_lines(content: Mapping[str, Any] | None) -> list[str]:
    if not content:
        return ["<i>(no arguments)</i>"]
    lines = [_value_line(str(key), value) for key, value in content.items()]
    if sum(len(line) for line in lines) <= CONTENT_CHARS:
        return lines
    text = json.dumps(dict(content), ensure_ascii=False, sort_keys=True)
    return [
        f"<code>{esc(text[:CONTENT_CHARS])}</code>…",
        "⚠️ <b>Too long to show in full here.</b> Approve only if the SHA-256 below matches what you expect.",
    ]


def _hash_line(content: Mapping[str, Any] | None, digest: str) -> str:
    """The content hash as people compare it: its first characters, or all of it when the content was cut."""
    shown = "\n".join(_content_lines(content))
    if "Too long to show" in shown:
        return f"SHA-256 <code>{digest}</code>"
    return f"SHA-256 <code>{short_hash(digest)}</code>…"


def _time(at: str) -> str:
    return dt.datetime.fromisoformat(at).strftime("%H:%M:%S UTC")


def _clock(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _with_times(ballots: tuple[Ballot, ...]) -> str:
    return names(
        tuple(Ballot(b.user_id, f"{b.name} ({_time(b.at)})", b.vote, b.content_hash, b.at) for b in ballots)
    )


def agent_note(ask: ApprovalAsk) -> str:
    """`(agent <code>ci-bot</code>)` when an agent made the call through the gateway, else nothing (HTML): the
    approvers and the person must know the person did not type it."""
    agent = ask.origin.agent
    return "" if agent is None else f" (agent <code>{esc(agent, NAME_CLIP)}</code>)"


def request_line(ask: ApprovalAsk) -> str:
    """Who asks for what, on which server, and through which agent (HTML)."""
    who = f"<b>{esc(ask.requester, NAME_CLIP)}</b>"
    if ask.question is not None:  # the person answered; the agent made the call that asked
        agent = "" if ask.origin.agent is None else f", agent <code>{esc(ask.origin.agent, NAME_CLIP)}</code>"
        return (
            f"{who}'s answer to <b>{esc(ask.server, NAME_CLIP)}</b>'s question "
            f"(tool <b>{esc(ask.tool, NAME_CLIP)}</b>{agent}):\n<i>{esc(ask.question, LONG_TEXT_CLIP)}</i>"
        )
    return (
        f"{who}{agent_note(ask)} asks to call <b>{esc(ask.tool, NAME_CLIP)}</b> on "
        f"<b>{esc(ask.server, NAME_CLIP)}</b>"
    )


def decided_line(state: ApprovalState) -> str:
    """How a final request ended, with names and times (HTML)."""
    if state.status is ApprovalStatus.APPROVED:
        return f"✅ <b>Approved</b> by {esc(_with_times(state.deciders))}"
    if state.status is ApprovalStatus.REJECTED:
        return f"❌ <b>Rejected</b> by {esc(_with_times(state.deciders))}: nothing was sent"
    if state.status is ApprovalStatus.EXPIRED:
        return "⌛ <b>Expired</b>: not enough approvals in time; nothing was sent"
    return "⏹ <b>Cancelled</b>: nothing was sent"


def approval_screen(
    ask: ApprovalAsk,
    state: ApprovalState,
    name_of: Callable[[int], str],
    deadline: float | None = None,
    *,
    gone: bool = False,
    escalate_at: float | None = None,
    escalated_at: str | None = None,
) -> Screen:
    """The card: the request, exactly what will be sent, who must agree, the count so far, and while pending
    the Approve and Reject buttons. `gone`: an agent's request decided after its call ended (`AGENT_GONE`).
    `escalate_at` (Unix time) and `escalated_at` (ISO time): when more approvers join, or joined."""
    pending = state.status is ApprovalStatus.PENDING
    head = "🔐 <b>Approval needed</b>" if state.open else "🔐 Approval request"
    lines = [head, request_line(ask), "", "<b>Exactly what will be sent:</b>", *_content_lines(ask.content)]
    lines.append(_hash_line(ask.content, state.content_hash))
    lines.append("")
    who = ", ".join(esc(name_of(u), NAME_CLIP) for u in sorted(state.approvers))
    lines.append(f"Needs {state.quorum} of: {who}")
    if escalated_at is not None and ask.escalate_to:
        joined = ", ".join(esc(name_of(u), NAME_CLIP) for u in sorted(ask.escalate_to))
        lines.append(f"⏫ <b>Escalated</b> at {_time(escalated_at)}: {joined} joined")
    if not state.self_approval and state.requester_id in state.approvers:
        lines.append(f"<i>{esc(ask.requester, NAME_CLIP)}'s own approval does not count.</i>")
    counted = state.approvals
    if state.status is ApprovalStatus.CHANGING:
        lines.append(
            f"✏️ <b>{esc(ask.requester, NAME_CLIP)} is changing the answer</b>: approvals so far will not count."
        )
        return Screen(fit(lines))
    if pending:
        if counted:
            lines.append(f"Approved by {esc(names(counted))}, {len(counted)} of {state.quorum}")
        if escalate_at is not None and not escalated_at and ask.escalate_to:
            to = ", ".join(esc(name_of(u), NAME_CLIP) for u in sorted(ask.escalate_to))
            lines.append(f"<i>Escalates to {to} at {_clock(escalate_at)} if not decided.</i>")
        if deadline is not None:
            lines.append(f"<i>Expires {_clock(deadline)} if not decided.</i>")
        data = [Button(Kind.APPROVAL, state.id, state.generation, a).pack() for a in (Action.YES, Action.NO)]
        keyboard = [[callback_button("✅ Approve", data[0]), callback_button("❌ Reject", data[1])]]
        return Screen(fit(lines), keyboard)
    lines.append(decided_line(state))
    if state.status is ApprovalStatus.EXPIRED:
        lines.append("Asked: " + ", ".join(esc(name_of(u), NAME_CLIP) for u in sorted(state.approvers)))
        silent = ", ".join(esc(name_of(u), NAME_CLIP) for u in state.unanswered)
        lines.append(f"No answer from: {silent}" if silent else "Everyone asked answered.")
    if gone:
        lines.append(f"⚠️ <b>{esc(AGENT_GONE.capitalize())}</b>.")
    return Screen(fit(lines))


def change_screen(ask: ApprovalAsk, state: ApprovalState) -> Screen:
    """The requester's notice while their answer waits (gate "answers"): a way to change it."""
    if not state.open:
        return Screen(
            f"🔐 Your answer to <b>{esc(ask.server, NAME_CLIP)}</b>'s question{agent_note(ask)}: "
            + decided_line(state)
        )
    data = Button(Kind.APPROVAL, state.id, state.generation, Action.EDIT).pack()
    return Screen(
        f"⏳ Your answer to <b>{esc(ask.server, NAME_CLIP)}</b>'s question{agent_note(ask)} waits for "
        f"{state.quorum} approval(s).",
        [[callback_button("✏️ Change answer", data)]],
    )


def reminder_screen(records: Sequence[ApprovalRecord], name_of: Callable[[int], str]) -> Screen:
    """One approver's reminder: the pending requests waiting for their vote, each with who asks, the short
    content hash, where its card is and when it expires (HTML)."""
    lines = [f"⏰ <b>Waiting for your approval</b> ({len(records)}):"]
    for record in records:
        ask = record.ask
        where = "in the approval group" if ask.chat is not None else "above in this chat"
        lines.append(
            f"• {esc(name_of(ask.origin.user_id), NAME_CLIP)}{agent_note(ask)}: <b>{esc(ask.tool, NAME_CLIP)}</b>"
            f" on <b>{esc(ask.server, NAME_CLIP)}</b> · <code>{short_hash(record.state.content_hash)}</code>"
            f" · card {where} · expires {_clock(record.deadline)}"
        )
    return Screen(fit(lines))

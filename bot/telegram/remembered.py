"""Remembered decisions as `/agents` shows them: one line each (allow or deny, what, for how long, made when,
until) and a **Forget** button each. Builds values, awaits nothing.

What an agent asked to do is its text (the command of `Bash`, the path of a file tool, the URL of `WebFetch`,
else the input's JSON), escaped and cut in the middle when long, so that both how a command starts and how it
ends stay visible (`make && … && rm -rf /`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Final

from bot.config import Config
from bot.config.approvals import deciding_rule
from bot.core.remembered import Decision, Span, spans_offered
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.render import Keyboard, button_label, callback_button, esc

__all__ = ["MAX_REMEMBERED", "SHOWN", "decision_lines", "shown_input", "silenced"]

MAX_REMEMBERED: Final = 20
"""Decisions the list shows with a button (the tokens' buttons and these stay inside a keyboard's 100)."""
SHOWN: Final = 120
"""Characters of what an agent asked to do that a line shows (cut in the middle past it)."""
_SUBJECTS: Final = ("command", "file_path", "notebook_path", "url", "query")
_TIME: Final = "%Y-%m-%d %H:%M UTC"
_SESSION: Final = 8
"""Characters of an agent's session id shown."""


def shown_input(tool: str, tool_input: str, limit: int = SHOWN) -> str:
    """What the agent asked to do with `tool`, as plain text in at most `limit` characters: the one field that
    says it (a command, a path, a URL) or the input's JSON, cut in the middle."""
    try:
        loaded = json.loads(tool_input)
    except ValueError:
        loaded = None
    text = tool_input
    if isinstance(loaded, Mapping):
        subject = next((loaded[k] for k in _SUBJECTS if isinstance(loaded.get(k), str)), None)
        text = subject if isinstance(subject, str) else tool_input
    text = " ".join(text.split())  # newlines and runs of spaces as one space: one line in the list
    if len(text) <= limit:
        return text
    head = (limit - 3) * 2 // 3
    return f"{text[:head]} … {text[len(text) - (limit - 3 - head) :]}"


def silenced(config: Config, decisions: Sequence[Decision]) -> frozenset[int]:
    """The ids of `decisions` the `[[approvals]]` rules no longer let answer (a rule with a quorum above 1, or
    `remember = false`, now covers the ask; or "always" is no longer allowed there; or a rule gives the ask to
    approvers other than the person, `deciding_rule`, as `bot.web.hooks` does): kept, listed, never used."""
    return frozenset(made.id for made in decisions if not _answers(config, made))


def _answers(config: Config, made: Decision) -> bool:
    rules = config.hook_rules(made.tool, _loaded(made))
    return made.span in spans_offered(rules) and deciding_rule(rules, made.person) is None


def _loaded(made: Decision) -> dict[str, object]:
    try:
        loaded = json.loads(made.input)
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(_TIME)


def _span(made: Decision) -> str:
    if made.span is Span.SESSION:
        session = made.session[:_SESSION] + ("…" if len(made.session) > _SESSION else "")
        return f"for session <code>{esc(session)}</code>" if session else "for this session"
    if made.span is Span.HOUR and made.until is not None:
        return f"until {_when(made.until)}"
    return "always"


def decision_lines(
    decisions: Sequence[Decision], names: Mapping[int, str], user_id: int, unused: Collection[int] = ()
) -> tuple[list[str], Keyboard]:
    """The lines and **Forget** buttons of the person's remembered decisions, under their agents' names; those
    of agents not in `names` (a token revoked or expired: nothing of theirs is asked any more) are left out, and
    those in `unused` (`silenced`) say that they are not used."""
    shown = [made for made in decisions if made.agent in names]
    if not shown:
        return [], []
    lines = ["", "🧠 <b>Remembered answers</b> (asked again once forgotten)"]
    rows: Keyboard = []
    for made in shown[:MAX_REMEMBERED]:
        verdict = "✅ allow" if made.allow else "⛔ deny"
        what = shown_input(made.tool, made.input)
        by = "" if made.by is None else f" by <code>{made.by}</code>"
        lines.append(
            f"• {esc(names[made.agent])}: {verdict} {esc(made.tool)} <code>{esc(what)}</code> — "
            f"{_span(made)} · made {_when(made.made_at)}{by}"
            + (" · <i>not used: an approval rule asks for this now</i>" if made.id in unused else "")
        )
        data = Button(Kind.AGENT, str(made.id), 0, Action.FORGET, user_id).pack()
        label = f"Forget {'allow' if made.allow else 'deny'} {shown_input(made.tool, made.input, 30)}"
        rows.append([callback_button(button_label(label), data)])
    if len(shown) > MAX_REMEMBERED:
        lines.append(f"… and {len(shown) - MAX_REMEMBERED} more (forget some to see them).")
    return lines, rows

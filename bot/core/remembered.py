"""Remembered decisions: what a person answered to an agent's permission prompt ("allow for this session", "for
an hour", "always for exactly this"), kept so that the same ask is not put to them again. No I/O.

An ask is what an agent wants to do, as its own hook or permission-prompt tool names it: a tool (`Bash`,
`Edit`, `mcp__demo__deploy`) and that tool's input, by an agent (an agent token) acting for a person, in one of
the agent's sessions. A decision covers exactly that tool with exactly that input (canonical JSON), for that
person and agent: in that session only (`Span.SESSION`), until an hour is over (`Span.HOUR`), or until revoked
(`Span.ALWAYS`). Deny can be remembered as allow can. Nothing broader: a different command is asked again.

`Memory` is where decisions are kept. `KeptInMemory` keeps them in this process (one process, tests); the store
keeps them in the database for a fleet and across restarts (`bot.store.remembered`).

Which spans may be offered for an ask is `spans_offered`, from the `[[approvals]]` rules that apply to it: none,
`ONCE`, `SESSION` and `HOUR`; a rule with a quorum above 1, or `remember = false`, `ONCE` only (never remembered,
and no decision made before is used for it); `ALWAYS` only where every rule that applies says `remember = "always"`.
"""

from __future__ import annotations

import datetime as dt
import enum
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

__all__ = [
    "HOUR",
    "UNRULED",
    "Ask",
    "Decision",
    "KeptInMemory",
    "Memory",
    "RuleTerms",
    "Span",
    "canonical_input",
    "decision",
    "spans_offered",
]

HOUR: Final = dt.timedelta(hours=1)
"""How long an "allow for an hour" (or "deny for an hour") holds."""


class Span(enum.StrEnum):
    """How long a person's answer to an ask holds."""

    ONCE = "once"
    """This ask only: nothing is remembered."""
    SESSION = "session"
    """The same ask in the same agent session."""
    HOUR = "hour"
    """The same ask, in any of the agent's sessions, for `HOUR`."""
    ALWAYS = "always"
    """The same ask, until the person revokes it (offered only where the approval rules allow it)."""


def canonical_input(tool_input: Mapping[str, object]) -> str:
    """The tool input as one comparable text: JSON with sorted keys and no spaces."""
    return json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Ask:
    """What an agent asks its person's leave to do."""

    person: int
    agent: int
    """The agent token's id."""
    session: str
    """The agent's own session id ("" when it names none)."""
    tool: str
    input: str
    """`canonical_input` of the tool's input."""

    @classmethod
    def of(cls, person: int, agent: int, session: str, tool: str, tool_input: Mapping[str, object]) -> Ask:
        return cls(person, agent, session, tool, canonical_input(tool_input))


@dataclass(frozen=True, slots=True)
class Decision:
    """A person's remembered answer."""

    id: int
    person: int
    agent: int
    tool: str
    input: str
    allow: bool
    span: Span
    session: str
    """The session it holds in (`Span.SESSION`), else ""."""
    made_at: dt.datetime
    until: dt.datetime | None
    """When it stops holding (`Span.HOUR`), else None."""
    by: int | None = None
    """Who decided, when not the person themselves (an approver, under a rule); None: the person."""

    @property
    def maker(self) -> int:
        """Who decided: the person, or the approver who answered for them."""
        return self.person if self.by is None else self.by

    def covers(self, ask: Ask, now: dt.datetime) -> bool:
        """Whether this decision answers `ask` at `now`."""
        if (self.person, self.agent, self.tool, self.input) != (ask.person, ask.agent, ask.tool, ask.input):
            return False
        if self.span is Span.SESSION and self.session != ask.session:
            return False
        return self.until is None or now < self.until


def decision(
    id_: int, ask: Ask, allow: bool, span: Span, now: dt.datetime, by: int | None = None
) -> Decision:
    """The decision a person (or `by`, an approver answering for them) makes on `ask` at `now`, held for `span`
    (not `Span.ONCE`)."""
    if span is Span.ONCE:
        raise ValueError("an answer for this ask only is not remembered")
    if span is Span.SESSION and not ask.session:  # else it would hold in every ask that names no session
        raise ValueError("an answer for this session needs the agent's session id")
    return Decision(
        id=id_,
        person=ask.person,
        agent=ask.agent,
        tool=ask.tool,
        input=ask.input,
        allow=allow,
        span=span,
        session=ask.session if span is Span.SESSION else "",
        made_at=now,
        until=now + HOUR if span is Span.HOUR else None,
        by=None if by == ask.person else by,
    )


class RuleTerms(Protocol):
    """What of an `[[approvals]]` rule that applies to an ask says how long its answer may be remembered."""

    @property
    def quorum(self) -> int: ...

    @property
    def remember(self) -> bool | Literal["always"]:
        """False: never; True: for a session or an hour; "always": also until revoked."""
        ...


UNRULED: Final = (Span.ONCE, Span.SESSION, Span.HOUR)
"""What an ask no rule applies to may be answered for."""


def spans_offered(rules: Iterable[RuleTerms]) -> tuple[Span, ...]:
    """How long an answer to an ask may be remembered, given the `[[approvals]]` rules that apply to it (none:
    `UNRULED`). A rule with a quorum above 1, or `remember = false`, allows `ONCE` only; `ALWAYS` is added only
    where every rule that applies says `remember = "always"`. A decision kept before is used only if its span is
    still offered (`bot.store.remembered` checks it on every recall)."""
    applying = tuple(rules)
    if any(rule.quorum > 1 or rule.remember is False for rule in applying):
        return (Span.ONCE,)
    if applying and all(rule.remember == "always" for rule in applying):
        return (*UNRULED, Span.ALWAYS)
    return UNRULED


class Memory(Protocol):
    """Where remembered decisions are kept."""

    async def recall(self, ask: Ask, now: dt.datetime) -> Decision | None:
        """The decision that answers `ask` at `now`, if any (the newest one)."""
        ...

    async def keep(
        self, ask: Ask, allow: bool, span: Span, now: dt.datetime, *, by: int | None = None
    ) -> Decision:
        """Remember the person's answer to `ask` for `span` (not `Span.ONCE`); `by`: the approver who gave it,
        when not the person."""
        ...

    async def of(self, person: int, now: dt.datetime) -> Sequence[Decision]:
        """The person's decisions that still hold at `now`, newest first."""
        ...

    async def forget(self, person: int, decision_id: int) -> bool:
        """Revoke one of the person's decisions; False when there was no such decision of theirs."""
        ...


class KeptInMemory:
    """A `Memory` kept in this process only: gone at a restart, unseen by another process."""

    def __init__(self) -> None:
        self._decisions: dict[int, Decision] = {}
        self._ids = itertools.count(1)

    async def recall(self, ask: Ask, now: dt.datetime) -> Decision | None:
        covering = [d for d in self._decisions.values() if d.covers(ask, now)]
        return max(covering, key=lambda d: d.id, default=None)

    async def keep(
        self, ask: Ask, allow: bool, span: Span, now: dt.datetime, *, by: int | None = None
    ) -> Decision:
        made = decision(next(self._ids), ask, allow, span, now, by)
        self._decisions[made.id] = made
        return made

    async def of(self, person: int, now: dt.datetime) -> Sequence[Decision]:
        held = (
            d for d in self._decisions.values() if d.person == person and (d.until is None or now < d.until)
        )
        return sorted(held, key=lambda d: d.id, reverse=True)

    async def forget(self, person: int, decision_id: int) -> bool:
        found = self._decisions.get(decision_id)
        if found is None or found.person != person:
            return False
        del self._decisions[decision_id]
        return True

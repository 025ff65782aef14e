"""`[[approvals]]`: tool calls held back until approvers agree (who, how many, where, how long, with which
second factor), and agents' permission prompts (`hooks`: what an agent's own hook asks to do). No I/O.

A rule's own rules are `ApprovalRule._relations`; the ones that need the rest of the document (its servers
exist, its quorum can be reached given `[telegram]`) are `approval_relations`, which `Config` runs.
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal, cast

from bot.config import read
from bot.config._table import (
    EXPAND,
    Boolean,
    Context,
    Found,
    Positive,
    PositiveInt,
    Strings,
    Table,
    UserIds,
    as_frozenset,
    checked,
    optional,
)
from bot.config.tool_patterns import parse_tool_pattern


class ApprovalGate(enum.StrEnum):
    """What an `[[approvals]]` rule holds back until approvers agree."""

    CALL = "call"
    """The tool call itself: it is not sent until approved."""
    ANSWERS = "answers"
    """Each `accept` answer to one of the call's questions: it is not sent until approved."""


class SecondFactor(enum.StrEnum):
    """What an `[[approvals]]` approval needs besides the tap (`second_factor`)."""

    TOTP = "totp"
    """A code from the approver's authenticator app (enrolled with /2fa), checked by the bot."""


class Caller(enum.StrEnum):
    """Who starts a tool call: a person in the chat, or an agent through the gateway with that person's token."""

    CHAT = "chat"
    AGENT = "agent"


def _chat_id(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        raise read.Invalid("must be a Telegram chat id (an integer; groups are negative)")
    return value


def _remember(value: object) -> bool | Literal["always"]:
    if isinstance(value, bool):
        return value
    if value == "always":
        return "always"
    raise read.Invalid('must be true, false or "always"')


def _callers(value: object) -> frozenset[Caller]:
    callers = frozenset(read.one_of(Caller)(item) for item in read.str_list(value))
    if not callers:
        raise read.Invalid("must list at least one of 'chat', 'agent'")
    return callers


class ApprovalRule(Table):
    """`[[approvals]]`: tool calls (and agents' permission prompts) that need `quorum` of `approvers` to agree
    first."""

    _hidden = frozenset({"index"})
    servers: Annotated[frozenset[str], checked(as_frozenset(read.str_list)), EXPAND] = frozenset()
    """Server names the rule covers (required, unless the rule has `hooks` only)."""
    tools: Strings = ()
    """Tool names or shell-style patterns (`deploy*`), matched with `fnmatch.fnmatchcase` (required with
    `servers`)."""
    hooks: Strings = ()
    """Agents' permission prompts the rule covers, as Claude Code's permission rules: `Bash(rm *)`, `Edit`,
    `mcp__github__*` (`bot.config.tool_patterns`)."""
    remember: Annotated[bool | Literal["always"], checked(_remember), EXPAND] = True
    """For an agent's permission prompt it covers: whether the answer may be remembered for the agent's session
    or an hour (true), never (false), or also "always" for exactly that tool and input. With a quorum above 1 it
    never is."""
    approvers: UserIds = frozenset()
    """Telegram user ids who may approve or reject (required)."""
    quorum: PositiveInt = 1
    """How many distinct approvers must approve."""
    chat: Annotated[int | None, checked(_chat_id), EXPAND] = None
    """The approval group's chat id; None: each approver gets the card privately."""
    self_approval: Boolean = False
    """Whether the requester's own approval counts (when they are an approver)."""
    timeout_s: Positive = 1800.0
    """A request not decided by then expires (and nothing is sent)."""
    gate: Annotated[ApprovalGate, checked(read.one_of(ApprovalGate)), EXPAND] = ApprovalGate.CALL
    callers: Annotated[frozenset[Caller], checked(_callers), EXPAND] = frozenset(Caller)
    """Whose calls the rule holds back: `chat` (a person's `/call`), `agent` (the gateway), or both."""
    second_factor: Annotated[SecondFactor | None, checked(optional(read.one_of(SecondFactor))), EXPAND] = None
    """`totp`: an approval also needs the approver's current authenticator code (needs `[storage] secret_key`)."""
    remind_after_s: Annotated[float | None, checked(optional(read.positive)), EXPAND] = None
    """Approvers who have not voted by then get one private reminder each (batched); None: no reminder."""
    escalate_after_s: Annotated[float | None, checked(optional(read.positive)), EXPAND] = None
    """Not decided by then: the people of `escalate_to` join the approvers; None: no escalation."""
    escalate_to: UserIds = frozenset()
    """Telegram user ids who become approvers of a request at `escalate_after_s`."""
    index: int = 0
    """The rule's place among `[[approvals]]` (named in problems and on cards)."""

    def matches(self, server: str, tool: str, caller: Caller = Caller.CHAT) -> bool:
        """Whether a call of `tool` on `server` by `caller` falls under this rule."""
        return (
            caller in self.callers
            and server in self.servers
            and any(fnmatch.fnmatchcase(tool, p) for p in self.tools)
        )

    def matches_hook(self, tool: str, tool_input: Mapping[str, object]) -> bool:
        """Whether an agent's permission prompt to use `tool` with `tool_input` falls under this rule (`hooks`)."""
        return Caller.AGENT in self.callers and any(
            parse_tool_pattern(pattern).matches(tool, tool_input) for pattern in self.hooks
        )

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        found: Found = []
        for j, pattern in enumerate(v.tools or ()):
            if not pattern:
                found.append((("tools", j), "must not be empty"))
        found += _hook_relations(v, data)
        hooked = data.get("hooks") is not None
        for name, other in (("servers", "tools"), ("tools", "servers"), ("approvers", "")):
            if data.get(name) is None:
                if not hooked or other == "":
                    found.append(((name,), "required"))
                elif data.get(other) is not None:
                    found.append(((name,), f"required with {other}"))
            elif getattr(v, name) is not None and not getattr(v, name):
                found.append(((name,), "must list at least one"))
        if v.approvers and v.quorum is not None and v.quorum > len(v.approvers):
            found.append((("quorum",), f"{v.quorum} approvals needed but only {len(v.approvers)} approvers"))
        if (v.escalate_after_s is None) != (not v.escalate_to):
            missing = "escalate_to" if v.escalate_after_s is not None else "escalate_after_s"
            found.append(
                ((missing,), "required with " + ({"escalate_to", "escalate_after_s"} - {missing}).pop())
            )
        for name in ("remind_after_s", "escalate_after_s"):
            after = getattr(v, name)
            if after is not None and v.timeout_s is not None and after >= v.timeout_s:
                found.append(
                    ((name,), f"must be less than timeout_s ({v.timeout_s:g}): the request ends then")
                )
        return found


def hook_rules(
    rules: Sequence[ApprovalRule], tool: str, tool_input: Mapping[str, object]
) -> tuple[ApprovalRule, ...]:
    """Every rule whose `hooks` cover an agent's permission prompt to use `tool` with `tool_input`, in file order
    (what `bot.core.remembered.spans_offered` weighs: none may forbid remembering)."""
    return tuple(rule for rule in rules if rule.matches_hook(tool, tool_input))


def governing_rule(rules: Sequence[ApprovalRule]) -> ApprovalRule | None:
    """Of the rules that cover one prompt (`hook_rules`), the one its approval follows: the strictest (the
    highest quorum, then a second factor), the first in the file on a tie; None when there are none. A
    compound command may fall under several rules (`make && rm -rf build`): the strictest applies, never merely
    the first."""
    return max(rules, key=lambda rule: (rule.quorum, rule.second_factor is not None), default=None)


def own_tap(rule: ApprovalRule, person: int) -> bool:
    """Whether a rule covering a person's prompt is met by that person's own tap: they are its one approver, one
    approval decides, no second factor, nobody to escalate to."""
    return (
        rule.approvers == {person}
        and rule.quorum == 1
        and rule.second_factor is None
        and not rule.escalate_to
    )


def deciding_rule(rules: Sequence[ApprovalRule], person: int) -> ApprovalRule | None:
    """Of the rules that cover a person's prompt (`hook_rules`), the one whose approvers decide it: the strictest
    (`governing_rule`) of those the person's own tap does not meet (`own_tap`), whatever their order in the file;
    None when there is none (no rule, or only rules that leave it to the person: their own card decides)."""
    return governing_rule([rule for rule in rules if not own_tap(rule, person)])


def _hook_relations(v: Any, data: Mapping[str, Any]) -> Found:
    """`hooks`: each a pattern, at least one when given, the rule's callers include agents; no "always" where
    nothing is remembered."""
    found: Found = []
    for j, pattern in enumerate(v.hooks or ()):
        try:
            parse_tool_pattern(pattern)
        except ValueError as exc:
            found.append((("hooks", j), str(exc)))
    if data.get("hooks") is not None and v.hooks is not None and not v.hooks:
        found.append((("hooks",), "must list at least one"))
    if v.hooks and v.callers and Caller.AGENT not in v.callers:
        found.append((("callers",), "must include 'agent' with hooks (they are agents' prompts)"))
    if v.remember == "always" and v.quorum is not None and v.quorum > 1:
        found.append((("remember",), f'"always" is never offered with quorum {v.quorum}: only once is'))
    return found


def asks_second_factor(rule: object) -> bool:
    """Whether an `[[approvals]]` rule as given (a model or a table) asks for a second factor."""
    if isinstance(rule, ApprovalRule):
        return rule.second_factor is not None
    if isinstance(rule, Mapping):
        return cast("Mapping[str, Any]", rule).get("second_factor") in {f.value for f in SecondFactor}
    return False


def approval_relations(
    i: int, rule: Any, listed: Iterable[str], servers: set[object], telegram: Any
) -> Found:
    """A rule's servers exist; its quorum can be reached even when an approver asks (see `self_approval`)."""
    found: Found = [
        (("approvals", i, "servers", j), f"no server {name!r} is configured")
        for j, name in enumerate(listed)
        if name not in servers
    ]
    approvers, quorum = rule.approvers, rule.quorum
    if not approvers or quorum is None or quorum > len(approvers) or rule.self_approval or telegram is None:
        return found
    allowed = telegram.allowed_users or frozenset()
    callers = sorted(u for u in approvers if telegram.allow_everyone or u in allowed)
    if callers and quorum > len(approvers) - 1:
        who = (
            "everyone may call tools (allow_everyone)"
            if telegram.allow_everyone
            else f"approver {callers[0]} is in telegram.allowed_users"
        )
        found.append(
            (
                ("approvals", i, "quorum"),
                f"{quorum} approvals needed, but with self_approval = false a request by an approver leaves only "
                f"{len(approvers) - 1} who can approve ({who})",
            )
        )
    return found

"""What a requester is told: the lines of the service's outcomes, and the verdict a final request gives its call.
Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from bot.core.approvals import ApprovalRecord, ApprovalStatus, Verdict, names, unnamed

__all__ = [
    "AGENT_GONE",
    "CANCELLED_BY_REQUESTER",
    "GONE",
    "RAN_ELSEWHERE",
    "STOPPING",
    "STOPPING_AGENT",
    "orphaned",
    "verdict_of",
]

STOPPING: Final = "the bot is stopping; the approval request stays open and the call runs once it is approved"
GONE: Final = "This approval request no longer exists."
STOPPING_AGENT: Final = (
    "the bot is stopping; the call was not made, and it will not be made after the restart either: call again"
)
"""What an agent's call waiting for approval gets when the bot stops (its request is left pending, `orphaned`)."""
AGENT_GONE: Final = "the agent that asked is gone; not run"
"""An agent's gated call approved after the process that took it ended (`orphaned`)."""
RAN_ELSEWHERE: Final = "approved, but another instance of the bot has already carried it out; not run again"
"""A waiting call whose approved request was claimed by another process (it ran there, or was found orphaned)."""
CANCELLED_BY_REQUESTER: Final = "cancelled by its requester"


def orphaned(record: ApprovalRecord, waiting: bool) -> bool:
    """An agent's request decided where no call waits for it (after a restart): not run. The agent's HTTP call
    ended with the process that took it, so nobody would get the result, and the agent may well have tried
    again meanwhile: running it now could run it twice. A person's call is run instead (`run_approved`): its
    result goes to the chat it was asked in. An agent's call made as a task (`Origin.task`) is not orphaned: the
    task is kept in the store, so it is run (`run_approved`) and its result kept for the agent's poll."""
    origin = record.ask.origin
    return origin.agent is not None and origin.task is None and not waiting


def verdict_of(record: ApprovalRecord, name_of: Callable[[int], str] | None = None) -> Verdict:
    """The requester's line for a final request (`name_of`: the names known; default: those kept with it)."""
    state = record.state
    nothing = "the call was not made" if record.ask.question is None else "the server was told decline"
    if state.status is ApprovalStatus.APPROVED:
        return Verdict(
            state.status,
            f"approved by {names(state.deciders)}",
            record.id,
            approvals=state.deciders,
            asked_at=record.created_at,
        )
    if state.status is ApprovalStatus.REJECTED:
        return Verdict(state.status, f"rejected by {names(state.deciders)}; {nothing}", record.id)
    if state.status is ApprovalStatus.EXPIRED:
        silent = tuple(
            (name_of or (lambda u: record.names.get(u) or unnamed(u)))(u) for u in state.unanswered
        )
        unheard = f" (no answer from {_and(silent)})" if silent else ""
        return Verdict(state.status, f"not approved in time{unheard}; {nothing}", record.id)
    return Verdict(state.status, f"the approval request was cancelled; {nothing}", record.id)


def _and(people: Sequence[str]) -> str:
    return people[0] if len(people) == 1 else ", ".join(people[:-1]) + " and " + people[-1]

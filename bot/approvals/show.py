"""What a host does for the approval service (`ApprovalShow`: its cards, the requester's notices) and what the
service answers a tap with (`Cast`). No I/O; the Telegram host (`bot.telegram.approvals`) is one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from bot.core.approvals import ApprovalRecord, Verdict

__all__ = ["ApprovalShow", "Cast"]


class ApprovalShow(Protocol):
    """What a host does for the service: show requests to people and tell the requester. Never raises for a
    message that could not be delivered (it logs it)."""

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        """Show a new request to its approvers; where its cards are (tell the requester when nobody is
        reachable)."""
        ...

    async def redraw(self, record: ApprovalRecord) -> None:
        """Show the request's current state on its cards (`record.cards`)."""
        ...

    async def waiting(self, record: ApprovalRecord) -> int | None:
        """Gate "answers": tell the requester their answer waits, with a way to change it; the notice's id."""
        ...

    async def settled(self, record: ApprovalRecord, notice: int, verdict: Verdict | None) -> None:
        """Gate "answers": the notice of `waiting` once the wait is over (`verdict.changing`: being changed)."""
        ...

    async def decided(self, record: ApprovalRecord, verdict: Verdict, waiting: bool) -> None:
        """A vote or the deadline decided the request: tell the requester what they need to know (`waiting`:
        their call is waiting in this process and will end with `verdict`). Told by the one process that
        claimed the decision, so a fleet tells them once."""
        ...

    async def run_approved(self, record: ApprovalRecord, verdict: Verdict) -> None:
        """Run a call approved after the process that asked for it ended, and show its result."""
        ...

    async def remind(self, user_id: int, records: Sequence[ApprovalRecord]) -> None:
        """One private reminder to an approver of the pending requests `records` that wait for their vote."""
        ...

    async def escalated(self, record: ApprovalRecord, added: frozenset[int]) -> Sequence[tuple[int, int]]:
        """Show an escalated request to the approvers who just joined it; where their cards are."""
        ...


@dataclass(frozen=True, slots=True)
class Cast:
    """What a vote or a change got: a line for the person, and whether it was refused (nothing changed)."""

    text: str
    refused: bool = False
    needs_code: bool = False
    """Refused for want of a one-time code only (`tally`): ask the approver for it."""

"""The approval service: the hub's `Approver`, owning every decision on a request (quorum, deadlines, reminders,
escalation, exactly-once carrying out in a fleet). Host-neutral: it awaits its book (the store) and its host's
cards through Protocols, and does no I/O of its own.

It sits at the level of `bot.servers` and `bot.store`: it imports `bot.core` (the values, the `Approver` it is,
and the `ApprovalBook` the store implements: `bot.core.approvals`) and nothing beside it; the composition gives it
the store's book and a host's show.

    service.py    the `ApprovalService`: requests, votes, changes, deadlines, reminders, escalation, the bus
    show.py       `ApprovalShow` (what a host does for it) and `Cast` (what a tap gets back)
    verdicts.py   what a requester is told: the outcome lines and a final request's `Verdict` (pure)
"""

from bot.approvals.service import REMIND_BATCH_S, ApprovalService, Wakeups
from bot.approvals.show import ApprovalShow, Cast
from bot.approvals.verdicts import (
    AGENT_GONE,
    GONE,
    RAN_ELSEWHERE,
    STOPPING,
    STOPPING_AGENT,
    orphaned,
    verdict_of,
)

__all__ = [
    "AGENT_GONE",
    "GONE",
    "RAN_ELSEWHERE",
    "REMIND_BATCH_S",
    "STOPPING",
    "STOPPING_AGENT",
    "ApprovalService",
    "ApprovalShow",
    "Cast",
    "Wakeups",
    "orphaned",
    "verdict_of",
]

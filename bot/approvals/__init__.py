"""The approval service: the hub's `Approver`, owning every decision on a request (quorum, deadlines, reminders,
escalation, exactly-once carrying out in a fleet). Host-neutral: it awaits its book (the store) and its host's
cards through Protocols, and does no I/O of its own.

It sits at the level of `bot.servers` and `bot.store`: it imports `bot.core` (the values and the `Approver`
seam, `bot.core.approvals`) and nothing beside it; the composition gives it the store's book and a host's show.
"""

from bot.approvals.service import (
    AGENT_GONE,
    GONE,
    RAN_ELSEWHERE,
    REMIND_BATCH_S,
    STOPPING,
    STOPPING_AGENT,
    ApprovalBook,
    ApprovalService,
    ApprovalShow,
    Cast,
    Wakeups,
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
    "ApprovalBook",
    "ApprovalService",
    "ApprovalShow",
    "Cast",
    "Wakeups",
    "orphaned",
    "verdict_of",
]

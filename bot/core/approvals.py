"""Approvals: what an approval request is, how taps count towards its quorum, and the gate a host provides.

Pure: `tally` decides a tap (refusal or new state) from values; hashing is the only computation. The hub asks
an `Approver` before sending a gated call; `bot.approvals.ApprovalService` is the one it is given
(quorum, expiry, compare-and-set, the waiter), given the store's book and a host's cards. `ApprovalBook` is
here, below both, because the service and the store (`bot.store.approvals.ApprovalStore`) sit side by side.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from bot.core.values import Origin
from bot.receipts import content_hash

__all__ = [
    "DECIDED_TOPIC",
    "DUE",
    "NEEDS_CODE",
    "SHORT_HASH",
    "ApprovalAsk",
    "ApprovalBook",
    "ApprovalRecord",
    "ApprovalState",
    "ApprovalStatus",
    "Approver",
    "Ballot",
    "Factor",
    "Tally",
    "Verdict",
    "Vote",
    "content_hash",
    "names",
    "people_of",
    "short_hash",
    "tally",
    "unnamed",
]


class Vote(enum.StrEnum):
    APPROVE = "approve"
    REJECT = "reject"


class Factor(enum.StrEnum):
    """How an approval was given: a tap alone, or a tap and a one-time code (`second_factor = "totp"`)."""

    TAP = "tap"
    TOTP = "totp"
    """A code from the approver's authenticator app."""
    RECOVERY = "recovery_code"
    """One of the approver's single-use recovery codes, in place of the app's code."""

    @property
    def second(self) -> bool:
        """A code came with the tap."""
        return self is not Factor.TAP


class ApprovalStatus(enum.StrEnum):
    """Where a request stands; every status but PENDING is final."""

    PENDING = "pending"
    CHANGING = "changing"
    """Gate "answers": the requester is changing the answer; nobody can vote until the new content is shown."""
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    """The call went away before a decision (stopped, cancelled by its requester)."""


SHORT_HASH: Final = 8
"""Hex characters of a content hash people compare by eye (cards, reminders)."""


def short_hash(digest: str) -> str:
    """The first `SHORT_HASH` characters of a content hash, as people read it."""
    return digest[:SHORT_HASH]


@dataclass(frozen=True, slots=True)
class ApprovalAsk:
    """What the hub asks a gate to have approved: who, which call, exactly what, and by whom."""

    origin: Origin
    """The requester and their chat."""
    requester: str
    """The requester's display name ("user 1001" when the hub knows no better)."""
    server: str
    tool: str
    content: Mapping[str, Any] | None
    """Exactly what will be sent: the call's arguments (gate "call") or an answer's content (gate "answers")."""
    approvers: frozenset[int]
    quorum: int
    chat: int | None
    """The approval group, or None: each approver privately."""
    self_approval: bool
    timeout_s: float
    question: str | None = None
    """For gate "answers": the server's question the content answers."""
    factor: Factor = Factor.TAP
    """What each approval needs: a tap, or (`Factor.TOTP`) a tap and a one-time code."""
    remind_after_s: float | None = None
    """Approvers who have not voted by then get one private reminder (batched with their other reminders)."""
    escalate_after_s: float | None = None
    """Not decided by then: `escalate_to` join the approvers."""
    escalate_to: frozenset[int] = frozenset()

    @property
    def hash(self) -> str:
        return content_hash(self.server, self.tool, self.content)


@dataclass(frozen=True, slots=True)
class Verdict:
    """How a request ended, as the requester is told (`text`: "Approved by Bob and Carol")."""

    status: ApprovalStatus
    text: str
    approval_id: str | None = None
    changing: bool = False
    """Gate "answers": the requester asked to change the answer; ask them again, then `decide` again with
    this `approval_id` (the request is bound to the new content; earlier approvals no longer count)."""
    approvals: tuple[Ballot, ...] = ()
    """Approved: the approvals that made it (what a receipt names)."""
    asked_at: str | None = None
    """When the request was made (UTC, ISO 8601)."""

    @property
    def approved(self) -> bool:
        return self.status is ApprovalStatus.APPROVED


class Approver(Protocol):
    """The hub's way of getting a request approved; awaited until decided. Never raises for outcomes."""

    def unavailable(self) -> str | None:
        """Why no request can be asked now ("the bot is stopping"), or None."""
        ...

    async def decide(self, ask: ApprovalAsk, approval_id: str | None = None) -> Verdict: ...

    async def withdraw(self, approval_id: str) -> None:
        """End a request whose requester gave up changing it."""
        ...

    def cancel(self, covered: Callable[[Origin], bool]) -> int:
        """/cancel: end the requests whose calls wait here for `covered` requesters; returns how many."""
        ...


@dataclass(frozen=True, slots=True)
class Ballot:
    """One approver's decision, bound to the content it was made on."""

    user_id: int
    name: str
    vote: Vote
    content_hash: str
    at: str
    """UTC time, ISO 8601."""
    factor: Factor = Factor.TAP
    """How the approver proved it was them (an audit row and the receipt say it)."""


@dataclass(frozen=True, slots=True)
class ApprovalState:
    """A request as the store holds it (everything `tally` needs)."""

    id: str
    requester_id: int
    approvers: frozenset[int]
    quorum: int
    self_approval: bool
    content_hash: str
    status: ApprovalStatus = ApprovalStatus.PENDING
    ballots: tuple[Ballot, ...] = ()
    generation: int = 0
    """Bumped each time the content changes: a button drawn for an older content is refused."""
    factor: Factor = Factor.TAP
    """What an approval needs (a code besides the tap: `Factor.TOTP`); a rejection never needs a code."""

    @property
    def approvals(self) -> tuple[Ballot, ...]:
        """The approvals that count: of the current content, one per approver, never the requester's own
        unless allowed."""
        seen: set[int] = set()
        counted: list[Ballot] = []
        for ballot in self.ballots:
            if ballot.vote is not Vote.APPROVE or ballot.content_hash != self.content_hash:
                continue
            if ballot.user_id in seen or (ballot.user_id == self.requester_id and not self.self_approval):
                continue
            if self.factor.second and not ballot.factor.second:  # a tap alone never counts there
                continue
            seen.add(ballot.user_id)
            counted.append(ballot)
        return tuple(counted)

    @property
    def deciders(self) -> tuple[Ballot, ...]:
        """Who decided a final request: the approvers that counted, or the one who rejected."""
        if self.status is ApprovalStatus.REJECTED:
            return tuple(b for b in self.ballots if b.vote is Vote.REJECT)[-1:]
        if self.status is ApprovalStatus.APPROVED:
            return self.approvals
        return ()

    @property
    def open(self) -> bool:
        """Not decided yet (pending, or being changed)."""
        return self.status in (ApprovalStatus.PENDING, ApprovalStatus.CHANGING)

    @property
    def unanswered(self) -> tuple[int, ...]:
        """The approvers whose vote could still count and who gave none on the current content (sorted)."""
        voted = {b.user_id for b in self.ballots if b.content_hash == self.content_hash}
        return tuple(
            sorted(
                u for u in self.approvers if u not in voted and (u != self.requester_id or self.self_approval)
            )
        )


def unnamed(user_id: int) -> str:
    """How a card names a person whose display name nobody has seen."""
    return f"user {user_id}"


def people_of(ask: ApprovalAsk) -> frozenset[int]:
    """Whom a request's card names: its approvers (those it may escalate to included) and its requester."""
    return ask.approvers | ask.escalate_to | {ask.origin.user_id}


def names(ballots: tuple[Ballot, ...]) -> str:
    """ "Bob", "Bob and Carol", "Bob, Carol and Dave"."""
    people = [b.name for b in ballots]
    return (
        people[0]
        if len(people) == 1
        else ", ".join(people[:-1]) + " and " + people[-1]
        if people
        else "nobody"
    )


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """One request as stored: what is asked, where its cards are, and its tally."""

    ask: ApprovalAsk
    state: ApprovalState
    gate: str
    deadline: float
    """Unix time."""
    created_at: str
    revision: int = 0
    """Bumped by every change: the compare-and-set of the store writes only over the revision it read."""
    cards: tuple[tuple[int, int], ...] = ()
    """(chat id, message id) of each approval card, as the host that showed them returned them."""
    decided_at: str | None = None
    names: Mapping[int, str] = field(default_factory=dict[int, str])
    """Display names of the requester and approvers as known when asked (cards after a restart use them)."""
    ran_by: str | None = None
    """`DUE` once decided, until somebody carries the decision out (runs the call, tells the requester): then
    who did. None: still open, withdrawn, or decided by a version that did not keep it."""
    remind_at: float | None = None
    """Unix time the approvers who have not voted are reminded; None: never."""
    reminded_at: str | None = None
    """When the reminder was taken by a process to send (it is sent once, also in a fleet)."""
    escalate_at: float | None = None
    """Unix time `ask.escalate_to` join the approvers; None: never."""
    escalated_at: str | None = None

    @property
    def next_nudge(self) -> float | None:
        """When this request's next reminder or escalation is due, while it is pending; None: nothing left."""
        if self.state.status is not ApprovalStatus.PENDING:
            return None
        times = [
            at
            for at, done in ((self.remind_at, self.reminded_at), (self.escalate_at, self.escalated_at))
            if at is not None and done is None
        ]
        return min(times, default=None)

    @property
    def id(self) -> str:
        return self.state.id


DUE: Final = "due"
"""`ApprovalRecord.ran_by` of a request decided and not carried out yet."""
DECIDED_TOPIC: Final = "approvals"
"""The fleet's bus topic a decision is published on (the payload is the request's id)."""


class ApprovalBook(Protocol):
    """Where requests are kept (the store's `ApprovalStore`). Every write is committed when the call returns and
    is a compare-and-set on `record.revision`: None means somebody changed the request since `record` was read
    (`claim` is one on `ran_by`: False means somebody else carries the decision out).

    Every method raises `bot.errors.StoreUnavailable` when the requests cannot be read or written.
    """

    async def create(
        self, ask: ApprovalAsk, gate: str, deadline: float, names: Mapping[int, str] | None = None
    ) -> ApprovalRecord: ...

    async def get(self, approval_id: str) -> ApprovalRecord | None: ...

    async def pending(self) -> list[ApprovalRecord]:
        """Every request still open (pending or being changed)."""
        ...

    async def set_cards(self, record: ApprovalRecord, cards: Sequence[tuple[int, int]]) -> ApprovalRecord:
        """Remember where the host's cards are (not a change of the tally)."""
        ...

    async def vote(
        self, record: ApprovalRecord, new: ApprovalState, ballot: Ballot
    ) -> ApprovalRecord | None: ...

    async def start_change(self, record: ApprovalRecord) -> ApprovalRecord | None: ...

    async def rebind(self, record: ApprovalRecord, ask: ApprovalAsk) -> ApprovalRecord | None: ...

    async def finish(self, record: ApprovalRecord, status: ApprovalStatus) -> ApprovalRecord | None: ...

    async def due(self) -> list[ApprovalRecord]:
        """Every request decided and not carried out yet."""
        ...

    async def claim(self, record: ApprovalRecord, by: str) -> bool:
        """Take the carrying out of a decided request: True for exactly one caller in the whole fleet."""
        ...

    async def remember(self, user_id: int, name: str) -> None:
        """Keep the display name a person shows now."""
        ...

    async def names(self, user_ids: Collection[int]) -> dict[int, str]:
        """The display names kept of `user_ids` (people never seen are left out)."""
        ...

    async def remind(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """Take a pending request's reminder to send: the record for exactly one caller in the fleet, else None."""
        ...

    async def escalate(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """`record.ask.escalate_to` join its approvers (a compare-and-set on the revision)."""
        ...


@dataclass(frozen=True, slots=True)
class Tally:
    """A tap's result: a refusal (an alert; nothing changes) or the new state with the ballot added."""

    state: ApprovalState
    refusal: str | None = None
    ballot: Ballot | None = None
    needs_code: bool = False
    """Refused only for want of a one-time code: ask the approver for one, then count it with the code."""


NEEDS_CODE: Final = (
    "This approval needs a code from your authenticator app: I have asked you in our private chat."
)
"""The refusal of an approval tapped without the code its rule asks for."""


def tally(
    state: ApprovalState,
    user_id: int,
    name: str,
    vote: Vote,
    at: str,
    generation: int = 0,
    factor: Factor = Factor.TAP,
) -> Tally:
    """Count one tap on the request's current content (`generation`: the content the tapped card showed), made
    with `factor` (the host checked the code, if any)."""
    if not state.open:
        return Tally(state, _decided(state))
    if state.status is ApprovalStatus.CHANGING:
        return Tally(state, "The answer is being changed; wait for the new content on the card.")
    if generation != state.generation:
        return Tally(state, "The content changed since this card was drawn; read it again on the card.")
    if user_id not in state.approvers:
        return Tally(state, "You are not an approver of this request.")
    if vote is Vote.APPROVE and user_id == state.requester_id and not state.self_approval:
        return Tally(state, "You asked for this: your own approval does not count.")
    if vote is Vote.APPROVE and any(b.user_id == user_id for b in state.approvals):
        return Tally(state, "You already approved this.")
    if vote is Vote.APPROVE and state.factor.second and not factor.second:
        return Tally(state, NEEDS_CODE, needs_code=True)
    ballot = Ballot(
        user_id, name, vote, state.content_hash, at, factor if vote is Vote.APPROVE else Factor.TAP
    )
    ballots = (*state.ballots, ballot)
    if vote is Vote.REJECT:
        return Tally(replace(state, ballots=ballots, status=ApprovalStatus.REJECTED), ballot=ballot)
    counted = replace(state, ballots=ballots)
    if len(counted.approvals) >= state.quorum:
        counted = replace(counted, status=ApprovalStatus.APPROVED)
    return Tally(counted, ballot=ballot)


def _decided(state: ApprovalState) -> str:
    if state.status is ApprovalStatus.APPROVED:
        return f"Already decided: approved by {names(state.deciders)}."
    if state.status is ApprovalStatus.REJECTED:
        return f"Already decided: rejected by {names(state.deciders)}."
    if state.status is ApprovalStatus.EXPIRED:
        return "Already decided: it expired before enough approvals came."
    return "Already decided: the request was cancelled."

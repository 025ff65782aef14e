"""The approval service: the hub's `Approver`, owning every decision on a request. Host-neutral; awaits its book
and its host, does no I/O of its own.

    hub  --decide(ask)-->  ApprovalService  --create/vote/finish (compare-and-set)-->  ApprovalBook (the store)
                                  |
                                  +--post/redraw/decided-->  ApprovalShow (a host: Telegram's cards)
    host --vote/change(tap)-->  ApprovalService

A request is bound to its content's hash and its people when created; a vote is counted by `tally` and
committed by a compare-and-set on the request's revision, retried on a fresh read when another vote (of this
process or another one) came first: two votes cannot both decide. The book holds the truth; the service keeps
in memory only the calls waiting in this process (woken by a decision, a deadline, a change or `stop`), the
display names it has seen, and the deadline timers of requests a previous process left pending (restored by
`start`). Each change is committed before the host is told.

A request decided in the process that asked for it wakes the waiting call; one decided after a restart (its
call's task is gone) is handed to the host's `run_approved`, once, with the approved content; unless an agent
asked (`orphaned`): its call went with the process, and the host only says so (`AGENT_GONE`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import anyio
from anyio.abc import TaskGroup

from bot.core.approvals import (
    ApprovalAsk,
    ApprovalRecord,
    ApprovalState,
    ApprovalStatus,
    Ballot,
    BookUnavailable,
    Verdict,
    Vote,
    names,
    tally,
)

__all__ = [
    "AGENT_GONE",
    "GONE",
    "STOPPING",
    "STOPPING_AGENT",
    "ApprovalBook",
    "ApprovalService",
    "ApprovalShow",
    "Cast",
    "orphaned",
    "verdict_of",
]

logger = logging.getLogger(__name__)

STOPPING: Final = "the bot is stopping; the approval request stays open and the call runs once it is approved"
GONE: Final = "This approval request no longer exists."
STOPPING_AGENT: Final = (
    "the bot is stopping; the call was not made, and it will not be made after the restart either: call again"
)
"""What an agent's call waiting for approval gets when the bot stops (its request is left pending, `orphaned`)."""
AGENT_GONE: Final = "the agent that asked is gone; not run"
"""An agent's gated call approved after the process that took it ended (`orphaned`)."""
CAS_ATTEMPTS: Final = 5
"""Fresh reads a vote gets when other votes keep committing first."""


class ApprovalBook(Protocol):
    """Where requests are kept (the store's `ApprovalStore`). Every write is committed when the call returns and
    is a compare-and-set on `record.revision`: None means somebody changed the request since `record` was read.

    Every method raises `BookUnavailable` when the requests cannot be read or written.
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
        their call is waiting in this process and will end with `verdict`)."""
        ...

    async def run_approved(self, record: ApprovalRecord, verdict: Verdict) -> None:
        """Run a call approved after the process that asked for it ended, and show its result."""
        ...


@dataclass(frozen=True, slots=True)
class Cast:
    """What a vote or a change got: a line for the person, and whether it was refused (nothing changed)."""

    text: str
    refused: bool = False


@dataclass(slots=True)
class _Waiter:
    agent: bool = False
    """An agent's call waits (through the gateway): it does not outlive this process."""
    done: anyio.Event = field(default_factory=anyio.Event)
    verdict: Verdict | None = None


def orphaned(record: ApprovalRecord, waiting: bool) -> bool:
    """An agent's request decided where no call waits for it (after a restart): not run. The agent's HTTP call
    ended with the process that took it, so nobody would get the result, and the agent may well have tried
    again meanwhile: running it now could run it twice. A person's call is run instead (`run_approved`): its
    result goes to the chat it was asked in."""
    return record.ask.origin.agent is not None and not waiting


def verdict_of(record: ApprovalRecord) -> Verdict:
    """The requester's line for a final request."""
    state = record.state
    nothing = "the call was not made" if record.ask.question is None else "the server was told decline"
    if state.status is ApprovalStatus.APPROVED:
        return Verdict(state.status, f"approved by {names(state.deciders)}", record.id)
    if state.status is ApprovalStatus.REJECTED:
        return Verdict(state.status, f"rejected by {names(state.deciders)}; {nothing}", record.id)
    if state.status is ApprovalStatus.EXPIRED:
        return Verdict(state.status, f"not approved in time; {nothing}", record.id)
    return Verdict(state.status, f"the approval request was cancelled; {nothing}", record.id)


class ApprovalService:
    """The approval requests of one process: give it to the hub as its approver, `start` it in the host's task
    group with the host's `ApprovalShow`, `stop` it before the hub closes.

    `clock` is Unix time: deadlines and ballot times are read from it (tests pass a virtual one).
    """

    def __init__(self, book: ApprovalBook, clock: Callable[[], float] = time.time) -> None:
        self.book = book
        self.clock = clock
        self.people: dict[int, str] = {}
        """Display names of people the host has seen, for cards (and the hub's `names`)."""
        self._show: ApprovalShow | None = None
        self._tg: TaskGroup | None = None
        self._waiters: dict[str, _Waiter] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._stopping = False
        self._timers: set[anyio.CancelScope] = set()

    def name_of(self, user_id: int) -> str:
        return self.people.get(user_id) or f"user {user_id}"

    def seen(self, user_id: int, name: str) -> None:
        """Remember a person's display name."""
        self.people[user_id] = name

    def now(self) -> str:
        """The clock's time as UTC ISO 8601 (a ballot's time)."""
        return dt.datetime.fromtimestamp(self.clock(), dt.UTC).isoformat(timespec="microseconds")

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self, tg: TaskGroup, show: ApprovalShow) -> None:
        """Show requests through `show` from now on; keep the requests a previous process left pending alive
        (their cards stay live, their deadlines hold: a timer each, in `tg`)."""
        self._tg = tg
        self._show = show
        try:
            pending = await self.book.pending()
        except BookUnavailable:
            logger.exception("could not read the pending approval requests")
            return
        for record in pending:
            for user_id, name in record.names.items():
                self.people.setdefault(user_id, name)
            tg.start_soon(self._expire_at, record.id, record.deadline)

    def stop(self) -> None:
        """Release the calls waiting here (their requests stay pending in the book, for the next start)."""
        self._stopping = True
        for scope in self._timers:
            scope.cancel()
        for waiter in self._waiters.values():
            waiter.verdict = Verdict(ApprovalStatus.PENDING, STOPPING_AGENT if waiter.agent else STOPPING)
            waiter.done.set()

    def unavailable(self) -> str | None:
        if self._stopping:
            return "the bot is stopping"
        if self._show is None:
            return "approvals have not started"
        return None

    # -- the hub's Approver ----------------------------------------------------------------------------

    async def decide(self, ask: ApprovalAsk, approval_id: str | None = None) -> Verdict:
        """Store the request (or, with `approval_id`, bind a request being changed to the new content), show
        it, wait for the verdict (or the deadline). Never raises for outcomes."""
        nothing = "the call was not made" if ask.question is None else "the server was told decline"
        show = self._show
        if self._stopping or show is None:
            return Verdict(ApprovalStatus.CANCELLED, f"{self.unavailable()}; {nothing}")
        record: ApprovalRecord | None = None
        try:
            if approval_id is not None:
                current = await self.book.get(approval_id)
                if current is not None and current.state.status is ApprovalStatus.CHANGING:
                    record = await self.book.rebind(current, ask)
            fresh = record is None
            if record is None:
                known = {u: self.people[u] for u in (*ask.approvers, ask.origin.user_id) if u in self.people}
                gate = "call" if ask.question is None else "answers"
                record = await self.book.create(ask, gate, self.clock() + ask.timeout_s, known)
        except BookUnavailable:
            logger.exception("could not store an approval request")
            return Verdict(ApprovalStatus.CANCELLED, f"the approval request could not be recorded; {nothing}")
        waiter = self._waiters[record.id] = _Waiter(agent=ask.origin.agent is not None)
        notice: int | None = None
        try:
            if fresh:
                # Votes wait until the cards are stored: a vote's redraw must find every card.
                async with self._lock(record.id):
                    record = await self._post(show, record)
            else:
                await show.redraw(record)
            if ask.question is not None:
                notice = await show.waiting(record)
            with anyio.move_on_after(max(0.0, record.deadline - self.clock())):
                await waiter.done.wait()
            if waiter.verdict is None:
                await self.expire(record.id)
            return waiter.verdict or Verdict(
                ApprovalStatus.CANCELLED, f"the approval request could not be settled; {nothing}"
            )
        finally:
            del self._waiters[record.id]
            if notice is not None:
                with anyio.CancelScope(shield=True):
                    await show.settled(record, notice, waiter.verdict)

    async def withdraw(self, approval_id: str) -> None:
        """The requester gave up changing the answer (declined or cancelled the question): the request ends."""
        async with self._lock(approval_id):
            try:
                record = await self.book.get(approval_id)
                ended = None if record is None else await self.book.finish(record, ApprovalStatus.CANCELLED)
            except BookUnavailable:
                logger.exception("could not withdraw approval %s", approval_id)
                return
        if ended is not None and self._show is not None:
            await self._show.redraw(ended)

    async def _post(self, show: ApprovalShow, record: ApprovalRecord) -> ApprovalRecord:
        cards = await show.post(record)
        try:
            return await self.book.set_cards(record, cards)
        except BookUnavailable:
            logger.exception("could not store where the approval cards are")
            return record

    # -- votes -----------------------------------------------------------------------------------------

    def _lock(self, approval_id: str) -> anyio.Lock:
        return self._locks.setdefault(approval_id, anyio.Lock())

    async def vote(self, approval_id: str, user_id: int, name: str, vote: Vote, generation: int = 0) -> Cast:
        """One approver's Approve or Reject on the content drawn at `generation`: refused (not an approver,
        own request, already decided, stale content), or counted and committed; the cards are redrawn and a
        decision is carried out."""
        self.seen(user_id, name)
        async with self._lock(approval_id):
            for _ in range(CAS_ATTEMPTS):
                try:
                    record = await self.book.get(approval_id)
                except BookUnavailable:
                    logger.exception("could not read approval %s", approval_id)
                    return Cast("The approval store is unavailable; try again.", refused=True)
                if record is None:
                    return Cast(GONE, refused=True)
                counted = tally(record.state, user_id, name, vote, self.now(), generation)
                if counted.refusal is not None:
                    return Cast(counted.refusal, refused=True)
                assert counted.ballot is not None
                try:
                    updated = await self.book.vote(record, counted.state, counted.ballot)
                except BookUnavailable:
                    logger.exception("could not store a vote on approval %s", record.id)
                    return Cast("Your vote could not be recorded; try again.", refused=True)
                if updated is not None:
                    break
            else:
                return Cast("The request changed meanwhile; try again.", refused=True)
        if self._show is not None:
            await self._show.redraw(updated)
        if updated.state.status is not ApprovalStatus.PENDING:
            await self._decided(updated)
        if vote is Vote.REJECT:
            return Cast("Rejected.")
        return Cast(f"Approved ({len(updated.state.approvals)} of {updated.state.quorum}).")

    async def change(self, approval_id: str, user_id: int) -> Cast:
        """The requester's Change answer (gate "answers"): votes stop counting, the cards say so, and the
        waiting call is told to ask the question again (then `decide` with this id binds the new content)."""
        async with self._lock(approval_id):
            try:
                record = await self.book.get(approval_id)
            except BookUnavailable:
                logger.exception("could not read approval %s", approval_id)
                return Cast("The approval store is unavailable; try again.", refused=True)
            if record is None:
                return Cast(GONE, refused=True)
            if user_id != record.ask.origin.user_id:
                return Cast(f"Only {record.ask.requester} can change this answer.", refused=True)
            waiter = self._waiters.get(record.id)
            if (
                record.state.status is not ApprovalStatus.PENDING
                or waiter is None
                or waiter.verdict is not None
            ):
                return Cast("This answer can no longer be changed.", refused=True)
            try:
                changing = await self.book.start_change(record)
            except BookUnavailable:
                logger.exception("could not start changing approval %s", record.id)
                return Cast("The approval store is unavailable; try again.", refused=True)
            if changing is None:
                return Cast("The request changed meanwhile; try again.", refused=True)
            waiter.verdict = Verdict(ApprovalStatus.PENDING, "changing the answer", record.id, changing=True)
            waiter.done.set()
        if self._show is not None:
            await self._show.redraw(changing)
        return Cast("Change your answer in the question below.")

    async def _decided(self, record: ApprovalRecord) -> None:
        """Tell the requester; wake the waiting call, or (after a restart) have the host run the approved call."""
        verdict = verdict_of(record)
        waiter = self._waiters.get(record.id)
        if self._show is not None:  # told first: "approved by ..." comes before the call's result
            await self._show.decided(record, verdict, waiting=waiter is not None)
        if waiter is not None:
            waiter.verdict = verdict
            waiter.done.set()
        elif (
            verdict.approved
            and record.ask.question is None
            and not orphaned(record, waiting=False)
            and self._show is not None
            and self._tg is not None
        ):
            self._tg.start_soon(self._show.run_approved, record, verdict)

    # -- deadlines -------------------------------------------------------------------------------------

    async def _expire_at(self, approval_id: str, deadline: float) -> None:
        """The deadline of a request a previous process left pending (`stop` ends the wait: the host's task
        group must not wait for it)."""
        with anyio.CancelScope() as scope:
            self._timers.add(scope)
            try:
                await anyio.sleep(max(0.0, deadline - self.clock()))
                await self.expire(approval_id)
            finally:
                self._timers.discard(scope)

    async def expire(self, approval_id: str) -> None:
        """End a request still open at its deadline: committed, cards redrawn, the requester told (or the
        waiting call woken). A request another process decided meanwhile wakes its waiter with that decision."""
        async with self._lock(approval_id):
            try:
                record = await self.book.get(approval_id)
                if record is None:
                    return
                expired = None
                if record.state.open:
                    expired = await self.book.finish(record, ApprovalStatus.EXPIRED)
            except BookUnavailable:
                logger.exception("could not expire approval %s", approval_id)
                return
        waiter = self._waiters.get(approval_id)
        if expired is None:
            if waiter is not None and waiter.verdict is None and not record.state.open:
                waiter.verdict = verdict_of(record)  # decided by another process meanwhile
                waiter.done.set()
            return
        if self._show is not None:
            await self._show.redraw(expired)
        verdict = verdict_of(expired)
        if waiter is not None:
            waiter.verdict = verdict
            waiter.done.set()
        elif self._show is not None:
            await self._show.decided(expired, verdict, waiting=False)

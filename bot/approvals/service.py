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
display names it knows, and the deadline timers of requests a previous process left pending (restored by
`start`). Each change is committed before the host is told.

The names people show are the book's too: a name seen here is written when it is new or changed (`seen`: a
dict lookup otherwise), and the names of a request's people are read from the book before its cards are drawn,
so every process of a fleet draws the same card.

A request decided in the process that asked for it wakes the waiting call; one decided after a restart (its
call's task is gone) is handed to the host's `run_approved`, once, with the approved content; unless an agent
asked (`orphaned`): its call went with the process, and the host only says so (`AGENT_GONE`).

Exactly once, also in a fleet (several processes on one database; docs/fleet.md). A decision is committed as "due"
(`ApprovalRecord.ran_by`), and whoever carries it out (wakes its waiting call with it, or has the host run it,
and tells the requester) first takes it with one compare-and-set (`ApprovalBook.claim`): the loser does nothing.
An approver's tap may decide a request on another instance than the one whose call waits for it:
- the deciding transaction publishes the request's id (the bus topic `approvals`; `listen`): the instance with
  the waiter reads the row and wakes it; after each (re)connect of the bus each instance reads again the
  requests it waits on; and a waiter whose deadline passes reads the row again before expiring it;
- where nobody waits, only the instance that owns the requester (`owns`) carries a decision out: the
  requester's call would be waiting there. On a takeover, the fleet has the new owner `adopt` the dead one's
  requests: their deadline timers, and the decided ones nobody carried out. A single process owns everybody.

Reminders and escalation (a rule's `remind_after_s`, `escalate_after_s`): their times are stored with the
request and timed, like its deadline, by the process whose call waits for it (or, after a restart or a
takeover, by the requester's owner). A reminder is taken with a compare-and-set (`ApprovalBook.remind`) and
sent once; the reminders falling due within `REMIND_BATCH_S` of each other go out together, one message per
approver listing their requests. An escalation is a compare-and-set on the revision like a vote: the new
approvers' votes count from then on, and they get cards of their own.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import platform
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

import anyio
from anyio.abc import TaskGroup

from bot.approvals.show import ApprovalShow, Cast
from bot.approvals.verdicts import (
    CANCELLED_BY_REQUESTER,
    GONE,
    RAN_ELSEWHERE,
    STOPPING,
    STOPPING_AGENT,
    orphaned,
    verdict_of,
)
from bot.core.approvals import (
    DECIDED_TOPIC,
    DUE,
    ApprovalAsk,
    ApprovalBook,
    ApprovalRecord,
    ApprovalStatus,
    Factor,
    Verdict,
    Vote,
    people_of,
    tally,
    unnamed,
)
from bot.core.values import Origin
from bot.errors import StoreUnavailable

__all__ = ["REMIND_BATCH_S", "ApprovalService", "Wakeups"]

logger = logging.getLogger(__name__)

CAS_ATTEMPTS: Final = 5
"""Fresh reads a vote gets when other votes keep committing first."""
REMIND_BATCH_S: Final = 15.0
"""Reminders falling due this close together go out as one message per approver (a flood of requests is one
message, not one per request): each waits at most this long."""


class Wakeups(Protocol):
    """The fleet's bus (`bot.core.fleet.Bus`): `on_message(payload)` for each notification of `topic`,
    `on_connect()` after every (re)connect (notifications may have been missed)."""

    @property
    def shared(self) -> bool:
        """Whether other processes publish on it: a call may wait for a decision in another process."""
        ...

    def subscribe(
        self, topic: str, on_message: Callable[[str], None], on_connect: Callable[[], None] | None = None
    ) -> None: ...


@dataclass(slots=True)
class _Waiter:
    origin: Origin
    agent: bool = False
    """An agent's call waits (through the gateway): it does not outlive this process."""
    cancelled: bool = False
    """Its requester cancelled the call (/cancel): the waiting call ends the request."""
    answer: bool = False
    """Gate "answers": an answer waits, inside a running call."""
    done: anyio.Event = field(default_factory=anyio.Event)
    verdict: Verdict | None = None
    settling: bool = False
    """A decision is being carried out for it (claimed, the requester told): its verdict comes with `done`."""


class ApprovalService:
    """The approval requests of one process: give it to the hub as its approver, `start` it in the host's task
    group with the host's `ApprovalShow`, `stop` it before the hub closes.

    `clock` is Unix time: deadlines and ballot times are read from it, and `sleep` waits for reminders and
    escalations (tests pass virtual ones). In a fleet,
    `owns(user_id)` says whether this process owns a requester (default: a single process owns everybody), and
    `name` is what `ApprovalRecord.ran_by` says of this process.
    """

    def __init__(
        self,
        book: ApprovalBook,
        clock: Callable[[], float] = time.time,
        *,
        owns: Callable[[int], bool] = lambda _user_id: True,
        name: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self.book = book
        self.clock = clock
        self.sleep = sleep
        self.owns = owns
        self.name = name or f"{platform.node()}:{os.getpid()}"
        self.people: dict[int, str] = {}
        """Display names of people the host has seen, for cards (and the hub's `names`)."""
        self._show: ApprovalShow | None = None
        self._tg: TaskGroup | None = None
        self._waiters: dict[str, _Waiter] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._stopping = False
        self._timers: set[anyio.CancelScope] = set()
        self._timed: set[str] = set()
        """Requests with a deadline timer here (a takeover does not start a second one)."""
        self._fleet = False
        """Listening to the fleet's bus: other processes may hold waiting calls."""
        self._nudged: set[str] = set()
        """Requests with a reminder and escalation timer here."""
        self._reminders: list[str] = []
        """Requests whose reminder fell due, to be sent together (`REMIND_BATCH_S`)."""

    def name_of(self, user_id: int) -> str:
        return self.people.get(user_id) or unnamed(user_id)

    async def seen(self, user_id: int, name: str) -> None:
        """Remember a person's display name; the book keeps it when it is new or changed. Every update may pass
        here: a name already known costs a dict lookup, no write. A name the book could not take is kept here
        (it is written with the next change)."""
        if self.people.get(user_id) == name:
            return
        self.people[user_id] = name
        try:
            await self.book.remember(user_id, name)
        except StoreUnavailable:
            logger.warning("the name of user %d was not stored: the database is unavailable", user_id)

    async def _learn(self, user_ids: Collection[int]) -> None:
        """The book's names of `user_ids` over the ones known here, before a card naming them is drawn."""
        try:
            self.people.update(await self.book.names(user_ids))
        except StoreUnavailable:
            logger.warning("names not read: the database is unavailable; cards name whom this process saw")

    async def _redraw(self, show: ApprovalShow, record: ApprovalRecord) -> None:
        await self._learn(people_of(record.ask))
        await show.redraw(record)

    def now(self) -> str:
        """The clock's time as UTC ISO 8601 (a ballot's time)."""
        return dt.datetime.fromtimestamp(self.clock(), dt.UTC).isoformat(timespec="microseconds")

    # -- lifecycle -------------------------------------------------------------------------------------

    def listen(self, bus: Wakeups) -> None:
        """Hear the decisions of the other processes of a fleet (subscribe before the bus runs). A process alone
        (a bus nobody else publishes on) hears nothing: it acts on its own decisions as it makes them."""
        self._fleet = bus.shared
        bus.subscribe(DECIDED_TOPIC, self._heard, self._connected)

    async def start(self, tg: TaskGroup, show: ApprovalShow) -> None:
        """Show requests through `show` from now on; keep the requests a previous process left pending alive
        (their cards stay live, their deadlines hold: a timer each, in `tg`), and carry out the ones it decided
        without carrying them out: of the requesters this process owns (`adopt`)."""
        self._tg = tg
        self._show = show
        await self.adopt(self.owns)

    async def adopt(self, owned: Callable[[int], bool]) -> None:
        """This process now owns the requesters `owned` says (a takeover, or the start): the deadlines of their
        pending requests are timed here, and their decided requests nobody carried out (the call that waited
        died with the previous owner) are carried out, each claimed: run, or for an agent's said to be gone."""
        tg = self._tg
        if tg is None or self._stopping:
            return
        try:
            pending = await self.book.pending()
            due = await self.book.due()
        except StoreUnavailable:
            logger.exception("could not read the pending approval requests")
            return
        for record in pending:
            for user_id, name in record.names.items():
                self.people.setdefault(user_id, name)
            if owned(record.ask.origin.user_id) and record.id not in self._timed:
                self._timed.add(record.id)
                tg.start_soon(self._expire_at, record.id, record.deadline)
            if owned(record.ask.origin.user_id):
                self._nudge_later(record)
        for (
            record
        ) in due:  # carried out before this returns (each approved call is started in the task group)
            if owned(record.ask.origin.user_id):
                await self._conclude(record, adopting=True)

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
                await self._learn(people_of(ask))
                if ask.requester == unnamed(ask.origin.user_id) and ask.origin.user_id in self.people:
                    ask = replace(ask, requester=self.people[ask.origin.user_id])  # seen by another process
                known = {u: self.people[u] for u in people_of(ask) if u in self.people}
                gate = "call" if ask.question is None else "answers"
                record = await self.book.create(ask, gate, self.clock() + ask.timeout_s, known)
        except StoreUnavailable:
            logger.exception("could not store an approval request")
            return Verdict(ApprovalStatus.CANCELLED, f"the approval request could not be recorded; {nothing}")
        waiter = self._waiters[record.id] = _Waiter(
            ask.origin, agent=ask.origin.agent is not None, answer=ask.question is not None
        )
        notice: int | None = None
        try:
            if fresh:
                # Votes wait until the cards are stored: a vote's redraw must find every card. Shielded: a card
                # sent is a card stored, also when the call is cancelled meanwhile (its /cancel redraws it).
                with anyio.CancelScope(shield=True):
                    async with self._lock(record.id):
                        record = await self._post(show, record)
            else:
                await self._redraw(show, record)
            self._nudge_later(record)  # also again once a changed answer is pending again
            if ask.question is not None:
                notice = await show.waiting(record)
            with anyio.move_on_after(max(0.0, record.deadline - self.clock())):
                await waiter.done.wait()
            if waiter.cancelled and waiter.verdict is None:
                waiter.done = anyio.Event()  # set again by whoever settles it now
                if not waiter.settling:
                    await self._cancelled(record.id, waiter)
            if waiter.verdict is None and not waiter.settling:
                await self.expire(record.id)  # reads it again first: it may have been decided elsewhere
            if waiter.settling:  # being carried out by another task (a vote, the bus): its verdict comes
                await waiter.done.wait()
            return waiter.verdict or Verdict(
                ApprovalStatus.CANCELLED, f"the approval request could not be settled; {nothing}"
            )
        finally:
            if waiter.cancelled and waiter.verdict is None and not waiter.settling:
                # The /cancel cancelled the call's task too (gate "answers": the call itself is cancelled):
                # the request still ends for everyone. Its waiter stays known meanwhile, so a vote deciding it
                # at this moment is told of the cancelling, not left to carry out a call nobody waits for.
                with anyio.CancelScope(shield=True):
                    await self._cancelled(record.id, waiter)
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
            except StoreUnavailable:
                logger.exception("could not withdraw approval %s", approval_id)
                return
        if ended is not None and self._show is not None:
            await self._redraw(self._show, ended)

    def cancel(self, covered: Callable[[Origin], bool]) -> int:
        """/cancel: each call waiting here for a request of a `covered` requester ends it (cancelled, cards
        redrawn, audited) and is told so; returns how many calls (an answer waiting for approval belongs to a
        call its host cancels and counts)."""
        count = 0
        for waiter in self._waiters.values():
            if (
                covered(waiter.origin)
                and not (waiter.cancelled or waiter.settling)
                and waiter.verdict is None
            ):
                waiter.cancelled = True
                waiter.done.set()
                count += 0 if waiter.answer else 1
        return count

    async def _cancelled(self, approval_id: str, waiter: _Waiter) -> None:
        """End a request its requester cancelled; one decided meanwhile is carried out with that decision."""
        ended = await self._end_open(approval_id, ApprovalStatus.CANCELLED, "cancel")
        if ended is None:
            return
        if self._show is not None:
            await self._redraw(self._show, ended)
        nothing = "the call was not made" if ended.ask.question is None else "the server was told decline"
        waiter.verdict = Verdict(ApprovalStatus.CANCELLED, f"{CANCELLED_BY_REQUESTER}; {nothing}", ended.id)

    async def _post(self, show: ApprovalShow, record: ApprovalRecord) -> ApprovalRecord:
        cards = await show.post(record)
        try:
            return await self.book.set_cards(record, cards)
        except StoreUnavailable:
            logger.exception("could not store where the approval cards are")
            return record

    # -- votes -----------------------------------------------------------------------------------------

    def _lock(self, approval_id: str) -> anyio.Lock:
        return self._locks.setdefault(approval_id, anyio.Lock())

    async def vote(
        self,
        approval_id: str,
        user_id: int,
        name: str,
        vote: Vote,
        generation: int = 0,
        card: tuple[int, int] | None = None,
        factor: Factor = Factor.TAP,
    ) -> Cast:
        """One approver's Approve or Reject on the content drawn at `generation`: refused (not an approver,
        own request, already decided, stale content), or counted and committed; the cards are redrawn and a
        decision is carried out. `card` (chat, message) is the card tapped: redrawn as well when its place is
        not stored (yet): in a fleet, the process that posted it may store it after this vote, or have died
        between sending it and storing where it is. `factor` is how the approver proved it was them (the host
        checked the one-time code); an approval without the code its request asks for is refused with
        `Cast.needs_code`."""
        await self.seen(user_id, name)
        async with self._lock(approval_id):
            for _ in range(CAS_ATTEMPTS):
                try:
                    record = await self.book.get(approval_id)
                except StoreUnavailable:
                    logger.exception("could not read approval %s", approval_id)
                    return Cast("The approval store is unavailable; try again.", refused=True)
                if record is None:
                    return Cast(GONE, refused=True)
                counted = tally(record.state, user_id, name, vote, self.now(), generation, factor)
                if counted.refusal is not None:
                    return Cast(counted.refusal, refused=True, needs_code=counted.needs_code)
                assert counted.ballot is not None
                try:
                    updated = await self.book.vote(record, counted.state, counted.ballot)
                except StoreUnavailable:
                    logger.exception("could not store a vote on approval %s", record.id)
                    return Cast("Your vote could not be recorded; try again.", refused=True)
                if updated is not None:
                    break
            else:
                return Cast("The request changed meanwhile; try again.", refused=True)
        if self._show is not None:
            shown = (
                updated
                if card is None or card in updated.cards
                else replace(updated, cards=(*updated.cards, card))
            )
            await self._redraw(self._show, shown)
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
            except StoreUnavailable:
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
            except StoreUnavailable:
                logger.exception("could not start changing approval %s", record.id)
                return Cast("The approval store is unavailable; try again.", refused=True)
            if changing is None:
                return Cast("The request changed meanwhile; try again.", refused=True)
            waiter.verdict = Verdict(ApprovalStatus.PENDING, "changing the answer", record.id, changing=True)
            waiter.done.set()
        if self._show is not None:
            await self._redraw(self._show, changing)
        return Cast("Change your answer in the question below.")

    async def _decided(self, record: ApprovalRecord) -> None:
        """A vote here decided the request: carry it out (`_conclude`)."""
        await self._conclude(record)

    async def _conclude(self, record: ApprovalRecord, adopting: bool = False) -> None:
        """Carry out a decided request, if it is this process's to carry out: wake the call waiting here, or
        (nobody waits here) have the host run the approved call when the requester is owned here."""
        waiter = self._waiters.get(record.id)
        if waiter is not None:
            if waiter.settling or waiter.verdict is not None:
                return
            waiter.settling = True
        elif not self._ours(record, adopting):
            return
        verdict = await self._carry_out(record, waiter is not None)
        if waiter is not None:
            waiter.verdict = verdict
            waiter.done.set()

    def _ours(self, record: ApprovalRecord, adopting: bool) -> bool:
        """Whether this process carries out a decided request nobody waits for here: one due (decided, not
        carried out), cancelled by nobody's withdrawal, of a requester owned here (their call would wait here).
        An agent's call waits in whichever process its HTTP request reached: in a fleet only a takeover
        (`adopting`) says it is gone."""
        if record.ran_by != DUE or record.state.status is ApprovalStatus.CANCELLED:
            return False
        if adopting:
            return True
        if self._fleet and record.ask.origin.agent is not None:
            return False
        return self.owns(record.ask.origin.user_id)

    async def _carry_out(self, record: ApprovalRecord, waiting: bool) -> Verdict:
        """Claim the decision (one process in the fleet wins), then tell the requester and, when nobody waits
        here, have the host run the approved call. The verdict for a call waiting here: a lost claim of an
        approval is not an approval (the call ran, or was found orphaned, elsewhere)."""
        verdict = verdict_of(record, self.name_of)
        try:
            won = await self.book.claim(record, self.name)
        except StoreUnavailable:
            logger.exception("could not claim approval %s", record.id)
            if not verdict.approved:
                return verdict
            return Verdict(ApprovalStatus.CANCELLED, "the approval could not be recorded; not run", record.id)
        if not won:
            return (
                Verdict(ApprovalStatus.CANCELLED, RAN_ELSEWHERE, record.id) if verdict.approved else verdict
            )
        show = self._show
        # Told first: "approved by ..." comes before the call's result; a waiting call says "expired" itself.
        if show is not None and not (waiting and record.state.status is ApprovalStatus.EXPIRED):
            await show.decided(record, verdict, waiting=waiting)
        if (
            not waiting
            and verdict.approved
            and record.ask.question is None
            and not orphaned(record, waiting=False)
            and show is not None
            and self._tg is not None
        ):
            self._tg.start_soon(show.run_approved, record, verdict)
        return verdict

    # -- the fleet's bus -------------------------------------------------------------------------------

    def _heard(self, approval_id: str) -> None:
        """Another process (or this one) decided a request: look at it."""
        if self._tg is not None and not self._stopping:
            self._tg.start_soon(self._look, approval_id)

    def _connected(self) -> None:
        """The bus (re)connected: decisions may have been missed; look again at the requests waited on here."""
        if self._tg is not None and not self._stopping:
            for approval_id in list(self._waiters):
                self._tg.start_soon(self._look, approval_id)

    async def _look(self, approval_id: str) -> None:
        try:
            record = await self.book.get(approval_id)
        except StoreUnavailable:
            logger.exception("could not read approval %s", approval_id)
            return
        if record is not None and not record.state.open:
            await self._conclude(record)

    # -- reminders and escalation ----------------------------------------------------------------------

    def _nudge_later(self, record: ApprovalRecord) -> None:
        """Time the request's reminder and escalation here (once per process)."""
        tg = self._tg
        if tg is None or self._stopping or record.next_nudge is None or record.id in self._nudged:
            return
        self._nudged.add(record.id)
        tg.start_soon(self._nudge, record)

    async def _nudge(self, record: ApprovalRecord) -> None:
        """Wait for each reminder and escalation time the stored request has left, and act on it."""
        with anyio.CancelScope() as scope:
            self._timers.add(scope)
            try:
                current: ApprovalRecord | None = record
                batched = False
                while current is not None:
                    if batched:  # taken when its batch goes out
                        current = replace(current, reminded_at=current.reminded_at or self.now())
                    at = current.next_nudge
                    if at is None:
                        return
                    await self.sleep(max(0.0, at - self.clock()))
                    if current.remind_at == at and current.reminded_at is None:
                        self._remind_soon(current.id)
                        batched = True
                    if current.escalate_at == at and current.escalated_at is None:
                        await self._escalate(current.id)
                    try:
                        current = await self.book.get(current.id)
                    except StoreUnavailable:
                        logger.exception("could not read approval %s", record.id)
                        return
            finally:
                self._timers.discard(scope)
                self._nudged.discard(record.id)

    def _remind_soon(self, approval_id: str) -> None:
        """Add a request to the reminders going out together; the first of a batch starts its wait."""
        if approval_id in self._reminders or self._tg is None:
            return
        self._reminders.append(approval_id)
        if len(self._reminders) == 1:
            self._tg.start_soon(self._send_reminders)

    async def _send_reminders(self) -> None:
        """After `REMIND_BATCH_S`, take each batched request's reminder (once in the fleet), and send each
        approver who has not voted one message listing their requests."""
        with anyio.CancelScope() as scope:
            self._timers.add(scope)
            try:
                await self.sleep(REMIND_BATCH_S)
            finally:
                self._timers.discard(scope)
        if scope.cancel_called:
            return
        batch, self._reminders = self._reminders, []
        waiting: dict[int, list[ApprovalRecord]] = {}
        for approval_id in batch:
            try:
                record = await self.book.get(approval_id)
                taken = None if record is None else await self.book.remind(record)
            except StoreUnavailable:
                logger.exception("could not take the reminder of approval %s", approval_id)
                continue
            if taken is not None:
                for user_id in taken.state.unanswered:
                    waiting.setdefault(user_id, []).append(taken)
        show = self._show
        if show is None or not waiting:
            return
        await self._learn({u for records in waiting.values() for r in records for u in people_of(r.ask)})
        for user_id, records in sorted(waiting.items()):
            await show.remind(user_id, records)

    async def _escalate(self, approval_id: str) -> None:
        """More approvers join a pending request: committed, shown to them, every card redrawn."""
        async with self._lock(approval_id):
            for _ in range(CAS_ATTEMPTS):
                try:
                    record = await self.book.get(approval_id)
                    if record is None or record.state.status is not ApprovalStatus.PENDING:
                        return
                    if record.escalated_at is not None:
                        return
                    escalated = await self.book.escalate(record)
                except StoreUnavailable:
                    logger.exception("could not escalate approval %s", approval_id)
                    return
                if escalated is not None:
                    break
            else:
                return
            show = self._show
            if show is None:
                return
            added = escalated.state.approvers - record.state.approvers
            await self._learn(people_of(escalated.ask))
            cards = await show.escalated(escalated, added) if added else ()
            if cards:
                try:
                    await self.book.set_cards(escalated, (*escalated.cards, *cards))
                except StoreUnavailable:
                    logger.exception("could not store where the approval cards are")
        await show.redraw(escalated)  # the cards there were before: the new ones were drawn escalated

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
                self._timed.discard(approval_id)

    async def expire(self, approval_id: str) -> None:
        """End a request still open at its deadline: committed, cards redrawn, the requester told (or the
        waiting call woken). A request decided meanwhile (by another process, a notification that did not come)
        is carried out with that decision instead, if it is this process's to carry out."""
        expired = await self._end_open(approval_id, ApprovalStatus.EXPIRED, "expire")
        if expired is None:
            return
        if self._show is not None:
            await self._redraw(self._show, expired)
        await self._conclude(expired)

    async def _end_open(self, approval_id: str, status: ApprovalStatus, doing: str) -> ApprovalRecord | None:
        """End the request with `status` if it is still open: the ended record. None when it was not: one decided
        meanwhile (by another process, a notification that did not come) is carried out with that decision
        here, if it is this process's to carry out; or when the store failed (logged, naming what was `doing`)."""
        async with self._lock(approval_id):
            try:
                record = await self.book.get(approval_id)
                ended = None
                if record is not None and record.state.open:
                    ended = await self.book.finish(record, status)
                    if ended is None:  # decided meanwhile
                        record = await self.book.get(approval_id)
            except StoreUnavailable:
                logger.exception("could not %s approval %s", doing, approval_id)
                return None
        if ended is None and record is not None and not record.state.open:
            await self._conclude(record)
        return ended

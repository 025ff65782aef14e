"""Tests for bot/approvals/service.py against the real store, on SQLite and PostgreSQL: quorum, a reject,
a double tap, two votes racing from two processes, expiry on an injected clock, a change of the answer, a
request a stopped process left pending decided by the next one, and a decision a process died before carrying
out, carried out once by the next. (Several processes at once: test_approval_fleet.py.)

The host is a recording `ApprovalShow` (what a host is told), the clock a virtual one: nothing sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import TaskGroup

from bot.approvals import STOPPING, ApprovalService
from bot.config import Secret, StorageConfig
from bot.core import Origin
from bot.core.approvals import (
    DUE,
    ApprovalAsk,
    ApprovalBook,
    ApprovalRecord,
    ApprovalState,
    ApprovalStatus,
    Ballot,
    Verdict,
    Vote,
    unnamed,
)
from bot.store import Store, open_store
from bot.telegram.approval_cards import approval_screen

pytestmark = pytest.mark.anyio

ALICE = Origin(chat_id=-5001, user_id=1001)
BOB, CAROL, DAVE = 1002, 3003, 3004
WAIT_S = 10.0


def ask(**changes: object) -> ApprovalAsk:
    values: dict[str, object] = {
        "origin": ALICE,
        "requester": "Alice",
        "server": "prod",
        "tool": "deploy",
        "content": {"service": "web", "version": "1.2.3"},
        "approvers": frozenset({BOB, CAROL, DAVE}),
        "quorum": 2,
        "chat": -7001,
        "self_approval": False,
        "timeout_s": 60.0,
    }
    values.update(changes)
    return ApprovalAsk(**values)  # type: ignore[arg-type]


@dataclass
class Clock:
    """Unix time that moves only when a test moves it."""

    now: float = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Shown:
    """A host's `ApprovalShow` that writes down what it is told; `on_post` runs as the cards go out."""

    on_post: Callable[[], None] = lambda: None
    posted: list[ApprovalRecord] = field(default_factory=list)
    redrawn: list[ApprovalStatus] = field(default_factory=list)
    told: list[tuple[ApprovalStatus, bool]] = field(default_factory=list)
    """(status, waiting) of each `decided`."""
    ran: list[ApprovalRecord] = field(default_factory=list)
    reminded: list[tuple[int, list[str]]] = field(default_factory=list)
    """(approver, the requests listed) of each reminder."""
    escalations: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    _told: anyio.Event = field(default_factory=anyio.Event)

    def _tell(self) -> None:
        told, self._told = self._told, anyio.Event()
        told.set()

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait until `done()` holds (checked each time the host is told something)."""
        with anyio.fail_after(WAIT_S):
            while not done():
                await self._told.wait()

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        self.on_post()
        self.posted.append(record)
        self._tell()
        return [(-7001, len(self.posted))]

    async def redraw(self, record: ApprovalRecord) -> None:
        self.redrawn.append(record.state.status)
        self._tell()

    async def waiting(self, record: ApprovalRecord) -> int | None:
        return 77

    async def settled(self, record: ApprovalRecord, notice: int, verdict: Verdict | None) -> None:
        pass

    async def decided(self, record: ApprovalRecord, verdict: Verdict, waiting: bool) -> None:
        self.told.append((verdict.status, waiting))
        self._tell()

    async def run_approved(self, record: ApprovalRecord, verdict: Verdict) -> None:
        self.ran.append(record)
        self._tell()

    async def remind(self, user_id: int, records: Sequence[ApprovalRecord]) -> None:
        self.reminded.append((user_id, [r.id for r in records]))
        self._tell()

    async def escalated(self, record: ApprovalRecord, added: frozenset[int]) -> Sequence[tuple[int, int]]:
        self.escalations.append((record.id, added))
        self._tell()
        return [(u, 1) for u in sorted(added)]


@dataclass
class Asked:
    """A `decide` running in a task: its request once shown, its verdict once decided."""

    shown: Shown
    verdict: Verdict | None = None
    done: anyio.Event = field(default_factory=anyio.Event)

    @property
    def id(self) -> str:
        return self.shown.posted[-1].id

    async def result(self) -> Verdict:
        with anyio.fail_after(WAIT_S):
            await self.done.wait()
        assert self.verdict is not None
        return self.verdict


@asynccontextmanager
async def running(
    book: ApprovalBook, clock: Clock, shown: Shown
) -> AsyncIterator[tuple[ApprovalService, TaskGroup]]:
    """A started service in its task group; stopped (its timers ended) on the way out."""
    service = ApprovalService(book, clock)
    async with anyio.create_task_group() as tg:
        await service.start(tg, shown)
        try:
            yield service, tg
        finally:
            service.stop()


async def asking(service: ApprovalService, tg: TaskGroup, shown: Shown, request: ApprovalAsk) -> Asked:
    """Start `decide(request)` and return once its cards are out."""
    asked = Asked(shown)

    async def decide() -> None:
        asked.verdict = await service.decide(request)
        asked.done.set()

    before = len(shown.posted)
    tg.start_soon(decide)
    await shown.until(lambda: len(shown.posted) > before)
    return asked


@dataclass
class WhereRedrawn(Shown):
    """A host that writes down which cards each redraw is for; with `stored` False, where the cards were posted is
    never known to the book (their poster died between sending them and storing their places)."""

    stored: bool = True
    cards: list[tuple[tuple[int, int], ...]] = field(default_factory=list)

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        posted = await super().post(record)
        return posted if self.stored else []

    async def redraw(self, record: ApprovalRecord) -> None:
        self.cards.append(record.cards)
        await super().redraw(record)


@pytest.mark.parametrize("stored", [True, False])
async def test_a_vote_redraws_the_card_it_was_given_on_also_when_its_place_was_not_stored(
    store: Store, stored: bool
) -> None:
    """Bob approves on the card at (-7001, 1): it is redrawn, once, whether or not the book knew it was there."""
    shown = WhereRedrawn(stored=stored)
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        await service.vote(asked.id, BOB, "Bob", Vote.APPROVE, card=(-7001, 1))
    assert shown.cards[0] == ((-7001, 1),)


async def test_a_quorum_of_two_decides_on_the_second_approval_and_wakes_the_call(store: Store) -> None:
    """Bob's approval counts (1 of 2) and decides nothing; Carol's makes the quorum: the waiting call gets
    "approved by Bob and Carol", the book says approved, the host is told once (the call is waiting)."""
    shown = Shown()
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        assert (await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)).text == "Approved (1 of 2)."
        record = await store.approvals.get(asked.id)
        assert record is not None and record.state.status is ApprovalStatus.PENDING
        assert not asked.done.is_set() and shown.told == []
        assert (await service.vote(asked.id, CAROL, "Carol", Vote.APPROVE)).text == "Approved (2 of 2)."
        verdict = await asked.result()
    assert (
        verdict.approved and verdict.text == "approved by Bob and Carol" and verdict.approval_id == asked.id
    )
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.APPROVED
    assert shown.told == [(ApprovalStatus.APPROVED, True)] and shown.ran == []
    assert shown.redrawn == [ApprovalStatus.PENDING, ApprovalStatus.APPROVED]


async def test_one_reject_ends_the_request_and_later_votes_are_refused(store: Store) -> None:
    """Bob approves, Dave rejects: the call is refused at once ("rejected by Dave"); Carol's approval after
    that is refused as already decided and changes nothing."""
    shown = Shown()
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        assert (await service.vote(asked.id, DAVE, "Dave", Vote.REJECT)).text == "Rejected."
        verdict = await asked.result()
        late = await service.vote(asked.id, CAROL, "Carol", Vote.APPROVE)
    assert (
        verdict.status is ApprovalStatus.REJECTED
        and verdict.text == "rejected by Dave; the call was not made"
    )
    assert late.refused and late.text == "Already decided: rejected by Dave."
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.REJECTED
    assert sorted(b.name for b in record.state.ballots) == ["Bob", "Dave"]  # the clock stood still: same time


async def test_a_double_tap_by_one_approver_counts_once(store: Store) -> None:
    """Bob taps Approve twice: the second is refused and stored nowhere; the request still needs a second
    approver, and Carol's is the one that decides it."""
    shown = Shown()
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        again = await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        record = await store.approvals.get(asked.id)
        assert record is not None and record.state.status is ApprovalStatus.PENDING
        assert len(record.state.ballots) == 1 and not asked.done.is_set()
        await service.vote(asked.id, CAROL, "Carol", Vote.APPROVE)
        verdict = await asked.result()
    assert again.refused and again.text == "You already approved this."
    assert verdict.text == "approved by Bob and Carol"


@dataclass
class Reads:
    """Reads of a request by the racing processes; `both` is set once two happened."""

    count: int = 0
    both: anyio.Event = field(default_factory=anyio.Event)


@dataclass
class Racing:
    """One process's store when two processes' reads of a request interleave: a vote is written only once
    both have read it, so both votes are cast on the same revision. The rest passes through."""

    book: ApprovalBook
    reads: Reads

    async def get(self, approval_id: str) -> ApprovalRecord | None:
        record = await self.book.get(approval_id)
        self.reads.count += 1
        if self.reads.count >= 2:
            self.reads.both.set()
        return record

    async def vote(self, record: ApprovalRecord, new: ApprovalState, ballot: Ballot) -> ApprovalRecord | None:
        with anyio.fail_after(WAIT_S):
            await self.reads.both.wait()
        return await self.book.vote(record, new, ballot)

    async def create(
        self, ask: ApprovalAsk, gate: str, deadline: float, names: Mapping[int, str] | None = None
    ) -> ApprovalRecord:
        return await self.book.create(ask, gate, deadline, names)

    async def pending(self) -> list[ApprovalRecord]:
        return await self.book.pending()

    async def set_cards(self, record: ApprovalRecord, cards: Sequence[tuple[int, int]]) -> ApprovalRecord:
        return await self.book.set_cards(record, cards)

    async def start_change(self, record: ApprovalRecord) -> ApprovalRecord | None:
        return await self.book.start_change(record)

    async def rebind(self, record: ApprovalRecord, ask: ApprovalAsk) -> ApprovalRecord | None:
        return await self.book.rebind(record, ask)

    async def finish(self, record: ApprovalRecord, status: ApprovalStatus) -> ApprovalRecord | None:
        return await self.book.finish(record, status)

    async def due(self) -> list[ApprovalRecord]:
        return await self.book.due()

    async def claim(self, record: ApprovalRecord, by: str) -> bool:
        return await self.book.claim(record, by)

    async def remember(self, user_id: int, name: str) -> None:
        await self.book.remember(user_id, name)

    async def names(self, user_ids: Collection[int]) -> dict[int, str]:
        return await self.book.names(user_ids)

    async def remind(self, record: ApprovalRecord) -> ApprovalRecord | None:
        return await self.book.remind(record)

    async def escalate(self, record: ApprovalRecord) -> ApprovalRecord | None:
        return await self.book.escalate(record)


@dataclass
class Drawn(Shown):
    """A host that draws each card as Telegram does (`approval_screen`), naming people by `name_of`: its own
    process's service, as `TelegramApprovals` does."""

    name_of: Callable[[int], str] = unnamed
    texts: list[str] = field(default_factory=list)

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        self.texts.append(approval_screen(record.ask, record.state, self.name_of, record.deadline).text)
        return await super().post(record)

    async def redraw(self, record: ApprovalRecord) -> None:
        self.texts.append(approval_screen(record.ask, record.state, self.name_of, record.deadline).text)
        await super().redraw(record)


async def test_two_processes_draw_the_same_names_on_a_card_whoever_saw_the_people(
    store: Store, store_url: str
) -> None:
    """Carol and Dave were seen by process A only, Bob by B only (as a fleet routes people to their owners). A
    request asked on B names all three approvers on its card, and so does A's redraw of it after Carol's vote
    there; Carol's new name, seen by B, is on A's next card."""
    clock = Clock()
    drawn_a, drawn_b = Drawn(), Drawn()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as other,
        running(store.approvals, clock, drawn_a) as (a, _),
        running(other.approvals, clock, drawn_b) as (b, tg_b),
    ):
        drawn_a.name_of, drawn_b.name_of = a.name_of, b.name_of
        await a.seen(CAROL, "Carol")
        await a.seen(DAVE, "Dave")
        await b.seen(BOB, "Bob")
        asked = await asking(b, tg_b, drawn_b, ask(quorum=3))
        await a.vote(asked.id, CAROL, "Carol", Vote.APPROVE)
        await b.seen(CAROL, "Caro")
        await a.vote(asked.id, DAVE, "Dave", Vote.APPROVE)
    (posted,) = drawn_b.texts
    first, second = drawn_a.texts
    assert "Needs 3 of: Bob, Carol, Dave" in posted and "Needs 3 of: Bob, Carol, Dave" in first
    assert "Needs 3 of: Bob, Caro, Dave" in second


@dataclass
class Remembers(Racing):
    """A process's store that counts the names written to it."""

    written: list[tuple[int, str]] = field(default_factory=list)

    async def remember(self, user_id: int, name: str) -> None:
        self.written.append((user_id, name))
        await super().remember(user_id, name)


async def test_a_name_is_written_when_it_is_new_or_changed_not_on_every_update(store: Store) -> None:
    """Every update passes through `seen`: a hundred updates of Carol write her name once, and her new name once."""
    book = Remembers(store.approvals, Reads())
    async with running(book, Clock(), Shown()) as (service, _):
        for name in ["Carol"] * 100 + ["Caro"] * 100:
            await service.seen(CAROL, name)
    assert book.written == [(CAROL, "Carol"), (CAROL, "Caro")]
    assert await store.approvals.names([CAROL, DAVE]) == {CAROL: "Caro"}


async def test_two_votes_racing_from_two_processes_decide_once(store: Store, store_url: str) -> None:
    """After Bob's approval, Carol (on one process) approves while Dave (on another, with its own connection to
    the database) rejects, both having read the same revision: exactly one of them decides; the other's vote
    is written nowhere and, read again, refused as already decided."""
    shown = Shown()
    async with running(store.approvals, Clock(), shown) as (requester, tg):
        asked = await asking(requester, tg, shown, ask())
        await requester.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        reads = Reads()
        casts: dict[str, str] = {}
        async with (
            open_store(StorageConfig(url=Secret(store_url))) as other,
            running(Racing(store.approvals, reads), Clock(), Shown()) as (carols, _),
            running(Racing(other.approvals, reads), Clock(), Shown()) as (daves, _),
            anyio.create_task_group() as votes,
        ):

            async def carol() -> None:
                casts["Carol"] = (await carols.vote(asked.id, CAROL, "Carol", Vote.APPROVE)).text

            async def dave() -> None:
                casts["Dave"] = (await daves.vote(asked.id, DAVE, "Dave", Vote.REJECT)).text

            votes.start_soon(carol)
            votes.start_soon(dave)
    record = await store.approvals.get(asked.id)
    assert record is not None and reads.count == 3  # both read revision 1; the loser read it again
    assert record.state.status in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)
    winner, loser = ("Carol", "Dave") if record.state.status is ApprovalStatus.APPROVED else ("Dave", "Carol")
    assert sorted(b.name for b in record.state.ballots) == sorted(["Bob", winner])
    assert casts[winner] == ("Approved (2 of 2)." if winner == "Carol" else "Rejected.")
    assert casts[loser].startswith("Already decided: ")


async def test_a_request_expires_at_its_deadline_on_the_injected_clock(store: Store) -> None:
    """The clock passes the 60 s deadline while the cards go out: the call is told "not approved in time",
    the book says expired, and a late approval is refused."""
    clock = Clock()
    shown = Shown()

    def time_passes() -> None:
        clock.now += 61

    shown.on_post = time_passes
    async with running(store.approvals, clock, shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        verdict = await asked.result()
        late = await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
    assert (
        verdict.status is ApprovalStatus.EXPIRED
        and verdict.text.startswith("not approved in time (no answer from ")
        and verdict.text.endswith("; the call was not made")
    )
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.EXPIRED
    assert late.refused and late.text == "Already decided: it expired before enough approvals came."
    assert shown.redrawn == [ApprovalStatus.EXPIRED] and shown.told == []


async def test_a_request_another_process_expired_unheard_wakes_the_call_waiting_here_at_its_deadline(
    store: Store, store_url: str
) -> None:
    """Another process's timer ends the request first (written to the database; its wake-up never reached this
    one): at its own deadline this process finds it ended, not open, and still wakes the call waiting here with
    that outcome, once."""
    shown = Shown()
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        async with open_store(StorageConfig(url=Secret(store_url))) as other:
            record = await other.approvals.get(asked.id)
            assert record is not None
            assert await other.approvals.finish(record, ApprovalStatus.EXPIRED) is not None
        await service.expire(asked.id)
        verdict = await asked.result()
    assert verdict.status is ApprovalStatus.EXPIRED and verdict.text.startswith("not approved in time")
    assert shown.redrawn == []  # ended elsewhere: the cards are that process's to redraw


async def test_a_request_left_pending_by_a_stopped_process_is_restored_and_decided_by_the_next(
    store: Store, store_url: str
) -> None:
    """Process A asks, Bob approves (1 of 2), A stops: its call is released, the request stays pending. Process
    B, on its own connection, restores it (the names known when asked included): Carol's approval on B decides
    it, and B's host is asked to run the approved call, once."""
    clock = Clock()
    shown_a = Shown()
    async with running(store.approvals, clock, shown_a) as (a, tg):
        await a.seen(CAROL, "Carol")
        asked = await asking(a, tg, shown_a, ask())
        await a.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        a.stop()
        released = await asked.result()
    assert released.status is ApprovalStatus.PENDING and released.text == STOPPING

    shown_b = Shown()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as again,
        running(again.approvals, clock, shown_b) as (b, _),
    ):
        assert b.name_of(CAROL) == "Carol"
        cast = await b.vote(asked.id, CAROL, "Carol", Vote.APPROVE)
        await shown_b.until(lambda: shown_b.ran != [])
    assert cast.text == "Approved (2 of 2)."
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)]
    (ran,) = shown_b.ran
    assert ran.id == asked.id and ran.ask.content == {"service": "web", "version": "1.2.3"}
    assert ran.state.status is ApprovalStatus.APPROVED


async def test_a_request_a_stopped_process_left_past_its_deadline_expires_at_the_next_start(
    store: Store, store_url: str
) -> None:
    """A stops with a request pending; B starts after its deadline (on the clock): B expires it and tells the
    requester (nobody waits for it in B)."""
    clock = Clock()
    shown_a = Shown()
    async with running(store.approvals, clock, shown_a) as (a, tg):
        asked = await asking(a, tg, shown_a, ask())
        a.stop()
        await asked.result()
    clock.now += 61
    shown_b = Shown()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as again,
        running(again.approvals, clock, shown_b),
    ):
        await shown_b.until(lambda: shown_b.told != [])
    assert shown_b.told == [(ApprovalStatus.EXPIRED, False)]
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.EXPIRED


async def test_a_changed_answer_is_bound_to_the_new_content_and_old_cards_are_refused(store: Store) -> None:
    """Gate "answers": Alice changes her answer: her call is told to ask again; `decide` with the request's id
    binds it to the new content (a new generation); a tap on the card drawn for the old content is refused,
    and approvals of the new one decide it."""
    shown = Shown()
    question = ask(question="Which version?", content={"version": "1"})
    async with running(store.approvals, Clock(), shown) as (service, tg):
        asked = await asking(service, tg, shown, question)
        assert (await service.change(asked.id, BOB)).text == "Only Alice can change this answer."
        assert (
            await service.change(asked.id, ALICE.user_id)
        ).text == "Change your answer in the question below."
        changing = await asked.result()
        assert changing.changing and changing.approval_id == asked.id
        again = Asked(shown)

        async def decide_again() -> None:
            again.verdict = await service.decide(
                ask(question="Which version?", content={"version": "2"}), changing.approval_id
            )
            again.done.set()

        tg.start_soon(decide_again)
        await shown.until(lambda: shown.redrawn == [ApprovalStatus.CHANGING, ApprovalStatus.PENDING])
        stale = await service.vote(asked.id, BOB, "Bob", Vote.APPROVE, generation=0)
        await service.vote(asked.id, BOB, "Bob", Vote.APPROVE, generation=1)
        await service.vote(asked.id, CAROL, "Carol", Vote.APPROVE, generation=1)
        verdict = await again.result()
    assert stale.refused and stale.text.startswith("The content changed since this card was drawn")
    assert verdict.approved and verdict.approval_id == asked.id
    record = await store.approvals.get(asked.id)
    assert record is not None and record.ask.content == {"version": "2"}
    assert [b.content_hash for b in record.state.approvals] == [record.state.content_hash] * 2


@dataclass
class DiesClaiming(Racing):
    """A process's store in which the process dies while it claims a decision: committed as due, never carried
    out (`claiming` is set when it gets there; the claim never returns)."""

    claiming: anyio.Event = field(default_factory=anyio.Event)

    async def vote(self, record: ApprovalRecord, new: ApprovalState, ballot: Ballot) -> ApprovalRecord | None:
        return await self.book.vote(record, new, ballot)

    async def claim(self, record: ApprovalRecord, by: str) -> bool:
        self.claiming.set()
        await anyio.sleep_forever()
        raise AssertionError("not reached")


async def test_a_decision_a_process_died_before_carrying_out_is_carried_out_once_by_the_next(
    store: Store, store_url: str
) -> None:
    """A (a single process) has the request decided and dies between committing the decision and carrying it
    out: the call never ran. B, starting on its own connection, finds it due: runs it and tells the requester,
    once; a third start finds nothing left to do."""
    clock, shown_a = Clock(), Shown()
    dying = DiesClaiming(store.approvals, Reads())
    a = ApprovalService(dying, clock)
    async with anyio.create_task_group() as tg:
        await a.start(tg, shown_a)
        asked = await asking(a, tg, shown_a, ask())
        await a.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        tg.start_soon(a.vote, asked.id, CAROL, "Carol", Vote.APPROVE)
        with anyio.fail_after(WAIT_S):
            await dying.claiming.wait()
        tg.cancel_scope.cancel()  # A dies: every task of it ends where it is
    assert shown_a.told == [] and shown_a.ran == []
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.APPROVED and record.ran_by == DUE

    for shown in (shown_b := Shown(), shown_c := Shown()):
        async with (
            open_store(StorageConfig(url=Secret(store_url))) as again,
            running(again.approvals, clock, shown),
        ):
            if shown is shown_b:
                await shown.until(lambda: shown_b.ran != [])
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)] and len(shown_b.ran) == 1
    assert shown_c.told == [] and shown_c.ran == []
    record = await store.approvals.get(asked.id)
    assert record is not None and record.ran_by not in (None, DUE)

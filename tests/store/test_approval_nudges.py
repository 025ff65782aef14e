"""Tests for the reminders, escalation, ending and /cancel of bot/approvals/service.py, against the real
store on SQLite and PostgreSQL, on a virtual clock and virtual sleeps: nothing sleeps for real.

The host is the recording `Shown` of test_approval_service.py, drawing each card as Telegram does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import TaskGroup

from bot.approvals import REMIND_BATCH_S, ApprovalService
from bot.config import Secret, StorageConfig
from bot.core.approvals import ApprovalBook, ApprovalRecord, ApprovalStatus, Verdict, Vote
from bot.store import Store, open_store
from bot.telegram.approval_cards import approval_screen
from tests.store.test_approval_service import (
    ALICE,
    BOB,
    CAROL,
    DAVE,
    WAIT_S,
    Clock,
    Racing,
    Reads,
    Shown,
    ask,
    asking,
)

pytestmark = pytest.mark.anyio

ERIN = 3005
NAMES = {BOB: "Bob", CAROL: "Carol", DAVE: "Dave", ERIN: "Erin"}


@dataclass
class Sleeps:
    """Virtual sleeps on `clock`: a sleeper wakes only when `advance` moves the clock past its time."""

    clock: Clock
    waiting: list[tuple[float, anyio.Event]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def sleep(self, seconds: float) -> None:
        woken = anyio.Event()
        self.waiting.append((self.clock.now + seconds, woken))
        changed, self._changed = self._changed, anyio.Event()
        changed.set()
        await woken.wait()

    async def asleep(self, count: int) -> None:
        """Wait until `count` sleepers wait for the clock."""
        with anyio.fail_after(WAIT_S):
            while len(self.waiting) < count:
                await self._changed.wait()

    def advance(self, seconds: float) -> None:
        self.clock.now += seconds
        due = [woken for at, woken in self.waiting if at <= self.clock.now]
        self.waiting = [(at, woken) for at, woken in self.waiting if at > self.clock.now]
        for woken in due:
            woken.set()


@dataclass
class Cards(Shown):
    """A host that also draws each card as Telegram does, and writes down what the requester is told."""

    name_of: Callable[[int], str] = lambda u: NAMES.get(u, f"user {u}")
    texts: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def _draw(self, record: ApprovalRecord) -> None:
        screen = approval_screen(
            record.ask,
            record.state,
            self.name_of,
            record.deadline,
            escalate_at=record.escalate_at,
            escalated_at=record.escalated_at,
        )
        self.texts.append(screen.text)

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        self._draw(record)
        return await super().post(record)

    async def redraw(self, record: ApprovalRecord) -> None:
        self._draw(record)
        await super().redraw(record)

    async def decided(self, record: ApprovalRecord, verdict: Verdict, waiting: bool) -> None:
        self.lines.append(verdict.text)
        await super().decided(record, verdict, waiting)


@dataclass
class Taking(Racing):
    """A process's store that writes down what each of its takes of a reminder got (into a list shared by the
    processes of a test)."""

    taken: list[bool] = field(default_factory=list)
    both: anyio.Event = field(default_factory=anyio.Event)
    """Set once two takes returned (shared like `taken`)."""

    async def remind(self, record: ApprovalRecord) -> ApprovalRecord | None:
        got = await self.book.remind(record)
        self.taken.append(got is not None)
        if len(self.taken) >= 2:
            self.both.set()
        return got


@asynccontextmanager
async def running(
    book: ApprovalBook, sleeps: Sleeps, shown: Shown
) -> AsyncIterator[tuple[ApprovalService, TaskGroup]]:
    """A started service on the virtual clock and sleeps, knowing everybody's name; stopped on the way out."""
    service = ApprovalService(book, sleeps.clock, sleep=sleeps.sleep)
    async with anyio.create_task_group() as tg:
        for user_id, name in NAMES.items():
            await service.seen(user_id, name)
        await service.start(tg, shown)
        try:
            yield service, tg
        finally:
            service.stop()


async def test_a_flood_of_twenty_requests_reminds_each_approver_once_listing_their_requests(
    store: Store,
) -> None:
    """Twenty requests with `remind_after_s = 300`; Bob approves the first. Nothing is sent before 300 s; after
    them (and the batching wait) each approver gets one reminder: Bob's lists the 19 he has not voted on,
    Carol's and Dave's all 20. Three messages, not sixty."""
    sleeps = Sleeps(Clock())
    shown = Shown()
    async with running(store.approvals, sleeps, shown) as (service, tg):
        for _ in range(20):
            await asking(service, tg, shown, ask(timeout_s=1800.0, remind_after_s=300.0))
        ids = [record.id for record in shown.posted]
        await service.vote(ids[0], BOB, "Bob", Vote.APPROVE)
        await sleeps.asleep(20)
        sleeps.advance(299)
        assert len(sleeps.waiting) == 20 and shown.reminded == []
        sleeps.advance(1)
        await sleeps.asleep(1)  # the batch's wait
        sleeps.advance(REMIND_BATCH_S)
        await shown.until(lambda: len(shown.reminded) == 3)
    everyone = sorted(ids)
    assert [(user, sorted(listed)) for user, listed in shown.reminded] == [
        (BOB, sorted(ids[1:])),
        (CAROL, everyone),
        (DAVE, everyone),
    ]


async def test_a_reminder_is_sent_once_after_a_restart_and_by_one_of_two_processes(
    store: Store, store_url: str
) -> None:
    """A asks and stops before the reminder is due. B and C start on their own connections (both take the
    request: a takeover race) after 300 s: the reminder times come from the store, and Bob, Carol and Dave
    get one reminder each between them; the store says it was sent (a later start has nothing left to time)."""
    clock = Clock()
    shown_a = Shown()
    async with running(store.approvals, Sleeps(clock), shown_a) as (a, tg):
        asked = await asking(a, tg, shown_a, ask(timeout_s=1800.0, remind_after_s=300.0))
    clock.now += 300
    sleeps_b, sleeps_c = Sleeps(clock), Sleeps(clock)
    shown = Shown()  # both hosts write here: the reminders they sent between them
    taken: list[bool] = []
    both = anyio.Event()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as b_store,
        open_store(StorageConfig(url=Secret(store_url))) as c_store,
        running(Taking(b_store.approvals, Reads(), taken, both), sleeps_b, shown),
        running(Taking(c_store.approvals, Reads(), taken, both), sleeps_c, shown),
    ):
        await sleeps_b.asleep(1)
        await sleeps_c.asleep(1)
        sleeps_b.advance(0)
        sleeps_c.advance(0)
        await sleeps_b.asleep(1)
        await sleeps_c.asleep(1)
        sleeps_b.advance(REMIND_BATCH_S)
        sleeps_c.advance(0)  # the clock is shared
        with anyio.fail_after(WAIT_S):
            await both.wait()
        await shown.until(lambda: len(shown.reminded) >= 3 * sum(taken))
    assert sorted(taken) == [False, True]
    assert sorted(shown.reminded) == [(BOB, [asked.id]), (CAROL, [asked.id]), (DAVE, [asked.id])]
    record = await store.approvals.get(asked.id)
    assert record is not None and record.reminded_at is not None and record.next_nudge is None


async def test_escalation_adds_approvers_who_can_decide_and_the_card_says_so(store: Store) -> None:
    """Bob and Carol must both approve; Bob does. At `escalate_after_s` Erin joins: the escalation is stored
    and audited, she gets a card of her own, every card says she joined, and her approval decides it (she was
    refused before)."""
    sleeps = Sleeps(Clock())
    shown = Cards()
    request = ask(
        approvers=frozenset({BOB, CAROL}),
        timeout_s=1800.0,
        escalate_after_s=600.0,
        escalate_to=frozenset({ERIN}),
    )
    async with running(store.approvals, sleeps, shown) as (service, tg):
        asked = await asking(service, tg, shown, request)
        assert "Escalates to Erin at " in shown.texts[-1]
        early = await service.vote(asked.id, ERIN, "Erin", Vote.APPROVE)
        await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        await sleeps.asleep(1)
        sleeps.advance(600)
        await shown.until(lambda: shown.escalations != [] and "joined" in shown.texts[-1])
        cast = await service.vote(asked.id, ERIN, "Erin", Vote.APPROVE, card=(ERIN, 1))
        verdict = await asked.result()
    assert early.refused and early.text == "You are not an approver of this request."
    assert shown.escalations == [(asked.id, frozenset({ERIN}))]
    assert "⏫ <b>Escalated</b> at " in shown.texts[-2] and "Erin joined" in shown.texts[-2]
    assert "Needs 2 of: Bob, Carol, Erin" in shown.texts[-2]
    assert (
        cast.text == "Approved (2 of 2)." and verdict.approved and verdict.text == "approved by Bob and Erin"
    )
    record = await store.approvals.get(asked.id)
    assert record is not None and (ERIN, 1) in record.cards
    escalated = [r.as_dict()["detail"] for r in await store.audit.rows() if r.event == "approval_escalated"]
    assert [(d["added"], d["approvers"]) for d in escalated] == [([ERIN], [BOB, CAROL, ERIN])]


async def test_an_expired_request_names_who_was_asked_and_who_did_not_answer(
    store: Store, store_url: str
) -> None:
    """Bob approves (1 of 2), Erin joins by escalation, nobody else answers; the request expires (found past
    its deadline by the next process): the card lists who was asked and who did not answer, and so does the
    requester's line."""
    clock = Clock()
    shown_a = Cards()
    request = ask(timeout_s=1800.0, escalate_after_s=600.0, escalate_to=frozenset({ERIN}))
    sleeps = Sleeps(clock)
    async with running(store.approvals, sleeps, shown_a) as (a, tg):
        asked = await asking(a, tg, shown_a, request)
        await a.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        await sleeps.asleep(1)
        sleeps.advance(600)
        await shown_a.until(lambda: shown_a.escalations != [])
    clock.now += 1200
    shown_b = Cards()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as again,
        running(again.approvals, Sleeps(clock), shown_b),
    ):
        await shown_b.until(lambda: shown_b.told != [])
    card = shown_b.texts[-1]
    assert "⌛ <b>Expired</b>" in card
    assert "Asked: Bob, Carol, Dave, Erin" in card and "No answer from: Carol, Dave, Erin" in card
    assert shown_b.lines == [
        "not approved in time (no answer from Carol, Dave and Erin); the call was not made"
    ]


async def test_the_requesters_cancel_ends_a_request_still_waiting_for_everyone(store: Store) -> None:
    """Alice cancels her call while it waits for approvers: it is told so, the request is cancelled in the
    store and audited, every card is redrawn as cancelled, and a later approval is refused."""
    sleeps = Sleeps(Clock())
    shown = Cards()
    async with running(store.approvals, sleeps, shown) as (service, tg):
        asked = await asking(service, tg, shown, ask())
        assert service.cancel(lambda origin: origin.user_id == DAVE) == 0
        assert service.cancel(lambda origin: origin == ALICE) == 1
        verdict = await asked.result()
        late = await service.vote(asked.id, BOB, "Bob", Vote.APPROVE)
    assert verdict.status is ApprovalStatus.CANCELLED
    assert verdict.text == "cancelled by its requester; the call was not made"
    record = await store.approvals.get(asked.id)
    assert record is not None and record.state.status is ApprovalStatus.CANCELLED
    assert shown.redrawn == [ApprovalStatus.CANCELLED] and "⏹ <b>Cancelled</b>" in shown.texts[-1]
    assert late.refused and late.text == "Already decided: the request was cancelled."
    events = [r.event for r in await store.audit.rows() if r.request_id == asked.id]
    assert events == ["approval_requested", "approval_cancelled"]

"""Approvals in a fleet, on a real PostgreSQL: two `ApprovalService`s stand for two bot processes, each with its
own store (engine) and its own `FleetBus`. The host is a recording `ApprovalShow` (the host boundary), the clock
a virtual one.

What is proven: a decision taken on B wakes the call waiting on A (through the bus, or the sweep after the bus
connects), and the call runs once, there; a decision nobody carried out (its waiter died with A) is carried out
once by the new owner's `adopt` (an agent's call only when made as a task: its origin names the task); two processes racing to carry one decision out run it once; a waiter whose
deadline passes after another process ran the call does not run it again.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import pytest
from anyio.abc import TaskGroup

from bot.approvals import RAN_ELSEWHERE, ApprovalService
from bot.config import Secret, StorageConfig
from bot.core import Origin
from bot.core.approvals import DUE, ApprovalAsk, ApprovalBook, ApprovalRecord, ApprovalStatus, Vote
from bot.store import Store, open_store
from bot.store.bus import FleetBus
from tests.store.test_approval_service import (
    ALICE,
    BOB,
    CAROL,
    WAIT_S,
    Clock,
    Racing,
    Reads,
    Shown,
    ask,
    asking,
)

pytestmark = pytest.mark.anyio

BOT_ID = 4242


@dataclass
class Instance:
    """One bot process: its store, its bus (None: not listening) and its approval service in a task group."""

    store: Store
    service: ApprovalService
    tg: TaskGroup
    shown: Shown
    bus: FleetBus | None


@asynccontextmanager
async def instance(
    url: str,
    name: str,
    clock: Clock,
    shown: Shown,
    owns: Callable[[int], bool],
    *,
    bus: bool = True,
    listening: bool = True,
    book: Callable[[Store], ApprovalBook] | None = None,
) -> AsyncIterator[Instance]:
    """A process on the database at `url`: its own engine; with `bus`, a bus that decisions are published on and
    the service hears (already listening unless `listening` is False: the test starts it)."""
    async with open_store(StorageConfig(url=Secret(url))) as store, anyio.create_task_group() as tg:
        service = ApprovalService(
            store.approvals if book is None else book(store), clock, owns=owns, name=name
        )
        fleet_bus = None
        if bus:
            fleet_bus = FleetBus(url, BOT_ID, retry_s=0.05)
            store.approvals.bus = fleet_bus
            service.listen(fleet_bus)
            if listening:
                await tg.start(fleet_bus.run)
        await service.start(tg, shown)
        try:
            yield Instance(store, service, tg, shown, fleet_bus)
        finally:
            service.stop()
            tg.cancel_scope.cancel()


def nobody(_user_id: int) -> bool:
    return False


def alice(user_id: int) -> bool:
    return user_id == ALICE.user_id


async def asked_then_died(a: Instance, request: ApprovalAsk) -> str:
    """A asks (cards out, its call waiting), then its call dies with it: the waiting task is cancelled, as a
    SIGKILL would end it. The request's id."""
    dead = anyio.Event()
    scope = anyio.CancelScope()

    async def decide() -> None:
        try:
            with scope:
                await a.service.decide(request)
        finally:
            dead.set()

    before = len(a.shown.posted)
    a.tg.start_soon(decide)
    await a.shown.until(lambda: len(a.shown.posted) > before)
    scope.cancel()
    with anyio.fail_after(WAIT_S):
        await dead.wait()
    return a.shown.posted[-1].id


async def approved(service: ApprovalService, approval_id: str) -> None:
    """Bob and Carol approve on `service` (a quorum of two)."""
    assert (await service.vote(approval_id, BOB, "Bob", Vote.APPROVE)).text == "Approved (1 of 2)."
    assert (await service.vote(approval_id, CAROL, "Carol", Vote.APPROVE)).text == "Approved (2 of 2)."


async def test_a_decision_on_b_wakes_the_call_waiting_on_a_and_it_runs_once_there(
    postgresql_url: str,
) -> None:
    """Alice's call waits on A (her owner); Bob's and Carol's taps land on B: the bus wakes A's call with the
    approval (long before its deadline), A claims it and tells Alice; B only redraws its cards and runs nothing."""
    clock, shown_a, shown_b = Clock(), Shown(), Shown()
    async with (
        instance(postgresql_url, "A", clock, shown_a, alice) as a,
        instance(postgresql_url, "B", clock, shown_b, nobody) as b,
    ):
        asked = await asking(a.service, a.tg, shown_a, ask())
        await approved(b.service, asked.id)
        verdict = await asked.result()
        record = await a.store.approvals.get(asked.id)
    # The virtual clock stood still: both ballots have one time, so either name may come first.
    assert verdict.approved and verdict.text in ("approved by Bob and Carol", "approved by Carol and Bob")
    assert record is not None and record.ran_by == "A"
    assert shown_a.told == [(ApprovalStatus.APPROVED, True)] and shown_b.told == []
    assert shown_a.ran == [] and shown_b.ran == []  # the waiting call runs it (the hub), nobody else
    assert shown_b.redrawn == [ApprovalStatus.PENDING, ApprovalStatus.APPROVED]  # the tapped cards


async def test_a_decision_missed_while_the_bus_was_down_is_found_when_it_connects(
    postgresql_url: str,
) -> None:
    """A is not listening when B decides (the notification is lost); when A's bus connects it reads again the
    requests it waits on and wakes the call."""
    clock, shown_a, shown_b = Clock(), Shown(), Shown()
    async with (
        instance(postgresql_url, "A", clock, shown_a, alice, listening=False) as a,
        instance(postgresql_url, "B", clock, shown_b, nobody) as b,
    ):
        asked = await asking(a.service, a.tg, shown_a, ask())
        await approved(b.service, asked.id)
        record = await b.store.approvals.get(asked.id)
        assert record is not None and record.ran_by == DUE and not asked.done.is_set()
        assert a.bus is not None
        await a.tg.start(a.bus.run)
        verdict = await asked.result()
    assert verdict.approved and shown_a.told == [(ApprovalStatus.APPROVED, True)]
    assert shown_b.ran == []


async def test_a_call_whose_waiter_died_runs_once_when_the_new_owner_adopts_it(postgresql_url: str) -> None:
    """A dies with Alice's call waiting; the approvers decide on B, which does not own Alice yet (nothing runs:
    her call might be alive elsewhere). The takeover gives B Alice: `adopt` runs the approved call once and
    tells her; a second `adopt` finds nothing left to do."""
    clock, shown_a, shown_b = Clock(), Shown(), Shown()
    owned: set[int] = set()
    async with instance(postgresql_url, "B", clock, shown_b, owned.__contains__) as b:
        async with instance(postgresql_url, "A", clock, shown_a, alice) as a:
            approval_id = await asked_then_died(a, ask())
        await approved(b.service, approval_id)
        assert shown_b.told == [] and shown_b.ran == []
        owned.add(ALICE.user_id)
        await b.service.adopt(alice)
        await shown_b.until(lambda: shown_b.ran != [])
        await b.service.adopt(alice)
        record = await b.store.approvals.get(approval_id)
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)]
    (ran,) = shown_b.ran
    assert ran.id == approval_id and ran.ask.content == {"service": "web", "version": "1.2.3"}
    assert record is not None and record.ran_by == "B"


async def test_an_agents_call_whose_waiter_died_is_said_gone_on_adoption_not_run(postgresql_url: str) -> None:
    """The same for an agent's call: the new owner tells the person the agent is gone and runs nothing."""
    clock, shown_a, shown_b = Clock(), Shown(), Shown()
    agents = ask(origin=Origin(chat_id=ALICE.chat_id, user_id=ALICE.user_id, agent="ci-bot"))
    async with instance(postgresql_url, "B", clock, shown_b, nobody) as b:
        async with instance(postgresql_url, "A", clock, shown_a, alice) as a:
            approval_id = await asked_then_died(a, agents)
        await approved(b.service, approval_id)
        await b.service.adopt(alice)
        record = await b.store.approvals.get(approval_id)
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)] and shown_b.ran == []
    assert record is not None and record.ran_by == "B"


async def test_an_agents_task_whose_waiter_died_runs_once_when_the_new_owner_adopts_it(
    postgresql_url: str,
) -> None:
    """An agent's call made as a task (its origin names the task) is kept, not gone: on the takeover the new owner
    runs it once (the host keeps the result for the task), with the task's id, as for a person's call."""
    clock, shown_a, shown_b = Clock(), Shown(), Shown()
    tasks = ask(origin=Origin(chat_id=ALICE.chat_id, user_id=ALICE.user_id, agent="ci-bot", task="task-1"))
    async with instance(postgresql_url, "B", clock, shown_b, nobody) as b:
        async with instance(postgresql_url, "A", clock, shown_a, alice) as a:
            approval_id = await asked_then_died(a, tasks)
        await approved(b.service, approval_id)
        assert shown_b.ran == []
        await b.service.adopt(alice)
        await shown_b.until(lambda: shown_b.ran != [])
        await b.service.adopt(alice)
        record = await b.store.approvals.get(approval_id)
    (ran,) = shown_b.ran
    assert ran.id == approval_id and ran.ask.origin.task == "task-1" and ran.ask.origin.agent == "ci-bot"
    assert record is not None and record.ran_by == "B"


@dataclass
class ClaimingTogether(Racing):
    """A process's store whose claims are sent only once both racing processes are about to claim."""

    claims: Reads = field(default_factory=Reads)

    async def claim(self, record: ApprovalRecord, by: str) -> bool:
        self.claims.count += 1
        if self.claims.count >= 2:
            self.claims.both.set()
        with anyio.fail_after(WAIT_S):
            await self.claims.both.wait()
        return await self.book.claim(record, by)


async def test_two_processes_racing_to_run_one_approved_call_run_it_once(postgresql_url: str) -> None:
    """A zombie that still believes it owns Alice and her new owner both adopt her approved request at once,
    both having read it as due: one claim wins; one of them tells her and runs it, the other does nothing."""
    clock, shown_a, shown_b, shown_c = Clock(), Shown(), Shown(), Shown()
    claims = Reads()

    def together(store: Store) -> ApprovalBook:
        return ClaimingTogether(store.approvals, Reads(), claims)

    async with instance(postgresql_url, "C", clock, shown_c, nobody, bus=False) as c:
        async with instance(postgresql_url, "asker", clock, Shown(), alice, bus=False) as asker:
            approval_id = await asked_then_died(asker, ask())
        await approved(c.service, approval_id)
        async with (
            instance(postgresql_url, "A", clock, shown_a, nobody, bus=False, book=together) as a,
            instance(postgresql_url, "B", clock, shown_b, nobody, bus=False, book=together) as b,
        ):
            async with anyio.create_task_group() as racing:
                racing.start_soon(a.service.adopt, alice)
                racing.start_soon(b.service.adopt, alice)
            winner = shown_a if shown_a.told else shown_b
            await winner.until(lambda: winner.ran != [])
        record = await c.store.approvals.get(approval_id)
    assert claims.count == 2
    assert record is not None and record.ran_by in ("A", "B")
    assert (shown_a.told, shown_b.told) in (
        ([(ApprovalStatus.APPROVED, False)], []),
        ([], [(ApprovalStatus.APPROVED, False)]),
    )
    assert len(shown_a.ran) + len(shown_b.ran) == 1 and shown_c.told == []


@dataclass
class Held(Shown):
    """A host whose cards go out only when the test lets them (`release`), with the clock moved past the
    deadline meanwhile: the waiting call's deadline passes the moment it starts waiting."""

    clock: Clock = field(default_factory=Clock)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def post(self, record: ApprovalRecord) -> list[tuple[int, int]]:
        cards = list(await super().post(record))
        with anyio.fail_after(WAIT_S):
            await self.release.wait()
        self.clock.now += 61
        return cards


async def test_a_waiter_whose_deadline_passes_after_another_process_ran_the_call_does_not_run_it(
    postgresql_url: str,
) -> None:
    """A (a zombie: it lost Alice, and hears no bus) has her call waiting; B, her owner now, has the request
    decided by taps and runs it (nobody waits on B). A's deadline then passes: A reads the request again,
    finds it approved and carried out by B, and its call is not approved to run: the call ran once."""
    clock_a, clock_b = Clock(), Clock()
    shown_a, shown_b = Held(clock=clock_a), Shown()
    async with (
        instance(postgresql_url, "A", clock_a, shown_a, alice, bus=False) as a,
        instance(postgresql_url, "B", clock_b, shown_b, alice) as b,
    ):
        asked = await asking(a.service, a.tg, shown_a, ask())
        await approved(b.service, asked.id)
        await shown_b.until(lambda: shown_b.ran != [])
        shown_a.release.set()
        verdict = await asked.result()
    assert verdict.status is ApprovalStatus.CANCELLED and verdict.text == RAN_ELSEWHERE
    assert len(shown_b.ran) == 1 and shown_a.ran == []
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)] and shown_a.told == []

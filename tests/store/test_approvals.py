"""Tests for bot/store/approvals.py on SQLite and PostgreSQL: requests and votes outlive the process, a change is
a compare-and-set (two racing taps cannot both decide), and every decision lands in the audit chain."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import text

from bot.config import Secret, StorageConfig
from bot.core import Origin
from bot.core.approvals import DUE, ApprovalAsk, ApprovalStatus, Vote, content_hash, tally
from bot.store import AuditLog, Store, open_engine, open_store, upgrade
from bot.store.approvals import ApprovalStore, now_iso
from bot.store.errors import StoreUnavailable
from tests.telegram.test_approvals import DEPLOY, ops_scene

pytestmark = pytest.mark.anyio

ALICE = Origin(chat_id=-5001, user_id=1001)


def ask(**changes: object) -> ApprovalAsk:
    values: dict[str, object] = {
        "origin": ALICE,
        "requester": "Alice",
        "server": "prod",
        "tool": "deploy",
        "content": {"service": "web", "version": "1.2.3"},
        "approvers": frozenset({1002, 3003, 3004}),
        "quorum": 2,
        "chat": -7001,
        "self_approval": False,
        "timeout_s": 60.0,
    }
    values.update(changes)
    return ApprovalAsk(**values)  # type: ignore[arg-type]


async def test_a_request_and_its_votes_are_read_back_by_another_connection(
    store: Store, store_url: str
) -> None:
    """Stored, voted on, then opened afresh (as after a restart): the same content, hash, cards and tally."""
    record = await store.approvals.create(ask(), "call", deadline=2e9, names={1002: "Bob"})
    record = await store.approvals.set_cards(record, [(-7001, 42)])
    counted = tally(record.state, 1002, "Bob", Vote.APPROVE, now_iso())
    assert counted.ballot is not None
    assert await store.approvals.vote(record, counted.state, counted.ballot) is not None
    async with open_store(StorageConfig(url=Secret(store_url))) as again:
        (found,) = await again.approvals.pending()
    assert found.id == record.id and found.cards == ((-7001, 42),)
    assert found.ask.content == {"service": "web", "version": "1.2.3"}
    assert found.state.content_hash == content_hash("prod", "deploy", {"service": "web", "version": "1.2.3"})
    assert [b.name for b in found.state.approvals] == ["Bob"] and found.names == {1002: "Bob"}


async def test_two_taps_racing_on_one_revision_cannot_both_count(store: Store) -> None:
    """Carol's and Dave's approvals both read revision 1 (as two processes could): the first commits and
    decides, the second is told the request changed (None) and, read again, is already approved."""
    record = await store.approvals.create(ask(), "call", deadline=2e9)
    bob = tally(record.state, 1002, "Bob", Vote.APPROVE, now_iso())
    assert bob.ballot is not None
    record = await store.approvals.vote(record, bob.state, bob.ballot) or record
    carol = tally(record.state, 3003, "Carol", Vote.APPROVE, now_iso())
    dave = tally(record.state, 3004, "Dave", Vote.REJECT, now_iso())
    assert carol.ballot is not None and dave.ballot is not None
    assert await store.approvals.vote(record, carol.state, carol.ballot) is not None
    assert await store.approvals.vote(record, dave.state, dave.ballot) is None
    again = await store.approvals.get(record.id)
    assert again is not None and again.state.status is ApprovalStatus.APPROVED
    assert tally(again.state, 3004, "Dave", Vote.REJECT, now_iso()).refusal == (
        "Already decided: approved by Bob and Carol."
    )
    assert await store.approvals.finish(again, ApprovalStatus.EXPIRED) is None


async def test_a_decision_is_due_until_one_claim_takes_it(store: Store) -> None:
    """The vote that decides marks the request due; the first claim takes it, every later one (any process) is
    refused; an open request, a withdrawn one and one decided by a version before 0012 (null) cannot be
    claimed, and only the due one is listed as due."""
    record = await store.approvals.create(ask(quorum=1), "call", deadline=2e9)
    assert not await store.approvals.claim(record, "A")  # still open
    bob = tally(record.state, 1002, "Bob", Vote.APPROVE, now_iso())
    assert bob.ballot is not None
    decided = await store.approvals.vote(record, bob.state, bob.ballot)
    assert decided is not None and decided.ran_by == DUE
    withdrawn = await store.approvals.create(ask(), "call", deadline=2e9)
    assert await store.approvals.finish(withdrawn, ApprovalStatus.CANCELLED) is not None
    older = await store.approvals.create(ask(), "call", deadline=2e9)
    older = await store.approvals.finish(older, ApprovalStatus.EXPIRED) or older
    async with store.engine.begin() as conn:  # as the version before 0012 leaves it
        await conn.execute(text("UPDATE approvals SET ran_by = NULL WHERE id = :id"), {"id": older.id})
    assert [r.id for r in await store.approvals.due()] == [record.id]
    assert await store.approvals.claim(decided, "A")
    assert not await store.approvals.claim(decided, "B")
    assert not await store.approvals.claim(withdrawn, "B") and not await store.approvals.claim(older, "B")
    again = await store.approvals.get(record.id)
    assert again is not None and again.ran_by == "A" and await store.approvals.due() == []


async def test_requests_decided_before_0012_are_kept_and_never_claimed(store_url: str) -> None:
    """A database at 0009 with an approved request (its call carried out by that version) is upgraded in place:
    the request reads back, is not due, and nobody can claim it: the upgrade runs nothing again."""
    engine = await open_engine(store_url, migrate=False)
    try:
        await upgrade(engine, "0009")
        record = await ApprovalStore(engine, AuditLog(engine)).create(ask(), "call", deadline=2e9)
        async with engine.begin() as conn:
            await conn.execute(
                text("UPDATE approvals SET status = 'approved' WHERE id = :id"), {"id": record.id}
            )
    finally:
        await engine.dispose()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        found = await store.approvals.get(record.id)
        assert found is not None and found.state.status is ApprovalStatus.APPROVED and found.ran_by is None
        assert await store.approvals.due() == []
        assert not await store.approvals.claim(found, "new")


async def test_a_database_that_fails_raises_the_stores_own_error_from_every_method(store: Store) -> None:
    """With the tables gone (as a database lost mid-run), each method raises `StoreUnavailable` naming what
    failed, never the ORM's error: callers above the store handle only the store's error."""
    record = await store.approvals.create(ask(), "call", deadline=2e9)
    bob = tally(record.state, 1002, "Bob", Vote.APPROVE, now_iso())
    ballot = bob.ballot
    assert ballot is not None
    async with store.engine.begin() as conn:
        await conn.execute(text("DROP TABLE approval_votes"))
        await conn.execute(text("DROP TABLE approvals"))
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "storing an approval request": lambda: store.approvals.create(ask(), "call", deadline=2e9),
        "reading an approval request": lambda: store.approvals.get(record.id),
        "reading the pending approval requests": lambda: store.approvals.pending(),
        "storing where approval cards are": lambda: store.approvals.set_cards(record, [(-7001, 42)]),
        "storing a vote": lambda: store.approvals.vote(record, bob.state, ballot),
        "changing an approval request": lambda: store.approvals.start_change(record),
        "ending an approval request": lambda: store.approvals.finish(record, ApprovalStatus.EXPIRED),
        "reading the decided approval requests": lambda: store.approvals.due(),
        "claiming an approved call": lambda: store.approvals.claim(record, "A"),
        "taking an approval reminder": lambda: store.approvals.remind(record),
        "escalating an approval request": lambda: store.approvals.escalate(record),
    }
    for what, call in calls.items():
        with pytest.raises(StoreUnavailable, match=f"^{what}: "):
            await call()


async def test_every_decision_is_audited_with_the_content_hash_and_the_chain_verifies(store: Store) -> None:
    """Requested, approved, rejected, expired: one row each, carrying the content's SHA-256; the chain holds."""
    first = await store.approvals.create(ask(), "call", deadline=2e9)
    bob = tally(first.state, 1002, "Bob", Vote.APPROVE, now_iso())
    assert bob.ballot is not None
    first = await store.approvals.vote(first, bob.state, bob.ballot) or first
    dave = tally(first.state, 3004, "Dave", Vote.REJECT, now_iso())
    assert dave.ballot is not None
    await store.approvals.vote(first, dave.state, dave.ballot)
    second = await store.approvals.create(
        ask(content={"service": "db", "version": "9"}), "call", deadline=1.0
    )
    assert await store.approvals.finish(second, ApprovalStatus.EXPIRED) is not None

    rows = await store.audit.rows()
    assert [(r.event, r.user_id) for r in rows] == [
        ("approval_requested", 1001),
        ("approved", 1002),
        ("rejected", 3004),
        ("approval_requested", 1001),
        ("approval_expired", 1001),
    ]
    hashes = [r.as_dict()["detail"]["content_sha256"] for r in rows]
    assert hashes[:3] == [first.state.content_hash] * 3
    assert hashes[3:] == [second.state.content_hash] * 2 and hashes[0] != hashes[3]
    assert all(r.request_id in (first.id, second.id) for r in rows)
    checked, broken = await store.audit.verify()
    assert (checked, broken) == (5, None)


async def test_the_bot_records_a_two_of_three_approval_in_the_store_and_the_audit_chain(
    store_url: str, tmp_path: Path
) -> None:
    """End to end on this database: Bob and Carol approve Alice's deploy in the group; the request is stored
    as approved with both votes, and the audit log holds the request, both approvals and one call."""
    async with ops_scene(tmp_path, storage=store_url) as o:
        s = o.s
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        await o.carol.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: "deployed web 1.2.3" in m.text)
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        rows = await store.audit.rows()
        (request_id,) = {r.request_id for r in rows if r.event == "approval_requested"}
        record = await store.approvals.get(request_id or "")
        checked, broken = await store.audit.verify()
    assert record is not None and record.state.status is ApprovalStatus.APPROVED
    assert [b.name for b in record.state.ballots] == ["Bob", "Carol"]
    events = [r.event for r in rows]
    assert events.index("approval_requested") < events.index("approved") < events.index("call_started")
    assert events.count("approved") == 2 and events.count("call_started") == 1
    assert broken is None and checked == len(rows)

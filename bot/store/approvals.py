"""Approval requests and their votes in the database, each change audited. Does I/O.

Every method raises `StoreUnavailable` (not the ORM's errors) when the database cannot be read or written.

Every change is a compare-and-set on the request's `revision`, committed before anyone is told: two taps (or
two bot processes) racing on one request cannot both decide it, and a decision survives the process. Audit
rows (requested, approved, rejected, expired, cancelled) carry the content's SHA-256, and the agent's name
(`detail.agent`) when an agent asked through the gateway.

The transaction that decides a request marks it `ran_by = "due"` and publishes its id on the fleet's bus
(`DECIDED_TOPIC`; alone, nobody else is woken): every instance looks at it again, and the one that carries the
decision out (`claim`, a compare-and-set from "due") is the only one that runs the approved call.

The names people show (`people`) are kept here too, so every instance of a fleet draws the same card.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from sqlalchemy import ColumnElement, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.config import AuditContent
from bot.core import Origin
from bot.core.approvals import (
    DECIDED_TOPIC,
    DUE,
    ApprovalAsk,
    ApprovalRecord,
    ApprovalState,
    ApprovalStatus,
    Ballot,
    Factor,
    Vote,
)
from bot.core.fleet import ALONE, Bus
from bot.store.audit import AuditEvent, AuditLog
from bot.store.errors import unavailable_as
from bot.store.observer import agent_of
from bot.store.tables import approval_votes, approvals, people

__all__ = ["ApprovalRecord", "ApprovalStore", "now_iso"]

logger = logging.getLogger(__name__)


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")


NAME_CHARS: Final = 256
"""The longest display name kept (Telegram's first names are far shorter)."""
_OPEN = (ApprovalStatus.PENDING.value, ApprovalStatus.CHANGING.value)
_EVENTS = {
    ApprovalStatus.EXPIRED: AuditEvent.APPROVAL_EXPIRED,
    ApprovalStatus.CANCELLED: AuditEvent.APPROVAL_CANCELLED,
}


class ApprovalStore:
    """The `approvals` and `approval_votes` tables of one database, and the audit log beside them: the
    `ApprovalBook` of `bot.approvals.ApprovalService`. Each decision is published on the fleet's
    `bus` (`DECIDED_TOPIC`) when it commits."""

    def __init__(
        self,
        engine: AsyncEngine,
        log: AuditLog,
        content: AuditContent = AuditContent.FULL,
        bus: Bus = ALONE.bus,
    ) -> None:
        self.engine = engine
        self.log = log
        self.content = content
        self.bus = bus

    @unavailable_as("storing an approval request")
    async def create(
        self, ask: ApprovalAsk, gate: str, deadline: float, names: Mapping[int, str] | None = None
    ) -> ApprovalRecord:
        """Store a new pending request and audit it.

        Raises:
            StoreUnavailable: the request could not be stored (then nothing may run).
        """
        state = ApprovalState(
            id=str(uuid.uuid4()),
            requester_id=ask.origin.user_id,
            approvers=ask.approvers,
            quorum=ask.quorum,
            self_approval=ask.self_approval,
            content_hash=ask.hash,
            factor=ask.factor,
        )
        # Reminder and escalation times count from when the request was asked, as its deadline does.
        asked = deadline - ask.timeout_s
        record = ApprovalRecord(
            ask,
            state,
            gate,
            deadline,
            now_iso(),
            names=dict(names or {}),
            remind_at=None if ask.remind_after_s is None else asked + ask.remind_after_s,
            escalate_at=None if ask.escalate_after_s is None else asked + ask.escalate_after_s,
        )
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(approvals).values(
                    id=state.id,
                    status=state.status.value,
                    revision=0,
                    generation=0,
                    gate=gate,
                    server=ask.server,
                    tool=ask.tool,
                    content=json.dumps(ask.content, sort_keys=True, ensure_ascii=False),
                    content_hash=state.content_hash,
                    question=ask.question,
                    user_id=ask.origin.user_id,
                    user_name=ask.requester,
                    chat_id=ask.origin.chat_id,
                    agent=ask.origin.agent,
                    approvers=json.dumps(sorted(ask.approvers)),
                    quorum=ask.quorum,
                    self_approval=ask.self_approval,
                    approval_chat=ask.chat,
                    cards="[]",
                    names=json.dumps({str(k): v for k, v in record.names.items()}, ensure_ascii=False),
                    deadline=deadline,
                    created_at=record.created_at,
                    # Written only when asked for: a tap-only request is stored as the version before stored it.
                    **({} if ask.factor is Factor.TAP else {"second_factor": ask.factor.value}),
                    **({} if ask.origin.task is None else {"task": ask.origin.task}),
                    **_nudges(record),
                )
            )
        detail: dict[str, Any] = {
            "approval_id": state.id,
            "gate": gate,
            "content_sha256": state.content_hash,
            "approvers": sorted(ask.approvers),
            "quorum": ask.quorum,
            "approval_chat": ask.chat,
            "second_factor": None if ask.factor is Factor.TAP else ask.factor.value,
        }
        detail.update(_kept(ask.content, self.content))
        await self._audit(AuditEvent.APPROVAL_REQUESTED, record, detail)
        return record

    @unavailable_as("reading an approval request")
    async def get(self, approval_id: str) -> ApprovalRecord | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(approvals).where(approvals.c.id == approval_id))).first()
            if row is None:
                return None
            votes = await conn.execute(
                select(approval_votes).where(approval_votes.c.approval_id == approval_id)
            )
            return _record(row._asdict(), [v._asdict() for v in votes])

    @unavailable_as("reading the pending approval requests")
    async def pending(self) -> list[ApprovalRecord]:
        """Every request still waiting for a decision (after a restart: the ones to keep alive)."""
        async with self.engine.connect() as conn:
            ids = [
                row.id
                for row in await conn.execute(select(approvals.c.id).where(approvals.c.status.in_(_OPEN)))
            ]
        found = [await self.get(i) for i in ids]
        return [record for record in found if record is not None]

    @unavailable_as("reading the decided approval requests")
    async def due(self) -> list[ApprovalRecord]:
        """Every request decided and not carried out yet (its call may still have to run)."""
        async with self.engine.connect() as conn:
            ids = [
                row.id for row in await conn.execute(select(approvals.c.id).where(approvals.c.ran_by == DUE))
            ]
        found = [await self.get(i) for i in ids]
        return [record for record in found if record is not None]

    @unavailable_as("claiming an approved call")
    async def claim(self, record: ApprovalRecord, by: str) -> bool:
        """Take the carrying out of a decided request for `by`: True for exactly one caller, whichever process
        it runs in; False when somebody else did, or it is not due (still open, withdrawn, or decided by a
        version before 0012, which ran an approved call itself wherever the decision fell)."""
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(approvals)
                .where(approvals.c.id == record.id, approvals.c.ran_by == DUE)
                .values(ran_by=by[:64])
            )
        return changed.rowcount == 1

    @unavailable_as("storing where approval cards are")
    async def set_cards(self, record: ApprovalRecord, cards: Sequence[tuple[int, int]]) -> ApprovalRecord:
        """Remember where the cards are (not a change of the tally: no revision, no audit)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(approvals)
                .where(approvals.c.id == record.id)
                .values(cards=json.dumps([list(card) for card in cards]))
            )
        return replace(record, cards=tuple(cards))

    @unavailable_as("storing a vote")
    async def vote(self, record: ApprovalRecord, new: ApprovalState, ballot: Ballot) -> ApprovalRecord | None:
        """Commit a counted tap (and a decision it makes); None when the request changed meanwhile (the
        caller reads it again). Audited as `approved` or `rejected`, with the count."""
        decided = new.status is not ApprovalStatus.PENDING
        decided_at = ballot.at if decided else None
        ran_by = DUE if decided else None
        async with self.engine.begin() as conn:
            if not await _advance(
                conn, record, status=new.status.value, decided_at=decided_at, ran_by=ran_by
            ):
                return None
            await conn.execute(
                insert(approval_votes).values(
                    id=str(uuid.uuid4()),
                    approval_id=record.id,
                    user_id=ballot.user_id,
                    name=ballot.name,
                    vote=ballot.vote.value,
                    content_hash=ballot.content_hash,
                    at=ballot.at,
                    factor=ballot.factor.value,
                )
            )
            if decided:
                await self._publish(conn, record)
        updated = replace(
            record, state=new, revision=record.revision + 1, decided_at=decided_at, ran_by=ran_by
        )
        event = AuditEvent.APPROVED if ballot.vote is Vote.APPROVE else AuditEvent.REJECTED
        await self._audit(
            event,
            updated,
            {
                "approval_id": record.id,
                "content_sha256": ballot.content_hash,
                "approvals": len(new.approvals),
                "quorum": new.quorum,
                "status": new.status.value,
                "factor": ballot.factor.value,
            },
            user_id=ballot.user_id,
        )
        return updated

    @unavailable_as("changing an approval request")
    async def start_change(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """The requester is changing the answer: no vote counts until `rebind`; None when it changed meanwhile."""
        async with self.engine.begin() as conn:
            pending = approvals.c.status == ApprovalStatus.PENDING.value
            if not await _advance(conn, record, pending, status=ApprovalStatus.CHANGING.value):
                return None
        state = replace(record.state, status=ApprovalStatus.CHANGING)
        return replace(record, state=state, revision=record.revision + 1)

    @unavailable_as("changing an approval request")
    async def rebind(self, record: ApprovalRecord, ask: ApprovalAsk) -> ApprovalRecord | None:
        """Bind the request to new content (`ask.content`): pending again, a new generation, earlier approvals
        no longer count. Audited as `approval_changed` with both hashes; None when it changed meanwhile."""
        new_hash = ask.hash
        async with self.engine.begin() as conn:
            if not await _advance(
                conn,
                record,
                approvals.c.status == ApprovalStatus.CHANGING.value,
                status=ApprovalStatus.PENDING.value,
                generation=record.state.generation + 1,
                content=json.dumps(ask.content, sort_keys=True, ensure_ascii=False),
                content_hash=new_hash,
            ):
                return None
        state = replace(
            record.state,
            status=ApprovalStatus.PENDING,
            content_hash=new_hash,
            generation=record.state.generation + 1,
        )
        updated = replace(
            record, ask=replace(record.ask, content=ask.content), state=state, revision=record.revision + 1
        )
        detail: dict[str, Any] = {
            "approval_id": record.id,
            "content_sha256": new_hash,
            "previous_sha256": record.state.content_hash,
        }
        detail.update(_kept(ask.content, self.content))
        await self._audit(AuditEvent.APPROVAL_CHANGED, updated, detail)
        return updated

    @unavailable_as("ending an approval request")
    async def finish(self, record: ApprovalRecord, status: ApprovalStatus) -> ApprovalRecord | None:
        """End a pending request without a vote (expired, cancelled); None when it was decided meanwhile.

        An expired request is due (its requester is told); a cancelled one was withdrawn by its requester's own
        call, so there is nothing left to carry out."""
        at = now_iso()
        ran_by = DUE if status is ApprovalStatus.EXPIRED else None
        async with self.engine.begin() as conn:
            if not await _advance(
                conn, record, approvals.c.status.in_(_OPEN), status=status.value, decided_at=at, ran_by=ran_by
            ):
                return None
            if ran_by is not None:
                await self._publish(conn, record)
        updated = replace(
            record, state=replace(record.state, status=status), revision=record.revision + 1, ran_by=ran_by
        )
        await self._audit(
            _EVENTS[status],
            updated,
            {"approval_id": record.id, "content_sha256": record.state.content_hash, "status": status.value},
        )
        return replace(updated, decided_at=at)

    @unavailable_as("taking an approval reminder")
    async def remind(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """Take the reminder of a pending request to send: the record for exactly one caller in the whole fleet;
        None when somebody took it, or the request is no longer pending (not a change of the tally: no
        revision, no audit)."""
        at = now_iso()
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(approvals)
                .where(
                    approvals.c.id == record.id,
                    approvals.c.reminded_at.is_(None),
                    approvals.c.status == ApprovalStatus.PENDING.value,
                )
                .values(reminded_at=at)
            )
        return replace(record, reminded_at=at) if changed.rowcount == 1 else None

    @unavailable_as("escalating an approval request")
    async def escalate(self, record: ApprovalRecord) -> ApprovalRecord | None:
        """`ask.escalate_to` join the approvers of a pending request; None when it changed meanwhile (or was
        escalated already). Audited as `approval_escalated`, with who joined."""
        at = now_iso()
        approvers = record.state.approvers | record.ask.escalate_to
        async with self.engine.begin() as conn:
            if not await _advance(
                conn,
                record,
                approvals.c.status == ApprovalStatus.PENDING.value,
                approvals.c.escalated_at.is_(None),
                approvers=json.dumps(sorted(approvers)),
                escalated_at=at,
            ):
                return None
        updated = replace(
            record,
            ask=replace(record.ask, approvers=approvers),
            state=replace(record.state, approvers=approvers),
            revision=record.revision + 1,
            escalated_at=at,
        )
        await self._audit(
            AuditEvent.APPROVAL_ESCALATED,
            updated,
            {
                "approval_id": record.id,
                "content_sha256": record.state.content_hash,
                "added": sorted(approvers - record.state.approvers),
                "approvers": sorted(approvers),
            },
        )
        return updated

    @unavailable_as("storing a person's name")
    async def remember(self, user_id: int, name: str) -> None:
        """Keep the name `user_id` shows now (a row written only when it is new or differs)."""
        insert_ = postgresql.insert if self.engine.dialect.name == "postgresql" else sqlite.insert
        statement = insert_(people).values(user_id=user_id, name=name[:NAME_CHARS], seen=now_iso())
        async with self.engine.begin() as conn:
            await conn.execute(
                statement.on_conflict_do_update(
                    index_elements=[people.c.user_id],
                    set_={"name": statement.excluded.name, "seen": statement.excluded.seen},
                    where=people.c.name != statement.excluded.name,
                )
            )

    @unavailable_as("reading people's names")
    async def names(self, user_ids: Collection[int]) -> dict[int, str]:
        """The names kept of `user_ids` (the people never seen are left out)."""
        if not user_ids:
            return {}
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(people.c.user_id, people.c.name).where(people.c.user_id.in_(list(user_ids)))
            )
            return {int(user_id): str(name) for user_id, name in rows}

    async def _publish(self, conn: AsyncConnection, record: ApprovalRecord) -> None:
        """Tell the fleet a request was decided, when `conn`'s transaction commits."""
        await self.bus.publish(conn, DECIDED_TOPIC, record.id)

    async def _audit(
        self, event: AuditEvent, record: ApprovalRecord, detail: Mapping[str, Any], user_id: int | None = None
    ) -> None:
        ask = record.ask
        await self.log.record(  # the decision itself is committed: a lost row is logged, never raised
            event,
            user_id=ask.origin.user_id if user_id is None else user_id,
            chat_id=ask.origin.chat_id,
            server=ask.server,
            tool=ask.tool,
            request_id=record.id,
            detail={"requester": ask.origin.user_id, **agent_of(ask.origin), **detail},
        )


def _nudges(record: ApprovalRecord) -> dict[str, Any]:
    """The reminder and escalation columns of a new request, only those it uses (none: a row as before 0016)."""
    values: dict[str, Any] = {}
    if record.remind_at is not None:
        values["remind_at"] = record.remind_at
    if record.escalate_at is not None:
        values["escalate_at"] = record.escalate_at
        values["escalate_to"] = json.dumps(sorted(record.ask.escalate_to))
    return values


def _kept(values: Mapping[str, Any] | None, content: AuditContent) -> dict[str, Any]:
    if content is AuditContent.FULL:
        return {"content": None if values is None else dict(values)}
    if content is AuditContent.KEYS:
        return {"keys": None if values is None else sorted(values)}
    return {}


def _record(row: dict[str, Any], votes: list[dict[str, Any]]) -> ApprovalRecord:
    ballots = tuple(
        Ballot(
            v["user_id"], v["name"], Vote(v["vote"]), v["content_hash"], v["at"], Factor(v["factor"] or "tap")
        )
        for v in sorted(votes, key=lambda v: (v["at"], v["id"]))
    )
    approvers = frozenset(int(u) for u in json.loads(row["approvers"]))
    ask = ApprovalAsk(
        origin=Origin(chat_id=row["chat_id"], user_id=row["user_id"], agent=row["agent"], task=row["task"]),
        requester=row["user_name"],
        server=row["server"],
        tool=row["tool"],
        content=json.loads(row["content"]),
        approvers=approvers,
        quorum=row["quorum"],
        chat=row["approval_chat"],
        self_approval=bool(row["self_approval"]),
        timeout_s=0.0,
        question=row["question"],
        factor=Factor(row["second_factor"] or "tap"),
        escalate_to=frozenset(int(u) for u in json.loads(row["escalate_to"] or "[]")),
    )
    state = ApprovalState(
        id=row["id"],
        requester_id=row["user_id"],
        approvers=approvers,
        quorum=row["quorum"],
        self_approval=bool(row["self_approval"]),
        content_hash=row["content_hash"],
        status=ApprovalStatus(row["status"]),
        ballots=ballots,
        generation=row["generation"],
        factor=Factor(row["second_factor"] or "tap"),
    )
    return ApprovalRecord(
        ask=ask,
        state=state,
        gate=row["gate"],
        deadline=row["deadline"],
        created_at=row["created_at"],
        revision=row["revision"],
        cards=tuple((int(c), int(m)) for c, m in json.loads(row["cards"])),
        decided_at=row["decided_at"],
        names={int(k): v for k, v in json.loads(row["names"]).items()},
        ran_by=row["ran_by"],
        remind_at=row["remind_at"],
        reminded_at=row["reminded_at"],
        escalate_at=row["escalate_at"],
        escalated_at=row["escalated_at"],
    )


async def _advance(
    conn: AsyncConnection, record: ApprovalRecord, *conditions: ColumnElement[bool], **values: Any
) -> bool:
    """The compare-and-set every change of a request is: write `values` and the next revision, only if nobody
    changed the request since `record` was read (and `conditions` hold). False when somebody did."""
    changed = await conn.execute(
        update(approvals)
        .where(approvals.c.id == record.id, approvals.c.revision == record.revision, *conditions)
        .values(revision=record.revision + 1, **values)
    )
    return changed.rowcount == 1

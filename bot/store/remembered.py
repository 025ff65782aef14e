"""Remembered decisions in the database (`remembered_decisions` table): the store's `Memory`
(`bot.core.remembered`). Does I/O.

A decision is kept per person and agent token, for exactly one tool and input; every read goes to the database
(no cache), so a decision kept through one process answers in every process sharing the database, and a revoked
one stops answering at once everywhere. Times are UTC, ISO 8601 with microseconds.

The `[[approvals]]` rules are read at every recall, not when the decision was made: a decision is used only while
its span is still offered for the ask (`spans_offered` over the rules whose `hooks` cover it). So a rule with a
quorum above 1 or `remember = false` added after a decision was kept silences it, and an "always" decision
answers only while every rule covering the ask still says `remember = "always"`.

Audited: keeping a decision and revoking one; the input as `[audit] content` allows (its SHA-256 always). A use is
audited where it is used, once, as the answer to the prompt (`bot.web.hooks`: `permission_decided` naming the
decision, its maker and time): a recall is only a read, and the one who recalls may still not use what it finds. An audit row
that cannot be written is logged and does not undo what was done. Every method raises `StoreUnavailable` when the
database cannot be read or written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Row, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import ApprovalRule, AuditContent
from bot.config.approvals import hook_rules
from bot.core.remembered import Ask, Decision, Span, decision, spans_offered
from bot.store.audit import AuditEvent, AuditLog
from bot.store.errors import unavailable_as
from bot.store.tables import remembered_decisions

__all__ = ["StoredMemory"]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class StoredMemory:
    """The `remembered_decisions` table of one database, under the config's `[[approvals]]` rules."""

    def __init__(
        self,
        engine: AsyncEngine,
        log: AuditLog | None = None,
        rules: Sequence[ApprovalRule] = (),
        content: AuditContent = AuditContent.FULL,
        clock: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self.engine = engine
        self.log = log
        """Where keeping, using and revoking decisions are recorded (None: nowhere)."""
        self.rules = tuple(rules)
        """`[[approvals]]`: which spans an ask may be answered for (`offered`)."""
        self.content = content
        self.clock = clock
        """When a revocation happens (`forget` is given no time)."""

    def offered(self, ask: Ask) -> tuple[Span, ...]:
        """The spans an answer to `ask` may be remembered for, under the rules as they are now."""
        return spans_offered(hook_rules(self.rules, ask.tool, _input(ask)))

    @unavailable_as("recalling a remembered decision")
    async def recall(self, ask: Ask, now: dt.datetime) -> Decision | None:
        """The newest decision that answers `ask` at `now` and whose span the rules still offer (not audited: its
        user audits the use)."""
        held = [span.value for span in self.offered(ask) if span is not Span.ONCE]
        if not held:
            return None
        query = select(remembered_decisions).where(
            remembered_decisions.c.user_id == ask.person,
            remembered_decisions.c.agent_id == ask.agent,
            remembered_decisions.c.tool == ask.tool,
            remembered_decisions.c.input_hash == _hash(ask.input),
            remembered_decisions.c.forgotten.is_(None),
            remembered_decisions.c.span.in_(held),
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        covering = [made for made in map(_decision, rows) if made.covers(ask, now)]
        return max(covering, key=lambda made: made.id, default=None)

    @unavailable_as("remembering a decision")
    async def keep(
        self, ask: Ask, allow: bool, span: Span, now: dt.datetime, *, by: int | None = None
    ) -> Decision:
        """Remember the answer to `ask` for `span`; `by`: the approver who gave it, when not the person.

        Raises:
            ValueError: `span` is `ONCE`, or the rules covering `ask` do not offer it.
            StoreUnavailable: the database cannot be written.
        """
        if span not in self.offered(ask):
            raise ValueError(
                f"the approval rules covering {ask.tool} do not let an answer be kept for {span}"
            )
        made = decision(0, ask, allow, span, now, by)
        async with self.engine.begin() as conn:
            result = await conn.execute(
                insert(remembered_decisions).values(
                    user_id=made.person,
                    agent_id=made.agent,
                    tool=made.tool,
                    input=made.input,
                    input_hash=_hash(made.input),
                    allow=made.allow,
                    span=made.span.value,
                    session=made.session,
                    made_at=_iso(made.made_at),
                    made_by=made.by,
                    until=None if made.until is None else _iso(made.until),
                )
            )
            new_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
        if not isinstance(new_id, int):
            raise RuntimeError("the database gave the remembered decision no id")
        kept = replace(made, id=new_id)
        await self._audit(AuditEvent.DECISION_REMEMBERED, kept, ask, {"session": kept.session})
        return kept

    @unavailable_as("reading remembered decisions")
    async def of(self, person: int, now: dt.datetime) -> Sequence[Decision]:
        """The person's decisions that still hold at `now` (not revoked, not past their hour), newest first."""
        query = (
            select(remembered_decisions)
            .where(remembered_decisions.c.user_id == person, remembered_decisions.c.forgotten.is_(None))
            .order_by(remembered_decisions.c.id.desc())
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [made for made in map(_decision, rows) if made.until is None or now < made.until]

    @unavailable_as("revoking a remembered decision")
    async def forget(self, person: int, decision_id: int) -> bool:
        """Revoke one of the person's decisions (audited); False when there is no such live decision of theirs
        (someone else's, unknown, or revoked already: of two revokes racing, one reports it)."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    select(remembered_decisions).where(
                        remembered_decisions.c.id == decision_id,
                        remembered_decisions.c.user_id == person,
                        remembered_decisions.c.forgotten.is_(None),
                    )
                )
            ).first()
            if row is None:
                return False
            result = await conn.execute(
                update(remembered_decisions)
                .where(remembered_decisions.c.id == decision_id, remembered_decisions.c.forgotten.is_(None))
                .values(forgotten=_iso(self.clock()))
            )
        if not result.rowcount:
            return False
        if self.log is not None:
            made = _decision(row)
            await self.log.record(
                AuditEvent.DECISION_FORGOTTEN,
                user_id=person,
                tool=made.tool,
                detail={**_about(made), "by": person},
            )
        return True

    async def _audit(self, event: AuditEvent, made: Decision, ask: Ask, extra: dict[str, Any]) -> None:
        """One audit row about `made`, in answer to `ask`: the decision, its maker and time; the input as
        `[audit] content` allows."""
        if self.log is None:
            return
        detail = {**_about(made), **extra, "input_sha256": _hash(ask.input)}
        if self.content is AuditContent.FULL:
            detail["input"] = ask.input
        elif self.content is AuditContent.KEYS:
            detail["input_keys"] = sorted(_input(ask))
        await self.log.record(event, user_id=ask.person, tool=ask.tool, detail=detail)


def _about(made: Decision) -> dict[str, Any]:
    """What every audit row says of a decision: which, allow or deny, for how long, whose agent, who made it and
    when."""
    return {
        "decision": made.id,
        "allow": made.allow,
        "span": made.span.value,
        "agent_id": made.agent,
        "made_by": made.maker,
        "made_at": _iso(made.made_at),
        "until": None if made.until is None else _iso(made.until),
    }


def _input(ask: Ask) -> dict[str, object]:
    loaded = json.loads(ask.input)
    return loaded if isinstance(loaded, dict) else {}


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _decision(row: Row[Any]) -> Decision:
    return Decision(
        id=row.id,
        person=row.user_id,
        agent=row.agent_id,
        tool=row.tool,
        input=row.input,
        allow=bool(row.allow),
        span=Span(row.span),
        session=row.session,
        made_at=dt.datetime.fromisoformat(row.made_at),
        until=None if row.until is None else dt.datetime.fromisoformat(row.until),
        by=row.made_by,
    )

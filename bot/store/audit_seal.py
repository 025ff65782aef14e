"""Which key seals the audit chain, sealing a new chain, and `audit reseal`. Does I/O.

A chain is sealed when `audit_seal` names the public half of the key that chains it. The first start with a
key on an empty chain seals it: in one transaction, under the chain's lock, it records the public key in
`audit_seal` and writes the chain's first row, `audit_sealed`, naming it, so the chain itself says it was
keyed. A start never seals a chain that has rows (`seal_new` raises `AuditUnsealed`, and the bot does not
start):

- when a row (`audit_sealed`, `audit_resealed`) or a stored checkpoint says the chain was keyed, it has lost
  its seal, which only someone writing the database does: it is tampered (`keyed_trace`), `--verify` says so,
  and `reseal` refuses it too (restore a backup);
- otherwise it was written without a key (a legacy chain). The operator seals it with `toolnexus-bot audit
  reseal` (`reseal`): in one transaction, under the chain's lock, every row's `prev_hash` and `hash` are
  recomputed with HMAC-SHA-256 and the seal recorded; then an `audit_resealed` row records the old head and
  how the old chain stood, and a checkpoint is signed for the operator to ship. Nothing proves that such a
  chain was never keyed (a writer can delete every trace): the old head is printed to compare with what was
  shipped, and a line shipped before no longer matches a re-sealed chain.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import asdict, dataclass

from sqlalchemy import func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from bot.store.audit import (
    GENESIS,
    AuditEvent,
    AuditLog,
    AuditRow,
    _check,
    _digest,
    _lock_head,
    canonical_json,
)
from bot.store.audit_keys import AuditKeys, Checkpoint
from bot.store.errors import AuditUnsealed
from bot.store.tables import audit, audit_checkpoints, audit_seal

__all__ = ["Resealed", "keyed_trace", "reseal", "seal_new", "sealed_with"]

logger = logging.getLogger(__name__)

_MARKS = (AuditEvent.AUDIT_SEALED.value, AuditEvent.AUDIT_RESEALED.value)
"""The rows that say the chain was keyed."""


async def sealed_with(engine: AsyncEngine) -> str | None:
    """The public key the chain is sealed with, or None for an unsealed chain."""
    async with engine.connect() as conn:
        return (await conn.execute(select(audit_seal.c.public_key).limit(1))).scalar()


async def keyed_trace(conn: AsyncConnection) -> str | None:
    """What in the database says the chain was keyed once (the first such row, else a stored checkpoint), in
    words; None when nothing does."""
    mark = (
        await conn.execute(
            select(audit.c.seq, audit.c.event).where(audit.c.event.in_(_MARKS)).order_by(audit.c.seq).limit(1)
        )
    ).first()
    if mark is not None:
        return f"row {mark.seq} ({mark.event}) says so"
    count = (await conn.execute(select(audit_checkpoints.c.count).limit(1))).scalar()
    if count is not None:
        return f"a checkpoint for {count} rows is stored"
    return None


async def _rows(conn: AsyncConnection) -> int:
    return int((await conn.execute(select(func.count()).select_from(audit))).scalar_one())


async def seal_new(log: AuditLog) -> None:
    """At a keyed start: seal an empty chain under `log.keys` (see the module docstring); nothing when it is
    sealed already.

    Raises:
        AuditUnsealed: the chain has rows and no seal (tampered, or written without a key).
        sqlalchemy.exc.SQLAlchemyError: the database refused.
    """
    keys = log.keys
    assert keys is not None
    async with log.engine.begin() as conn:
        await conn.run_sync(_lock_head)
        if (await conn.execute(select(audit_seal.c.public_key).limit(1))).first() is not None:
            return
        rows = await _rows(conn)
        if rows:
            raise AuditUnsealed(rows, await keyed_trace(conn))
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
        first = {
            "seq": 1,
            "id": str(uuid.uuid4()),
            "at": now,
            "event": AuditEvent.AUDIT_SEALED.value,
            **dict.fromkeys(("user_id", "chat_id", "server", "tool", "request_id")),
            "detail": canonical_json({"public_key": keys.public_key}),
            "prev_hash": GENESIS,
        }
        first["hash"] = _digest(first, keys)
        await conn.execute(insert(audit).values(**first))
        await conn.execute(insert(audit_seal).values(public_key=keys.public_key, sealed_at=now, rows=0))
    await log.read_head()


@dataclass(frozen=True, slots=True)
class Resealed:
    """What `reseal` did."""

    rows: int
    """The rows re-chained."""
    old_head: str
    """The old chain's newest hash (64 zeros for none)."""
    old_chain: str
    """"ok", or where the old chain was broken."""
    checkpoint: Checkpoint
    """Signed after the `audit_resealed` row: the line to ship."""


async def reseal(log: AuditLog) -> Resealed | None:
    """Seal a chain written without a key under `log.keys` (the operator's `audit reseal`, see the module
    docstring); None when it is sealed with this key already.

    Raises:
        AuditUnsealed: the chain was keyed before (`trace` set): it is tampered, and stays unsealed.
        ValueError: the chain is sealed with another key.
        sqlalchemy.exc.SQLAlchemyError: the database refused.
    """
    keys = log.keys
    assert keys is not None
    async with log.engine.begin() as conn:
        await conn.run_sync(_lock_head)
        sealed = (await conn.execute(select(audit_seal.c.public_key).limit(1))).scalar()
        if sealed == keys.public_key:
            return None
        if sealed is not None:
            raise ValueError(
                f"the chain is sealed with another key ({sealed}); this config's is {keys.public_key}"
            )
        trace = await keyed_trace(conn)
        if trace is not None:
            raise AuditUnsealed(await _rows(conn), trace)
        rows = [AuditRow(**r._asdict()) for r in await conn.execute(select(audit).order_by(audit.c.seq))]
        old_head, old_chain = _old_chain(rows)
        await _rechain(conn, rows, keys)
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
        await conn.execute(
            insert(audit_seal).values(public_key=keys.public_key, sealed_at=now, rows=len(rows))
        )
    await log.read_head()
    await log.append(
        AuditEvent.AUDIT_RESEALED,
        detail={
            "rows": len(rows),
            "old_head": old_head,
            "old_chain": old_chain,
            "public_key": keys.public_key,
        },
    )
    made = await log.checkpoint()
    assert made is not None
    logger.info("audit log: %d rows re-sealed with the audit key (the old chain: %s)", len(rows), old_chain)
    return Resealed(len(rows), old_head, old_chain, made)


def _old_chain(rows: list[AuditRow]) -> tuple[str, str]:
    """The old chain's head, and "ok" or where it broke (as plain SHA-256)."""
    prev, expected, previous = GENESIS, 1, None
    for row in rows:
        broken = _check(row, expected, prev, previous)
        if broken is not None:
            return (rows[-1].hash, f"broken at {broken}")
        prev, expected, previous = row.hash, row.seq + 1, row
    return (rows[-1].hash if rows else GENESIS, "ok")


async def _rechain(conn: AsyncConnection, rows: list[AuditRow], keys: AuditKeys) -> None:
    prev = GENESIS
    for row in rows:
        values = {**asdict(row), "prev_hash": prev}
        values["hash"] = prev = _digest(values, keys)
        await conn.execute(
            update(audit).where(audit.c.id == row.id).values(prev_hash=values["prev_hash"], hash=prev)
        )

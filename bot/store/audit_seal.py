"""Re-sealing the audit chain once under the audit key, and which key the chain is sealed with. Does I/O.

A chain written without a key (before 0006, or before `[storage] secret_key` was set) is re-chained with
HMAC-SHA-256 the first time the store opens with a key: in one transaction, under the chain's lock, every
row's `prev_hash` and `hash` are recomputed and the key's public half is recorded in `audit_seal`; then an
`audit_resealed` row (unless there were none) says how many rows were re-sealed and whether the old chain held. A chain already sealed
with another key is left alone (verifying it then fails: keep the key, or its `[storage] secret_key`, stable).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import asdict

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.audit import GENESIS, AuditEvent, AuditLog, AuditRow, _check, _digest, _lock_head
from bot.store.tables import audit, audit_seal

__all__ = ["reseal", "sealed_with"]

logger = logging.getLogger(__name__)


async def sealed_with(engine: AsyncEngine) -> str | None:
    """The public key the chain is sealed with, or None for an unkeyed chain."""
    async with engine.connect() as conn:
        return (await conn.execute(select(audit_seal.c.public_key).limit(1))).scalar()


async def reseal(log: AuditLog) -> bool:
    """Seal an unkeyed chain under `log.keys` (see the module docstring); True when it did."""
    keys = log.keys
    assert keys is not None
    async with log.engine.begin() as conn:
        await conn.run_sync(_lock_head)
        if (await conn.execute(select(audit_seal.c.public_key).limit(1))).first() is not None:
            return False
        rows = [AuditRow(**r._asdict()) for r in await conn.execute(select(audit).order_by(audit.c.seq))]
        old_state, prev, expected, previous = "ok", GENESIS, 1, None
        for row in rows:
            broken = _check(row, expected, prev, previous)
            if broken is not None:
                old_state = f"broken at {broken}"
                break
            prev, expected, previous = row.hash, row.seq + 1, row
        prev = GENESIS
        for row in rows:
            values = {**asdict(row), "prev_hash": prev}
            values["hash"] = prev = _digest(values, keys)
            await conn.execute(
                update(audit).where(audit.c.id == row.id).values(prev_hash=values["prev_hash"], hash=prev)
            )
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds")
        await conn.execute(
            audit_seal.insert().values(public_key=keys.public_key, sealed_at=now, rows=len(rows))
        )
    await log.read_head()
    if not rows:  # a new database: sealed from its first row on, nothing to say
        return True
    await log.append(
        AuditEvent.AUDIT_RESEALED,
        detail={"rows": len(rows), "old_chain": old_state, "public_key": keys.public_key},
    )
    logger.info("audit log: %d rows re-sealed with the audit key (the old chain: %s)", len(rows), old_state)
    return True

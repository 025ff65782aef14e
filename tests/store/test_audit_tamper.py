"""The audit chain against someone who can write the database but holds no key: they edit a row and re-chain,
delete a row and renumber, append a forged row, or cut the newest rows. With `[storage] secret_key` the
chain is HMAC-SHA-256, so `audit --verify` names each; a checkpoint line shipped elsewhere catches a cut
tail or a rewritten history with the public key alone. Through the command's arguments, exit status and
output (`bot.cli.main` in process: the process is not the point), on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.config import Secret, StorageConfig
from bot.store import AuditEvent, canonical_form, open_engine, open_store
from bot.store.audit import GENESIS
from bot.store.tables import audit, audit_checkpoints
from tests.inprocess import toolnexus

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="


def config_file(tmp_path: Path, store_url: str, *, key: bool) -> Path:
    path = tmp_path / ("keyed.toml" if key else "public.toml")
    secret = f'secret_key = "{KEY}"\n' if key else ""
    path.write_text(f'[storage]\nurl = "{store_url}"\n{secret}[servers.demo]\ncommand = "python"\n')
    return path


def audit_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return toolnexus("audit", "--config", str(config), *args)


async def written(store_url: str, count: int = 6) -> None:
    """`count` events written by the bot with the key (the store closes with a checkpoint)."""
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as store:
        for i in range(count):
            await store.audit.append(AuditEvent.CALL_STARTED, user_id=i + 1, detail={"arguments": {"i": i}})


async def rechain(conn: AsyncConnection) -> None:
    """What the attacker can do without the key: renumber densely and recompute every hash with SHA-256."""
    rows = [dict(r._mapping) for r in await conn.execute(select(audit).order_by(audit.c.seq))]
    prev = GENESIS
    for seq, row in enumerate(rows, 1):
        row |= {"seq": seq, "prev_hash": prev}
        prev = hashlib.sha256(canonical_form(row)).hexdigest()
        values = {"seq": -seq, "prev_hash": row["prev_hash"], "hash": prev}
        await conn.execute(update(audit).where(audit.c.id == row["id"]).values(**values))
    await conn.execute(update(audit).values(seq=-audit.c.seq))


async def tamper(store_url: str, attack: str) -> None:
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            if attack == "edit":
                await conn.execute(update(audit).where(audit.c.seq == 3).values(detail=json.dumps({"i": 99})))
            elif attack == "delete":
                await conn.execute(delete(audit).where(audit.c.seq == 3))
            elif attack == "append":
                head = (await conn.execute(select(audit).order_by(audit.c.seq.desc()).limit(1))).one()
                row: dict[str, Any] = dict(head._mapping) | {
                    "id": str(uuid.uuid4()),
                    "seq": head.seq + 1,
                    "prev_hash": head.hash,
                    "user_id": 666,
                }
                row["hash"] = hashlib.sha256(canonical_form(row)).hexdigest()
                await conn.execute(insert(audit).values(**row))
            elif attack == "cut":
                top = (
                    await conn.execute(select(audit.c.seq).order_by(audit.c.seq.desc()).limit(1))
                ).scalar_one()
                await conn.execute(delete(audit).where(audit.c.seq > top - 2))
                await conn.execute(delete(audit_checkpoints))
            if attack in ("edit", "delete"):
                await rechain(conn)
    finally:
        await engine.dispose()


@pytest.mark.parametrize("attack", ["edit", "delete", "append"])
async def test_a_rechained_renumbered_or_forged_row_is_named_by_verify(
    store_url: str, tmp_path: Path, attack: str
) -> None:
    """Edit and re-chain, delete and renumber, append a row: each chain links up as plain SHA-256, and
    `audit --verify` with the key names the first row that was not made with it."""
    await written(store_url)
    keyed = config_file(tmp_path, store_url, key=True)
    assert audit_cli(keyed, "--verify").returncode == 0
    await tamper(store_url, attack)
    done = audit_cli(keyed, "--verify")
    assert done.returncode == 1 and "audit chain broken at row" in done.stdout, done.stdout + done.stderr


@pytest.mark.parametrize("attack", ["cut", "edit", "delete"])
async def test_a_shipped_checkpoint_catches_a_cut_tail_or_a_rewritten_history_without_any_secret(
    store_url: str, tmp_path: Path, attack: str
) -> None:
    """`audit checkpoint` prints a signed line; after the newest rows (and the stored checkpoints) are cut,
    or history is re-chained, `audit --verify --checkpoint LINE --public-key KEY` with a config that holds
    no secret says so."""
    await written(store_url)
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    made = audit_cli(keyed, "checkpoint")
    assert made.returncode == 0, made.stderr
    line = made.stdout.strip()
    key = audit_cli(keyed, "public-key").stdout.strip()
    assert line.startswith("toolnexus-audit-checkpoint v1 count=") and f"key={key}" in line
    assert audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key).returncode == 0
    await tamper(store_url, attack)
    done = audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ("cut" if attack == "cut" else "rewritten") in done.stdout or "broken" in done.stdout
    forged = line.replace("count=", "count=1")
    assert audit_cli(public, "--verify", "--checkpoint", forged).returncode == 1


async def test_an_unkeyed_chain_is_resealed_once_with_a_row_saying_so(store_url: str, tmp_path: Path) -> None:
    """Rows written without a key are re-chained the first time the store opens with one; an
    `audit_resealed` row says how many and that the old chain held; verify with the key then passes."""
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        await store.audit.append(AuditEvent.CALL_STARTED, user_id=1)
        await store.audit.append(AuditEvent.CALL_ENDED, user_id=1)
    await written(store_url, count=1)
    await written(store_url, count=1)
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as store:
        events = [(row.event, json.loads(row.detail).get("rows")) for row in await store.audit.rows()]
    assert events[2] == ("audit_resealed", 2) and [e for e, _ in events].count("audit_resealed") == 1
    assert len(events) == 5
    done = audit_cli(config_file(tmp_path, store_url, key=True), "--verify")
    assert done.returncode == 0 and "HMAC-SHA-256" in done.stdout, done.stdout

"""The audit chain against someone who can write the database but holds no key: they edit a row and re-chain,
delete a row and renumber, append a forged row, or cut the newest rows; they write a seal and checkpoints
signed with a key of their own, strip the seal so that the next start would re-seal a forged history, or cut
the tail and let the bot grow it back to the shipped count. With `[storage] secret_key` the chain is
HMAC-SHA-256, so `audit --verify` names each; a checkpoint line shipped elsewhere catches a cut tail or a
rewritten history with the public key alone. The attacks are scripted as a database writer would: statements
against the tables, never the bot's own code. Through the command's arguments, exit status and output
(`bot.cli.main` in process: the process is not the point), on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.config import Secret, StorageConfig
from bot.failures import failure_line
from bot.store import AuditEvent, StoreUnavailable, canonical_form, open_engine, open_store
from bot.store.audit import GENESIS
from bot.store.tables import audit, audit_checkpoints, audit_seal
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


async def append_forged(conn: AsyncConnection) -> None:
    """A row the bot never wrote, after the head, linked with plain SHA-256."""
    head = (await conn.execute(select(audit).order_by(audit.c.seq.desc()).limit(1))).one()
    row: dict[str, Any] = dict(head._mapping) | {
        "id": str(uuid.uuid4()),
        "seq": head.seq + 1,
        "prev_hash": head.hash,
        "user_id": 666,
    }
    row["hash"] = hashlib.sha256(canonical_form(row)).hexdigest()
    await conn.execute(insert(audit).values(**row))


async def tamper(store_url: str, attack: str) -> None:
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            if attack == "edit":
                await conn.execute(update(audit).where(audit.c.seq == 3).values(detail=json.dumps({"i": 99})))
            elif attack == "delete":
                await conn.execute(delete(audit).where(audit.c.seq == 3))
            elif attack == "append":
                await append_forged(conn)
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


def shipped(config: Path) -> tuple[str, str]:
    """What an operator ships elsewhere: a checkpoint line signed now, and the public key that checks it."""
    made = audit_cli(config, "checkpoint")
    assert made.returncode == 0, made.stderr
    key = audit_cli(config, "public-key").stdout.strip()
    return made.stdout.strip(), key


async def count_rows(conn: AsyncConnection) -> int:
    return (await conn.execute(select(func.count()).select_from(audit))).scalar_one()


async def forge_with_own_key(store_url: str) -> None:
    """The writer edits row 2, cuts row 5, pads the chain back to its count with a row of its own, re-links
    it with plain SHA-256, then names an Ed25519 key of its own in `audit_seal` and replaces the stored
    checkpoints with one at that count signed with it."""
    own = Ed25519PrivateKey.generate()
    own_key = base64.urlsafe_b64encode(own.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            count = await count_rows(conn)
            await conn.execute(update(audit).where(audit.c.seq == 2).values(detail=json.dumps({"i": 99})))
            await conn.execute(delete(audit).where(audit.c.seq == 5))
            await rechain(conn)
            await append_forged(conn)
            head = (await conn.execute(select(audit.c.hash).where(audit.c.seq == count))).scalar_one()
            await conn.execute(delete(audit_seal))
            at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
            await conn.execute(insert(audit_seal).values(public_key=own_key, sealed_at=at, rows=count))
            signed = f"toolnexus-audit-checkpoint v1 count={count} head={head} at={at} key={own_key}"
            sig = base64.urlsafe_b64encode(own.sign(signed.encode())).decode()
            await conn.execute(delete(audit_checkpoints))
            values = {"count": count, "head": head, "at": at, "key": own_key, "sig": sig}
            await conn.execute(insert(audit_checkpoints).values(**values))
    finally:
        await engine.dispose()


async def test_a_seal_and_a_checkpoint_signed_with_the_writers_own_key_do_not_outvote_the_shipped_line(
    store_url: str, tmp_path: Path
) -> None:
    """The shipped line and the key given on the command line are the only trust: the writer's stored
    checkpoint at the same count is named as forged, the chain's own head at that count is not the line's,
    and the seal naming the writer's key is not believed; with the secret, the same."""
    await written(store_url, count=10)
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    line, key = shipped(keyed)
    await forge_with_own_key(store_url)
    done = audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key)
    assert done.returncode == 1, done.stdout + done.stderr
    count = line.split("count=")[1].split()[0]
    assert f"audit checkpoint for {count} rows in the database is forged" in done.stdout, done.stdout
    assert "rewritten" in done.stdout and "sealed with another key" in done.stdout, done.stdout
    with_secret = audit_cli(keyed, "--verify", "--checkpoint", line)
    assert with_secret.returncode == 1 and "is forged" in with_secret.stdout, with_secret.stdout


async def strip_the_seal(store_url: str, *, erase_trace: bool) -> None:
    """The writer edits row 2, appends a forged row, re-links the chain with plain SHA-256 and deletes the
    seal and the stored checkpoints (with `erase_trace`, also every row saying the chain was ever sealed),
    so that the chain looks as if it had never been keyed."""
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(update(audit).where(audit.c.seq == 2).values(detail=json.dumps({"i": 99})))
            if erase_trace:
                await conn.execute(delete(audit).where(audit.c.event.in_(["audit_sealed", "audit_resealed"])))
            await rechain(conn)
            await append_forged(conn)
            await conn.execute(delete(audit_seal))
            await conn.execute(delete(audit_checkpoints))
    finally:
        await engine.dispose()


async def refused_start(store_url: str) -> str:
    """The keyed store's start on this database: it must refuse; the one line it says."""
    with pytest.raises(StoreUnavailable) as refused:
        async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))):
            pass
    said = str(refused.value)
    assert "\n" not in said and "audit reseal" in said, said
    assert failure_line(refused.value, None) == said  # what the bot prints as it exits 1
    return said


async def test_a_keyed_chain_that_lost_its_seal_is_tampered_and_the_start_never_reseals_it(
    store_url: str, tmp_path: Path
) -> None:
    """The one-time reseal no longer launders a forged history: the keyed start refuses in one line naming
    `audit reseal`, `--verify` with the secret calls the chain tampered (a row says it was sealed), the
    shipped line fails, and `audit reseal` refuses a chain that was keyed before."""
    await written(store_url)
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    line, key = shipped(keyed)
    await strip_the_seal(store_url, erase_trace=False)
    assert "tampered" in await refused_start(store_url)
    done = audit_cli(keyed, "--verify")
    assert done.returncode == 1 and "tampered" in done.stdout, done.stdout + done.stderr
    assert_broken(audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key))
    reseal = audit_cli(keyed, "reseal")
    assert reseal.returncode == 1 and "sealed with a key before" in reseal.stderr, (
        reseal.stdout + reseal.stderr
    )
    await refused_start(store_url)
    assert_broken(audit_cli(keyed, "--verify"))


async def test_a_keyed_chain_stripped_of_every_trace_of_its_key_fails_against_the_shipped_line(
    store_url: str, tmp_path: Path
) -> None:
    """When the writer erases every trace that the chain was ever keyed, it looks like a legacy chain: the
    start still refuses (naming `audit reseal`), and if the operator then reseals it, the line shipped
    before fails against it, with the public key alone and with the secret."""
    await written(store_url)
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    line, key = shipped(keyed)
    await strip_the_seal(store_url, erase_trace=True)
    await refused_start(store_url)
    assert_broken(audit_cli(keyed, "--verify"))
    assert_broken(audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key))
    reseal = audit_cli(keyed, "reseal")
    assert reseal.returncode == 0, reseal.stdout + reseal.stderr
    assert audit_cli(keyed, "--verify").returncode == 0
    for config in (public, keyed):
        done = audit_cli(config, "--verify", "--checkpoint", line, "--public-key", key)
        assert done.returncode == 1 and "rewritten" in done.stdout, done.stdout + done.stderr


async def test_a_cut_tail_grown_back_to_the_shipped_count_fails_against_the_shipped_line(
    store_url: str, tmp_path: Path
) -> None:
    """The writer cuts the newest three rows (and the stored checkpoints past the cut); the bot appends
    three new rows and signs its own checkpoint at the shipped count: the shipped line still fails, with
    the public key alone and with the secret."""
    await written(store_url, count=10)
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    line, key = shipped(keyed)
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            cut = await count_rows(conn) - 3
            await conn.execute(delete(audit).where(audit.c.seq > cut))
            await conn.execute(delete(audit_checkpoints).where(audit_checkpoints.c.count > cut))
    finally:
        await engine.dispose()
    await written(store_url, count=3)
    assert audit_cli(keyed, "--verify").returncode == 0  # the key alone cannot see a cut
    for config in (public, keyed):
        done = audit_cli(config, "--verify", "--checkpoint", line, "--public-key", key)
        assert done.returncode == 1 and "rewritten" in done.stdout, done.stdout + done.stderr


async def test_verifying_against_a_shipped_line_needs_only_the_database_the_line_and_the_key(
    store_url: str, tmp_path: Path
) -> None:
    """The shipped production config on a verifying host that sets none of its variables but the
    database's: `audit --verify --checkpoint LINE --public-key KEY` reads only `[storage] url`."""
    await written(store_url)
    line, key = shipped(config_file(tmp_path, store_url, key=True))
    text = (Path(__file__).parents[2] / "deploy" / "production.toml").read_text()
    assert 'url = "postgresql://bot:${PGPASSWORD}@db/toolnexus"' in text
    production = tmp_path / "production.toml"
    production.write_text(text.replace("postgresql://bot:${PGPASSWORD}@db/toolnexus", store_url))
    done = toolnexus(
        "audit", "--config", str(production), "--verify", "--checkpoint", line, "--public-key", key
    )
    assert done.returncode == 0 and "audit chain ok" in done.stdout, done.stdout + done.stderr


async def test_an_unkeyed_chain_is_resealed_only_by_the_operators_command(
    store_url: str, tmp_path: Path
) -> None:
    """Rows written without a key: the keyed start refuses, naming `audit reseal`; that command prints the old
    head and a checkpoint line to ship, writes one `audit_resealed` row, and the start then runs."""
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        await store.audit.append(AuditEvent.CALL_STARTED, user_id=1)
        await store.audit.append(AuditEvent.CALL_ENDED, user_id=1)
        old_head = (await store.audit.rows())[-1].hash
    said = await refused_start(store_url)
    assert "2 rows" in said and "tampered" not in said, said
    keyed, public = config_file(tmp_path, store_url, key=True), config_file(tmp_path, store_url, key=False)
    reseal = audit_cli(keyed, "reseal")
    assert reseal.returncode == 0 and old_head in reseal.stdout, reseal.stdout + reseal.stderr
    line = reseal.stdout.strip().splitlines()[-1]
    assert line.startswith("toolnexus-audit-checkpoint v1 count=3 "), reseal.stdout
    assert audit_cli(keyed, "reseal").returncode == 0  # sealed already: nothing to do
    await written(store_url, count=1)
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as store:
        events = [(row.event, json.loads(row.detail).get("rows")) for row in await store.audit.rows()]
    assert events[2] == ("audit_resealed", 2) and [e for e, _ in events].count("audit_resealed") == 1
    assert len(events) == 4
    key = audit_cli(keyed, "public-key").stdout.strip()
    done = audit_cli(public, "--verify", "--checkpoint", line, "--public-key", key)
    assert done.returncode == 0, done.stdout
    done = audit_cli(keyed, "--verify")
    assert done.returncode == 0 and "HMAC-SHA-256" in done.stdout, done.stdout


def assert_broken(done: subprocess.CompletedProcess[str]) -> None:
    """`audit --verify` failed because of the chain (exit 1 naming what), not for another reason with exit 1
    (an unreachable database)."""
    assert done.returncode == 1 and "audit chain" in done.stdout and "audit chain ok" not in done.stdout, (
        done.stdout + done.stderr
    )

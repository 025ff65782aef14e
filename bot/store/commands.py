"""The store's commands: `toolnexus-bot db upgrade` and `toolnexus-bot audit`. Does I/O (database, stdout).

`audit checkpoint` signs the chain's length and head now and prints the line to ship elsewhere; `audit
public-key` prints the key that checks such lines; `audit reseal` seals a chain written without a key
(`bot.store.audit_seal`); `audit --verify [--checkpoint LINE] [--public-key KEY]` walks the chain (with the
key from the config: every row's HMAC; without it: the links), and checks it against the given line and the
checkpoints kept in the database. The only trust is the key given on the command line (else the one derived
from the config's secret): a stored checkpoint not signed with it is reported as forged, a seal naming
another key as such, and nothing stored replaces the given line. With `--public-key` no secret is needed.

Exit status: 0 fine; 1 the audit chain is broken (`--verify`) or the database cannot be used.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import sys
from typing import Final, TextIO

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Config, StorageConfig
from bot.store.audit import AuditLog, AuditRow
from bot.store.audit_keys import AuditKeys, BadCheckpoint, Checkpoint
from bot.store.audit_seal import keyed_trace, reseal, sealed_with
from bot.store.engine import DatabaseMissing, current_revision, display_url, failure_reason, open_engine
from bot.store.errors import AuditUnsealed
from bot.store.tables import audit

__all__ = ["audit_command", "db_upgrade", "parse_since", "quiet_broken_pipe"]

_COLUMNS: Final = ("seq", "id", "at", "event", "user_id", "chat_id", "server", "tool", "request_id", "detail")


def parse_since(text: str) -> dt.datetime:
    """`--since`: an ISO date or date-time; naive values are UTC.

    Raises:
        argparse.ArgumentTypeError: not an ISO date, with the forms that work (argparse prints it).
    """
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date: use an ISO date or date-time, such as 2026-12-01, 2026-12-01T08:30 "
            "(UTC) or 2026-12-01T08:30+01:00"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


async def db_upgrade(config: Config, out: TextIO | None = None) -> int:
    """Migrate the configured database to the newest revision and say which it is (on `out`, by default the
    `sys.stdout` of the moment)."""
    out = sys.stdout if out is None else out
    assert config.storage is not None  # load_config always sets one
    url = config.storage.url.get()
    try:
        engine = await open_engine(url)
        try:
            revision = await current_revision(engine)
        finally:
            await engine.dispose()
    except (SQLAlchemyError, OSError) as exc:
        print(f"database {display_url(url)}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    print(f"database {display_url(url)}: at revision {revision}", file=out)
    return 0


async def audit_command(
    storage: StorageConfig,
    *,
    since: dt.datetime | None = None,
    user_id: int | None = None,
    server: str | None = None,
    fmt: str = "jsonl",
    verify: bool = False,
    checkpoint: str | None = None,
    public_key: str | None = None,
    action: str | None = None,
    out: TextIO | None = None,
) -> int:
    """Print the audit log (filtered), or with `verify` check its whole chain (against the `checkpoint`
    line too), trusting only `public_key` or, without it, the key derived from `[storage] secret_key`;
    `action` "checkpoint", "public-key" or "reseal" (see above). Read-only but for `checkpoint` and
    `reseal`: a database that does not exist is an error (exit 1), never created; a reader that stops
    reading (`| head`) ends it quietly. `out`: by default the `sys.stdout` of the moment (not of the import)."""
    out = sys.stdout if out is None else out
    url = storage.url.get()
    secret = storage.secret_key
    keys = None if secret is None else AuditKeys(secret.get())
    if action is not None:
        if keys is None:
            print(
                "no audit key: set [storage] secret_key (the chain is plain SHA-256 without it)",
                file=sys.stderr,
            )
            return 1
        if action == "public-key":
            print(keys.public_key, file=out)
            return 0
    trusted = public_key.strip() if public_key is not None else None
    if trusted is not None and keys is not None and trusted != keys.public_key:
        print(f"audit: --public-key is not the key of this config's secret ({keys.public_key})", file=out)
        return 1
    trusted = trusted or (None if keys is None else keys.public_key)
    line: Checkpoint | None = None
    if checkpoint is not None:
        if trusted is None:
            print(
                "audit checkpoint refused: give --public-key KEY (the key shipped with the line): a line's own "
                "key proves nothing",
                file=out,
            )
            return 1
        try:
            line = Checkpoint.parse(checkpoint, trusted)
        except BadCheckpoint as exc:
            print(f"audit checkpoint refused: {exc}", file=out)
            return 1
    try:
        engine = await open_engine(url, migrate=action == "reseal", create=False)
        try:
            if action == "checkpoint":
                made = await AuditLog(engine, keys).checkpoint()
                assert made is not None
                print(made.line(), file=out)
                return 0
            if action == "reseal":
                return await _reseal(AuditLog(engine, keys), out)
            if verify:
                return await _verify(engine, keys, trusted, line, out)
            log = AuditLog(engine, keys)
            _print(await log.rows(since=since, user_id=user_id, server=server), fmt, out)
        finally:
            await engine.dispose()
    except BrokenPipeError:
        quiet_broken_pipe(out)
        return 0
    except (SQLAlchemyError, OSError, DatabaseMissing) as exc:
        print(f"database {display_url(url)}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    return 0


async def _reseal(log: AuditLog, out: TextIO) -> int:
    try:
        done = await reseal(log)
    except (AuditUnsealed, ValueError) as exc:
        print(f"audit reseal refused: {exc}", file=sys.stderr)
        return 1
    if done is None:
        print("audit log: sealed with this key already; nothing to do", file=out)
        return 0
    print(f"audit log: {done.rows} rows re-sealed under the audit key", file=out)
    print(f"old head: {done.old_head} (the old chain: {done.old_chain})", file=out)
    print(
        "compare the old head with anything shipped before; ship this line (and `audit public-key`):",
        file=out,
    )
    print(done.checkpoint.line(), file=out)
    return 0


async def _verify(
    engine: AsyncEngine, keys: AuditKeys | None, trusted: str | None, line: Checkpoint | None, out: TextIO
) -> int:
    """Walk the chain; `trusted`: the only key a checkpoint may be signed with (the given one, else the
    secret's), `line` the given checkpoint, already checked under it. Prints every problem found."""
    problems: list[str] = []
    sealed = await sealed_with(engine)
    if sealed is not None and trusted is not None and sealed != trusted:
        problems.append(f"audit chain sealed with another key ({sealed}) than the trusted one ({trusted})")
    if sealed is None:
        async with engine.connect() as conn:
            trace = await keyed_trace(conn)
            rows = (await conn.execute(select(func.count()).select_from(audit))).scalar_one()
        if trace is not None:
            problems.append(
                f"audit chain tampered: it was sealed with a key before ({trace}) and lost its seal"
            )
        elif keys is not None and rows:
            problems.append(
                f"audit chain not sealed: {rows} rows written without the key (`toolnexus-bot audit reseal` seals them)"
            )
    anchors = [] if line is None else [line]
    stored = await AuditLog(engine).stored_checkpoints()
    for found in stored if trusted is not None else ():
        try:
            anchors.append(Checkpoint.parse(found.line(), trusted))
        except BadCheckpoint as exc:
            problems.append(f"audit checkpoint for {found.count} rows in the database is forged: {exc}")
    walk = AuditLog(engine, keys if sealed is not None else None)
    content = walk.keys is not None or sealed is None
    count, broken = await walk.verify(anchors, content=content)
    for problem in problems:
        print(problem, file=out)
    if broken is not None:
        print(f"audit chain broken at {broken}", file=out)
    if problems or broken is not None:
        return 1
    how = "" if content else " (links and checkpoints only: without the key, rows' content is not checked)"
    if trusted is None and stored:
        how += f"; {len(stored)} stored checkpoints not checked: no key to trust (give --public-key)"
    kind = "HMAC-SHA-256" if sealed is not None else "SHA-256, unkeyed: it shows accidents, not tampering"
    print(f"audit chain ok: {count} rows, {kind}, {len(anchors)} checkpoints{how}", file=out)
    return 0


def quiet_broken_pipe(out: TextIO) -> None:
    """The reader of `out` went away (`audit | head -1`): point it at /dev/null, so flushing what is left
    at exit raises nothing either."""
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a real file (a test's StringIO)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _print(rows: list[AuditRow], fmt: str, out: TextIO) -> None:
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(_COLUMNS)
        for row in rows:
            writer.writerow([getattr(row, name) for name in _COLUMNS])
        return
    for row in rows:
        values = row.as_dict()
        print(json.dumps({name: values[name] for name in _COLUMNS}, ensure_ascii=False), file=out)

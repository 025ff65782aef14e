"""The store's commands: `toolnexus-bot db upgrade` and `toolnexus-bot audit`. Does I/O (database, stdout).

`audit checkpoint` signs the chain's length and head now and prints the line to ship elsewhere; `audit
public-key` prints the key that checks such lines; `audit --verify [--checkpoint LINE]` walks the chain (with
the key from the config: every row's HMAC; without it: the links), and checks it against the checkpoints kept
in the database and the given line, which needs no secret.

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

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Config
from bot.store.audit import AuditLog, AuditRow
from bot.store.audit_keys import AuditKeys, BadCheckpoint, Checkpoint
from bot.store.audit_seal import sealed_with
from bot.store.engine import DatabaseMissing, current_revision, display_url, failure_reason, open_engine

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
    config: Config,
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
    line too, signed with `public_key` when given); `action` "checkpoint" or "public-key" (see above).
    Read-only: a database that does not exist is an error (exit 1), never created; a reader that stops
    reading (`| head`) ends it quietly. `out`: by default the `sys.stdout` of the moment (not of the import)."""
    out = sys.stdout if out is None else out
    assert config.storage is not None  # load_config always sets one
    url = config.storage.url.get()
    secret = config.storage.secret_key
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
    anchors: list[Checkpoint] = []
    if checkpoint is not None:
        try:
            anchors.append(Checkpoint.parse(checkpoint, public_key))
        except BadCheckpoint as exc:
            print(f"audit checkpoint refused: {exc}", file=out)
            return 1
    try:
        engine = await open_engine(url, migrate=False, create=False)
        try:
            if action == "checkpoint":
                made = await AuditLog(engine, keys).checkpoint()
                assert made is not None
                print(made.line(), file=out)
                return 0
            if verify:
                return await _verify(engine, keys, anchors, out)
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


async def _verify(engine: AsyncEngine, keys: AuditKeys | None, anchors: list[Checkpoint], out: TextIO) -> int:
    sealed = await sealed_with(engine)
    if keys is not None and sealed is not None and sealed != keys.public_key:
        print(f"audit chain sealed with another key ({sealed}); this config's is {keys.public_key}", file=out)
        return 1
    key = sealed or (keys.public_key if keys is not None else None)
    log = AuditLog(engine, keys)
    for stored in await log.stored_checkpoints():
        if stored.key == key:
            try:
                anchors.append(Checkpoint.parse(stored.line(), key))
            except BadCheckpoint:
                print(f"audit checkpoint for {stored.count} rows in the database is forged", file=out)
                return 1
    content = keys is not None or sealed is None
    count, broken = await log.verify(anchors, content=content)
    if broken is not None:
        print(f"audit chain broken at {broken}", file=out)
        return 1
    how = "" if content else " (links and checkpoints only: without the key, rows' content is not checked)"
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

"""Locks that end with their process: `flock` on a file beside a SQLite database, and the keys of PostgreSQL's
advisory locks. Does I/O (the file locks).

The kernel releases an `flock` when the last descriptor of its open file closes, which a process's death
(SIGKILL included) does: a lock never outlives its holder, so nothing stale ever needs clearing by hand. Local
files only (as SQLite itself is).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio

__all__ = ["advisory_key", "file_lock", "try_file_lock"]


def advisory_key(name: str) -> int:
    """A PostgreSQL advisory lock key for what `name` says (e.g. "refresh 1001/gh"): 64 bits of its hash, as the
    `bigint` keys are."""
    digest = hashlib.blake2b(f"toolnexus-bot {name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


@asynccontextmanager
async def file_lock(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive lock on `path` (created, owner-only) for the block, waiting as long as another
    process holds it (in a worker thread: the event loop goes on meanwhile)."""
    fd = _open(path)
    try:
        await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def try_file_lock(path: Path) -> int | None:
    """Take an exclusive lock on `path` (created, owner-only) now: its descriptor, to keep open as long as the
    lock is wanted (closing it releases the lock), or None when another process holds it."""
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd

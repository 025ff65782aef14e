"""The bot's exceptions: one tree under `ToolnexusError`. Pure; imports nothing of ours, so every layer may
import it (core names the store's `StoreUnavailable` from here without knowing the store).

ToolnexusError                 every error the bot raises (catch it only at the top)
 ├── ConfigError               a configuration that cannot be used; one line per problem (config)
 ├── Invalid                   one value's problem while reading the configuration (config)
 ├── StoreError                the database refused or failed something (here; raised by the store)
 │    ├── StoreUnavailable     the database cannot be opened, migrated, read or written (here)
 │    │    └── AuditUnsealed   the audit chain has rows but no seal: a keyed start will not write (store)
 │    ├── DatabaseMissing      a read-only command found no database where the config points (store)
 │    ├── SecondInstance       another live bot holds the place this one needs on the database (store)
 │    ├── Fenced               a write refused: another instance took its user's partition (store)
 │    ├── Unreadable           a stored secret cannot be decrypted (store)
 │    └── BadCheckpoint        an audit checkpoint that does not parse or verify; a ValueError (store)
 ├── CallArgsError             /call arguments that cannot be understood; a ValueError (core)
 ├── Unavailable               a server cannot be used right now (servers)
 ├── SignInFailed              the person did not finish signing in to a server (servers)
 ├── Withdrawn                 a Telegram request withdrawn before its turn came: not sent (telegram)
 │    └── Elsewhere            one for a person another process now owns: left in the outbox for it (telegram)
 ├── IllegalFold               an event that cannot happen to a parked card; a bug, a RuntimeError (telegram)
 └── TooDeep                   a JSON document nested too deep; a ValueError (web)

Two families stand apart, for they import nothing of `bot`: `mapping`'s (`mapping/errors.py`, `MappingError`:
the pure MCP <-> form mapping) and `bot.receipts.BadReceipt` (a `ValueError`: MCP servers copy that one file).
Classes that callers catch as a builtin (`ValueError`, `RuntimeError`) keep it as a second base.
tests/test_errors.py checks that every exception class of bot/ is drawn here under its real base.
"""

from __future__ import annotations

__all__ = ["StoreError", "StoreUnavailable", "ToolnexusError"]


class ToolnexusError(Exception):
    """Base of every error the bot raises (but `mapping`'s and `bot.receipts`')."""


class StoreError(ToolnexusError):
    """Base of the store's errors: the database refused or failed something."""


class StoreUnavailable(StoreError):
    """The database cannot be opened, migrated, read or written; the message (one line) says what and why.

    Raised by the store (`bot.store`) for the ORM's errors; named here so a layer beside or below the store
    (the approval service, core's book Protocols) catches it without importing the store."""

    def __init__(self, message: str, *, file: bool = False) -> None:
        super().__init__(message)
        self.file = file
        """A SQLite file (nothing to be "running"), not a database server."""

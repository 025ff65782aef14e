"""The bot's database: the engine and migrations, the hash-chained audit log, and its observer. Does I/O.

Use as `async with open_store(config) as store:`; `store.audit` is the log and `store.observer` is what the
hub and the prompt registry report to.
"""

from bot.store.audit import AuditEvent, AuditLog, AuditRow, ChainBreak, canonical_form
from bot.store.engine import current_revision, database_url, display_url, open_engine, upgrade
from bot.store.observer import AuditObserver
from bot.store.rounds import RoundStore
from bot.store.store import Store, StoreUnavailable, open_configured_store, open_store

__all__ = [
    "AuditEvent",
    "AuditLog",
    "AuditObserver",
    "AuditRow",
    "ChainBreak",
    "RoundStore",
    "Store",
    "StoreUnavailable",
    "canonical_form",
    "current_revision",
    "database_url",
    "display_url",
    "open_configured_store",
    "open_engine",
    "open_store",
    "upgrade",
]

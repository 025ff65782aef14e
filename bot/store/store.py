"""`Store`: one database opened (and migrated) for the process, with its audit log. Does I/O."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import AuditContent, Config, StorageConfig, TelegramMode
from bot.core.fleet import ALONE, Fleet
from bot.store.agents import AgentStore
from bot.store.approvals import ApprovalStore
from bot.store.audit import AuditEvent, AuditLog
from bot.store.audit_keys import AuditKeys
from bot.store.audit_seal import seal_new, sealed_with
from bot.store.engine import (
    display_url,
    failure_reason,
    is_file_database,
    open_engine,
    writable_file_database,
)
from bot.store.errors import StoreUnavailable
from bot.store.factors import FactorStore
from bot.store.gateway_tasks import GatewayTaskStore
from bot.store.grants import GrantStore
from bot.store.inbox import InboxStore
from bot.store.instances import claim_instance
from bot.store.observer import AuditObserver
from bot.store.outbox import OutboxStore
from bot.store.rounds import RoundStore
from bot.store.tasks import TaskStore
from bot.store.tokens import SignInStore
from bot.store.writer import StoreWriter

logger = logging.getLogger(__name__)

__all__ = [
    "Store",
    "StoreUnavailable",
    "audit_note",
    "check_storage",
    "open_configured_store",
    "open_store",
]


@dataclass(slots=True)
class Store:
    """The open database."""

    engine: AsyncEngine
    audit: AuditLog
    observer: AuditObserver
    approvals: ApprovalStore
    """Approval requests and votes (`[[approvals]]`)."""
    rounds: RoundStore
    """Open questions that outlive the process."""
    agents: AgentStore
    """Agent tokens (`/agents`, the gateway), kept as hashes."""
    inbox: InboxStore
    """The ids of updates delivered to the webhook, so a redelivery is handled once."""
    grants: GrantStore
    """The gateway's OAuth clients, consent requests and issued tokens (as hashes); grants are `agents`' rows."""
    tasks: GatewayTaskStore
    """The gateway's tasks: agents' calls answered at once with a task they poll."""
    signins: SignInStore | None = None
    """Per-person OAuth tokens, when `[storage] secret_key` is set."""
    audit_note: str | None = None
    """What the audit chain is worth when that needs saying (no key): the bot logs it once it runs."""
    factors: FactorStore | None = None
    """Approvers' authenticator secrets (`second_factor = "totp"`), when `[storage] secret_key` is set."""
    outbox: OutboxStore | None = None
    """The messages that must reach their person, kept until Telegram answered (the Telegram bot's)."""
    tool_tasks: TaskStore | None = None
    """Tool calls made as tasks, until their result reached their person (polled again after a restart)."""

    async def audit_sign_in(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None:
        """Record a sign-in, a refresh failure or a logout (`bot.servers.oauth.SignInAudit`); never raises."""
        await self.audit.record(AuditEvent(event), user_id=user_id, server=server, detail=detail)


@asynccontextmanager
async def open_store(
    storage: StorageConfig,
    content: AuditContent = AuditContent.FULL,
    *,
    fleet: Fleet = ALONE,
    bot_id: int = 0,
) -> AsyncIterator[Store]:
    """Open the database (creating a SQLite file on first run), upgrade its schema, close it on exit. `fleet` is
    the process's (`bot.store.postgres_fleet.fleet_of`): the approvals publish decisions on its bus, the kept
    questions' writes are fenced by it, the outbox sends for the people it owns. `bot_id` is the bot whose
    outbox it is (its token's number).

    Raises:
        AuditUnsealed: with a key, the audit chain has rows but no seal (`bot.store.audit_seal`).
        StoreUnavailable: the database cannot be reached or migrated.
    """
    url = storage.url.get()
    file = is_file_database(url)
    try:
        engine = await open_engine(url)
    except (SQLAlchemyError, OSError) as exc:
        raise StoreUnavailable(f"database {display_url(url)}: {failure_reason(exc)}", file=file) from exc
    log: AuditLog | None = None  # set once the chain may be written: only then is a checkpoint signed at stop
    writer = StoreWriter(engine)
    outbox = OutboxStore(engine, writer, bot_id=bot_id, fleet=fleet)
    try:
        opened = AuditLog(
            engine, None if storage.secret_key is None else AuditKeys(storage.secret_key.get()), writer
        )
        try:
            note = await _seal(opened, storage)
            await opened.read_head()
        except SQLAlchemyError as exc:
            raise StoreUnavailable(f"database {display_url(url)}: {failure_reason(exc)}", file=file) from exc
        log = opened
        key = storage.secret_key
        signins = None if key is None else SignInStore(engine, key.get())
        agents = AgentStore(engine, log=log)
        yield Store(
            engine,
            log,
            AuditObserver(log, content),
            ApprovalStore(engine, log, content, bus=fleet.bus),
            RoundStore(engine, writer, fence=fleet.fence),
            agents,
            InboxStore(engine),
            GrantStore(engine, agents, log),
            GatewayTaskStore(engine, agents),
            signins,
            note,
            factors=None if key is None else FactorStore(engine, key.get(), log=log),
            outbox=outbox,
            tool_tasks=TaskStore(engine),
        )
    finally:
        with anyio.CancelScope(shield=True):
            await outbox.settle()  # what was sent is marked so: a restart does not send it again
            try:
                if log is not None:
                    await log.checkpoint()  # the chain's length and head at stop, signed
            except SQLAlchemyError:
                logger.warning("could not record the audit checkpoint at stop", exc_info=True)
            writer.close()
            await engine.dispose()


def check_storage(storage: StorageConfig | None) -> None:
    """What `check` can tell of the database without changing it: a SQLite file `open_store` could not make or
    write fails here with the line `run` would print.

    Raises:
        StoreUnavailable: the SQLite file's folder (or the file) is not writable by this process.
    """
    if storage is None:
        return
    url = storage.url.get()
    try:
        writable_file_database(url)
    except PermissionError as exc:
        raise StoreUnavailable(f"database {display_url(url)}: {failure_reason(exc)}", file=True) from exc


def audit_note(storage: StorageConfig | None) -> str | None:
    """What the audit chain is worth, when that needs saying: without a key it shows accidents only (`check`
    says so, and the running bot's log)."""
    if storage is None or storage.secret_key is not None:
        return None
    return "audit log: no key ([storage] secret_key): its hash chain shows accidents, not tampering"


async def _seal(log: AuditLog, storage: StorageConfig) -> str | None:
    """Seal an empty chain once a key is there (never one with rows: `AuditUnsealed`); what the chain is
    worth, when that needs saying."""
    if log.keys is None:
        return audit_note(storage)
    sealed = await sealed_with(log.engine)
    if sealed is None:
        await seal_new(log)
    elif sealed != log.keys.public_key:
        logger.error(
            "audit log: the chain is sealed with another key (%s); `audit --verify` fails until that key is back",
            sealed,
        )
    return None


@asynccontextmanager
async def open_configured_store(
    config: Config, *, claim: bool = False, fleet: Fleet = ALONE
) -> AsyncIterator[Store | None]:
    """The configured database (`open_store`, in `fleet`), or None when the config has none.

    With `claim` (the Telegram bot), this process first takes its place on the database for as long as the
    store is open (`bot.store.instances`), before it reads or writes anything there.

    Raises:
        SecondInstance: with `claim`, another live bot holds that place.
        StoreUnavailable: the database cannot be reached or migrated.
    """
    if config.storage is None:
        yield None
        return
    async with AsyncExitStack() as stack:
        if claim:
            polling = config.telegram.mode is TelegramMode.POLLING
            bot_id = str(config.bot_id())
            await stack.enter_async_context(
                claim_instance(config.storage.url.get(), polling_bot=bot_id if polling else None)
            )
        yield await stack.enter_async_context(
            open_store(
                config.storage, config.audit.content, fleet=fleet, bot_id=config.bot_id() if claim else 0
            )
        )

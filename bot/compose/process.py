"""The one place the bot's process is put together: its parts built once, in order, each whole at construction.
Does I/O.

`open_process` builds, in this order: the process's fleet (`bot.core.fleet.Fleet`: alone, or an instance of a
fleet on PostgreSQL; unstarted), the store in it (claiming this process's place on the database), the fleet's
shares (Mini App answers, sign-in returns, `/tools` lists, Telegram's budget), the host's front (`Front`: for
Telegram the flood control on the shared budget, PTB and the cards), the prompt registry on the front's
surface, sign-ins, the approval service, the hub and the memory of agents' remembered decisions; it hands them over as one frozen `Process` and closes them
in reverse order when left. A single process takes the same paths as a fleet's instance: only `fleet_of` and
`shares_of` choose. The hosts' own parts are built on top of it in `bot.compose.telegram` (the runner, the
approval cards, the fleet's part in the host, the web endpoint); the Telegram host (`bot.telegram.app`) only
runs PTB's lifecycle over the finished parts. Whoever changes how the fleet or approvals are put together edits
this package, not a host.

The console puts its few parts together in `bot.compose.console` (no claim, no approvals, no fleet).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import anyio

from bot.approvals import ApprovalService
from bot.config import Config, ServerConfig
from bot.core import PromptRegistry, Surface
from bot.core.fleet import Fleet
from bot.core.remembered import KeptInMemory, Memory
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns, sign_ins
from bot.store import Store, open_configured_store
from bot.store.fleet_state import Shares, shares_of
from bot.store.postgres_fleet import fleet_of
from bot.store.remembered import StoredMemory

logger = logging.getLogger(__name__)

__all__ = ["Front", "Process", "approval_service", "memory_of", "open_process"]


class Front(Protocol):
    """The host's face towards its people, built once the store is open: what prompts are shown on."""

    @property
    def surface(self) -> Surface: ...


F = TypeVar("F", bound=Front)


@dataclass(frozen=True, slots=True)
class Process(Generic[F]):
    """The parts of the bot's process, each built once and whole (`open_process`); the hosts build theirs on
    these and never assign to them."""

    config: Config
    fleet: Fleet
    """This process's part in the bot's processes: alone (`ALONE`), or an instance of a fleet on PostgreSQL
    (webhook mode). Whom it owns, its bus (every part that hears the others subscribes to it), its fence."""
    store: Store | None
    """The database (`[storage]`), or None without one."""
    shares: Shares
    """What the processes share besides the questions: Mini App answers, sign-in returns, `/tools` lists and
    Telegram's budget (alone, in memory; in a fleet, in rows woken by the bus)."""
    front: F
    prompts: PromptRegistry
    signins: SignIns | None
    """OAuth sign-ins (they need the database)."""
    approver: ApprovalService | None
    """The approval requests of `[[approvals]]` (they need the database)."""
    hub: Hub
    memory: Memory
    """Remembered answers to agents' permission prompts: in the database (fleet-wide, under `[[approvals]]`),
    or in this process without one."""


@asynccontextmanager
async def open_process(
    config: Config,
    front: Callable[[Store | None, Shares], F],
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> AsyncIterator[Process[F]]:
    """The bot's parts, in order (see the module); `front` builds the host's face on the open store and the
    fleet's shares.

    `transport` replaces how servers are reached (tests pass in-process servers), `approval_sleep` how approvals
    wait for their reminders and escalations.

    Raises:
        SecondInstance: another live bot holds this database.
        StoreUnavailable: the database cannot be reached or migrated.
    """
    async with AsyncExitStack() as stack:
        fleet = fleet_of(config)  # unstarted: the store, the registry and the approvals receive it
        store = await stack.enter_async_context(open_configured_store(config, claim=True, fleet=fleet))
        shares = shares_of(config, store, fleet)  # alone in memory; in a fleet in rows, woken by its bus
        face = front(store, shares)
        observer = None if store is None else store.observer  # the audit log: told of every event first
        # Nothing ends for a person before this process knows they are still its own (the fleet's ownership).
        prompts = PromptRegistry(face.surface, config.elicitation.timeout_s, observer, fence=fleet)
        book = None if store is None else store.rounds  # open questions outlive the process
        signins = (
            None
            if store is None
            else sign_ins(
                config, store.signins, prompts, store.audit_sign_in, book=store.rounds, relay=shares.signins
            )
        )
        service, no_approver = approval_service(config, store, fleet, approval_sleep)
        hub = await stack.enter_async_context(
            Hub(
                config,
                prompts,
                transport=transport,
                observer=observer,
                book=book,
                # Kept tasks are polled again by the next process alone, in a fleet by the person's next owner.
                tasks=None if store is None else store.tool_tasks,
                auth=None if signins is None else signins.auth_for,
                signed_in=None if signins is None else signins.signed_in,
                approver=service,
                no_approver_reason=no_approver,
                names=None if service is None else service.name_of,
                sign_receipts=None if store is None or store.audit.keys is None else store.audit.keys.sign,
            )
        )
        yield Process(
            config, fleet, store, shares, face, prompts, signins, service, hub, memory_of(config, store)
        )


def memory_of(config: Config, store: Store | None) -> Memory:
    """Where answers to agents' permission prompts are remembered: the database, judged by `[[approvals]]` at
    every recall; without one (no gateway, so no agent asks), this process."""
    if store is None:
        return KeptInMemory()
    return StoredMemory(store.engine, store.audit, config.approvals, config.audit.content)


def approval_service(
    config: Config,
    store: Store | None,
    fleet: Fleet,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> tuple[ApprovalService | None, str]:
    """The hub's approver for `[[approvals]]` (it needs the database: a request must outlive the process), or
    None and why gated calls are refused."""
    if not config.approvals:
        return None, "this host cannot ask approvers"
    if store is None:
        return None, "approvals need the database ([storage])"
    # Where nobody waits, the requester's owner carries a decision out; decisions wake the process whose call
    # waits, wherever they are taken (the store publishes them on the fleet's bus; alone, nobody else).
    service = ApprovalService(store.approvals, owns=fleet.owns, sleep=sleep)
    service.listen(fleet.bus)
    return service, ""

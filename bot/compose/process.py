"""The one place the bot's process is put together: its parts built once, in order, each whole at construction.
Does I/O.

`open_process` opens, in this order: the store (claiming this process's place on the database), the host's
front (`Front`: for Telegram the flood control, which in a fleet shares the database's budget, PTB and the
cards), the prompt registry on the front's surface, sign-ins, the fleet's bus and rows, the approval service
and the hub; it hands them over as one frozen `Process` and closes them in reverse order when left. The hosts'
own parts are built on top of it in `bot.compose.telegram` (the runner, the approval cards, the fleet's
partitions, the web endpoint); the Telegram host (`bot.telegram.app`) only runs PTB's lifecycle over the
finished parts. Whoever changes how the fleet or approvals are put together edits this package, not a host.

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
from bot.config import Config, ServerConfig, TelegramMode
from bot.core import PromptRegistry, Surface
from bot.servers.hub import Hub
from bot.servers.oauth import SignIns, sign_ins
from bot.store import Store, open_configured_store
from bot.store.bus import FleetBus
from bot.store.engine import database_url
from bot.store.fleet import Partitions, partition_of
from bot.store.fleet_state import FleetState
from bot.telegram.approvals import TelegramApprovals
from bot.telegram.fleet import Takeovers
from bot.telegram.parts import FleetMember
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner

logger = logging.getLogger(__name__)

__all__ = ["Front", "Process", "fleet_member", "open_process"]


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
    store: Store | None
    """The database (`[storage]`), or None without one."""
    front: F
    prompts: PromptRegistry
    signins: SignIns | None
    """OAuth sign-ins (they need the database)."""
    bus: FleetBus | None
    """In a fleet (PostgreSQL, webhook mode): the wake-ups between instances; every fleet part subscribes to it."""
    fleet_state: FleetState | None
    """In a fleet: Mini App answers, sign-in returns and `/tools` lists shared in rows."""
    approver: ApprovalService | None
    """The approval requests of `[[approvals]]` (they need the database)."""
    hub: Hub


@asynccontextmanager
async def open_process(
    config: Config,
    front: Callable[[Store | None], F],
    *,
    transport: Callable[[ServerConfig], Any] | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> AsyncIterator[Process[F]]:
    """The bot's parts, in order (see the module); `front` builds the host's face on the open store.

    `transport` replaces how servers are reached (tests pass in-process servers), `approval_sleep` how approvals
    wait for their reminders and escalations.

    Raises:
        SecondInstance: another live bot holds this database.
        StoreUnavailable: the database cannot be reached or migrated.
    """
    async with AsyncExitStack() as stack:
        store = await stack.enter_async_context(open_configured_store(config, claim=True))
        face = front(store)
        observer = None if store is None else store.observer  # the audit log: told of every event first
        prompts = PromptRegistry(face.surface, config.elicitation.timeout_s, observer)
        book = None if store is None else store.rounds  # open questions outlive the process
        signins = (
            None
            if store is None
            else sign_ins(config, store.signins, prompts, store.audit_sign_in, book=store.rounds)
        )
        bus = fleet_bus(config, store)  # one per process: every part of the fleet subscribes to it
        fleet_state = None if store is None or bus is None else FleetState.of(config, store, bus)
        service, no_approver = approval_service(config, store, bus, approval_sleep)
        hub = await stack.enter_async_context(
            Hub(
                config,
                prompts,
                transport=transport,
                observer=observer,
                book=book,
                auth=None if signins is None else signins.auth_for,
                signed_in=None if signins is None else signins.signed_in,
                approver=service,
                no_approver_reason=no_approver,
                names=None if service is None else service.name_of,
                sign_receipts=None if store is None or store.audit.keys is None else store.audit.keys.sign,
            )
        )
        yield Process(config, store, face, prompts, signins, bus, fleet_state, service, hub)


def approval_service(
    config: Config,
    store: Store | None,
    bus: FleetBus | None = None,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
) -> tuple[ApprovalService | None, str]:
    """The hub's approver for `[[approvals]]` (it needs the database: a request must outlive the process), or
    None and why gated calls are refused."""
    if not config.approvals:
        return None, "this host cannot ask approvers"
    if store is None:
        return None, "approvals need the database ([storage])"
    service = ApprovalService(store.approvals, sleep=sleep)
    if bus is not None:  # a fleet: decisions wake the process whose call waits, wherever they are taken
        store.approvals.bus = bus
        service.listen(bus)
    return service, ""


# -- the fleet ---------------------------------------------------------------------------------------------
# Every part of an instance's place in a fleet is built here: its bus (`fleet_bus`, before the hub: approvals
# listen to it) and its partitions with their takeovers (`fleet_member`, once the runner and the cards exist).


def fleet_bus(config: Config, store: Store | None) -> FleetBus | None:
    """The process's fleet bus when it may be one of several: PostgreSQL and webhook mode. Otherwise (SQLite,
    polling: a second instance is refused) there is nobody to wake."""
    if store is None or config.storage is None or config.telegram.mode is not TelegramMode.WEBHOOK:
        return None
    url = config.storage.url.get()
    if not database_url(url).drivername.startswith("postgresql"):
        return None
    return FleetBus(url, config.bot_id())


def fleet_member(
    config: Config,
    store: Store | None,
    bus: FleetBus | None,
    prompts: PromptRegistry,
    runner: ToolRunner,
    surface: TelegramSurface,
    hub: Hub,
    approvals: TelegramApprovals | None,
) -> FleetMember | None:
    """This instance's part in a fleet, when it may be one of several: PostgreSQL and webhook mode. Otherwise
    (SQLite, polling) it is the only instance and owns every user."""
    if store is None or bus is None or config.storage is None:
        return None

    def busy(partition: int) -> bool:
        """Something live in the partition: an open question or a running call (never given back)."""
        return any(partition_of(p.origin.user_id) == partition for p in prompts.pending()) or any(
            partition_of(user) == partition for user in runner.users_running()
        )

    partitions = Partitions(config.storage.url.get(), config.bot_id(), busy=busy)
    if approvals is not None:
        approvals.service.owns = partitions.owns  # where nobody waits, the requester's owner carries it out
    store.rounds.fence = partitions  # kept-question writes carry this instance's epochs
    prompts.fence = partitions  # nothing ends for a person before this instance knows they are still its own

    def lost(partitions_lost: frozenset[int]) -> None:
        """Drop, here, everything held for the people of partitions taken over or given back (given back ones
        hold nothing: `busy`); their questions stay kept for the new owner."""

        def theirs(user_id: int) -> bool:
            return partition_of(user_id) in partitions_lost

        runs, cards = runner.leave(theirs), surface.drop(theirs)
        if runs or cards:
            logger.warning(
                "partitions: %d lost; dropped %d call(s) and %d card(s) of their people here",
                len(partitions_lost),
                runs,
                cards,
            )

    partitions.on_lost(lost)
    takeovers = Takeovers(
        partitions,
        store.rounds,
        surface,
        runner,
        prompts,
        store.observer,
        set(hub.server_names()),
        _approval_adopter(approvals),
    )
    return FleetMember(partitions, bus, takeovers)


def _approval_adopter(
    approvals: TelegramApprovals | None,
) -> Callable[[Callable[[int], bool]], Awaitable[None]] | None:
    """What adopts the approval waits of users taken over (`ApprovalService.adopt`): their deadline timers, and
    the decided requests whose waiting call died with the previous owner, carried out once."""
    return None if approvals is None else approvals.service.adopt

"""One way to carry a thing to the process that holds its waiter, and its outcome back: the `Relay`, and its
in-memory form for a process alone. No I/O.

Mini App answers go to the process whose registry holds the prompt, a sign-in's browser return to the process
whose SDK flow waits on its state. Both go the same way: the sender writes the item and announces it; the holder,
serving the announcements, looks at it, claims it (a compare-and-set: one process, once) and settles it with its
outcome; the sender waits for that, bounded, and may take back an item nobody claimed in time, so that a late
claim finds nothing. Alone, `LocalRelay` does this in memory; in a fleet `bot.store.fleet_state` does it in rows,
announced on the fleet's bus (`bot.core.fleet.Bus`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import anyio
from anyio.abc import TaskStatus

from bot.core.rounds import KeptQuestion
from bot.core.signins import SignInRelay
from bot.core.values import Origin

__all__ = [
    "Announcements",
    "Launches",
    "LocalLaunches",
    "LocalRelay",
    "LocalSignIns",
    "LocalToolLists",
    "MiniAppAnswer",
    "MiniAppShare",
    "Relay",
    "SignInOutcome",
    "SignInShare",
    "ToolListShare",
    "state_key",
]

T = TypeVar("T")
O = TypeVar("O")  # noqa: E741  (the outcome's type)


class Relay(Protocol[T, O]):
    """Carries an item (a Mini App answer, a sign-in's browser return) to the process that holds its waiter, and
    that process's outcome back to the sender, whichever process each is in.

    The sender `send`s it (written, then announced); the holder, serving the announcements (`serve`), looks at
    it (`peek`), `claim`s it (a compare-and-set: one process, once) and `settle`s it with the outcome; the
    sender waits for that, bounded (`outcome`). An item nobody claimed in time is taken back by `outcome` when
    asked to (`take_back`), so a late claim cannot act on something its sender was told failed."""

    async def send(self, key: str, item: T) -> bool:
        """Write `item` under `key` and announce it; False when `key` takes nothing (not expected, sent already,
        expired)."""
        ...

    async def peek(self, key: str) -> T | None:
        """The item while nobody has claimed it (the holder looks before it claims)."""
        ...

    async def claim(self, key: str) -> T | None:
        """The item, for the one caller that moves it from sent to claimed; None for everyone else."""
        ...

    async def settle(self, key: str, outcome: O) -> None:
        """The claimed item's outcome, for its sender."""
        ...

    async def outcome(self, key: str, wait_s: float, *, take_back: bool = False) -> O | None:
        """The outcome once settled; None after `wait_s` (with `take_back`, an item still unclaimed then is
        withdrawn: nobody will claim it)."""
        ...

    async def serve(
        self, handle: Callable[[str], Coroutine[Any, Any, None]], *, task_status: TaskStatus[None] = ...
    ) -> None:
        """Until cancelled: `handle(key)` for each item announced (after a wake-up may have been missed, for each
        item still unclaimed), each in a task of its own."""
        ...


class Announcements:
    """Keys announced in memory, taken by one server in batches: what an in-memory relay's `serve` waits on."""

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._changed = anyio.Event()

    def add(self, key: str) -> None:
        self._keys.append(key)
        self._changed.set()

    async def taken(self) -> list[str]:
        """Every key announced since the last call, once there is one."""
        while not self._keys:
            self._changed = anyio.Event()
            await self._changed.wait()
        keys, self._keys = self._keys, []
        return keys


@dataclass(slots=True)
class _Slot(Generic[T, O]):
    item: T | None
    """None while only expected (a sign-in waiting for its browser)."""
    expires: float
    claimed: bool = False
    outcome: O | None = None
    settled: anyio.Event = field(default_factory=anyio.Event)


class LocalRelay(Generic[T, O]):
    """A `Relay` in memory, for a process alone: what is sent here is claimed here.

    With `expected_only` a send finds its key only after `expect` (until then, or after `forget`, it takes
    nothing). `clock` is Unix time; an item is forgotten `keep_s` after it was sent (or once its expected time
    is over), at a later send."""

    def __init__(
        self, *, expected_only: bool = False, keep_s: float = 3600.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._slots: dict[str, _Slot[T, O]] = {}
        self._expected_only = expected_only
        self._keep_s = keep_s
        self._clock = clock
        self._announced = Announcements()

    def expect(self, key: str, expires: float) -> None:
        """A send to `key` is taken until `expires` (Unix time)."""
        self._slots[key] = _Slot(None, expires)

    def forget(self, key: str) -> None:
        """Nobody waits for `key` any more: a send, or a claim of what was sent, finds nothing from now on."""
        slot = self._slots.get(key)
        if slot is not None and not slot.claimed:
            del self._slots[key]

    async def send(self, key: str, item: T) -> bool:
        now = self._clock()
        self._slots = {k: s for k, s in self._slots.items() if s.expires >= now or k == key}
        slot = self._slots.get(key)
        if slot is None and not self._expected_only:
            slot = self._slots[key] = _Slot(None, now + self._keep_s)
        if slot is None or slot.item is not None or slot.expires < now:
            return False
        slot.item = item
        slot.expires = max(slot.expires, now + self._keep_s)
        self._announced.add(key)
        return True

    async def peek(self, key: str) -> T | None:
        slot = self._slots.get(key)
        return None if slot is None or slot.claimed else slot.item

    async def claim(self, key: str) -> T | None:
        slot = self._slots.get(key)
        if slot is None or slot.claimed or slot.item is None:
            return None
        slot.claimed = True
        return slot.item

    async def settle(self, key: str, outcome: O) -> None:
        slot = self._slots.get(key)
        if slot is not None and slot.claimed and not slot.settled.is_set():
            slot.outcome = outcome
            slot.settled.set()

    async def outcome(self, key: str, wait_s: float, *, take_back: bool = False) -> O | None:
        slot = self._slots.get(key)
        if slot is None or slot.item is None:
            return None
        with anyio.move_on_after(wait_s):
            await slot.settled.wait()
        if slot.settled.is_set():
            return slot.outcome
        if take_back and not slot.claimed:
            slot.claimed = True  # taken back: a late claim finds nothing
            return None
        if take_back:  # claimed just in time: the holder settles it at once
            with anyio.move_on_after(wait_s):
                await slot.settled.wait()
        return slot.outcome if slot.settled.is_set() else None

    async def serve(
        self,
        handle: Callable[[str], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                for key in await self._announced.taken():
                    tg.start_soon(handle, key)


# -- Its two uses -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MiniAppAnswer:
    """A page's answer on its way to the prompt with `token`, from `user_id`."""

    token: str
    user_id: int
    ok: bool
    content: dict[str, Any] | None
    reason: str | None


class Launches(Protocol):
    """Mini App launches, each answering one form (fleet-wide in a fleet)."""

    async def use(self, launch: str, expires: float) -> bool:
        """Mark the launch used until `expires` (Unix time); False when it was used before."""
        ...

    async def release(self, launch: str) -> None:
        """The launch's answer was not taken (the form had ended): the launch did nothing."""
        ...


class LocalLaunches:
    """`Launches` in memory (a process alone); `clock` is Unix time."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._used: dict[str, float] = {}
        self._clock = clock

    async def use(self, launch: str, expires: float) -> bool:
        now = self._clock()
        self._used = {k: until for k, until in self._used.items() if until >= now}
        if launch in self._used:
            return False
        self._used[launch] = expires
        return True

    async def release(self, launch: str) -> None:
        self._used.pop(launch, None)


async def _nothing_kept(token: str) -> KeptQuestion | None:
    """Alone, a prompt not in this process's registry is held nowhere."""
    return None


@dataclass(frozen=True, slots=True)
class MiniAppShare:
    """What the Mini App shares with the bot's other processes: its launches, the answers relayed to the prompt's
    holder, and the kept questions a page held elsewhere is found among (by token)."""

    relay: Relay[MiniAppAnswer, bool]
    """Answers to the holder; the outcome is whether the prompt took it (False: it had ended)."""
    launches: Launches
    kept: Callable[[str], Coroutine[Any, Any, KeptQuestion | None]] = _nothing_kept

    @staticmethod
    def alone() -> MiniAppShare:
        return MiniAppShare(LocalRelay(), LocalLaunches())


def state_key(state: str) -> str:
    """The key of an OAuth `state`: its SHA-256 (the state itself is a bearer value of the flow)."""
    return hashlib.sha256(state.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class SignInOutcome:
    """How a sign-in that came back ended: `ok`, or the reason the browser's page gives."""

    ok: bool
    reason: str


class SignInShare(Relay[dict[str, str], SignInOutcome], SignInRelay, Protocol):
    """Sign-ins waiting for their browser (`opened` / `closed`, by the flow's process: `SignInRelay`), and the
    browser's return relayed, under `state_key(state)`, to that process; the outcome for the page."""


class LocalSignIns(LocalRelay[dict[str, str], SignInOutcome]):
    """`SignInShare` in memory (a process alone): a return is taken only for a sign-in opened here."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(expected_only=True, clock=clock)

    async def opened(self, state: str, user_id: int, server: str, expires: float) -> None:
        self.expect(state_key(state), expires)

    async def closed(self, state: str) -> None:
        self.forget(state_key(state))


# -- What is shared without a relay ---------------------------------------------------------------------------


class ToolListShare(Protocol):
    """`/tools` lists where every process finds them: a tap may reach another process than the one that sent the
    list (a takeover moved the person). Each process keeps its own lists too (`bot.telegram.tool_runs`)."""

    async def keep(self, token: str, server: str, tools: list[str], origin: Origin, keep_s: float) -> None:
        """Keep the list for the others (and forget lists older than `keep_s`)."""
        ...

    async def get(self, token: str, keep_s: float) -> tuple[str, list[str], Origin] | None:
        """A list another process kept: its server, tool names and who asked where; None when unknown or older
        than `keep_s`."""
        ...


class LocalToolLists:
    """`ToolListShare` of a process alone: there is no other process to find a list in."""

    async def keep(self, token: str, server: str, tools: list[str], origin: Origin, keep_s: float) -> None:
        """The process's own lists are all there is."""

    async def get(self, token: str, keep_s: float) -> tuple[str, list[str], Origin] | None:
        return None

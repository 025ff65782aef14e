"""An agent's call carried from the instance its HTTP request reached to the instance that owns its person, and
the result back: the `AgentCalls` shape, and its in-memory form for a process alone. No I/O.

The person's cards, taps, sessions, sign-ins and `[limits]` all live with the person's owner (in a fleet, the
instance holding their partition), so an agent's call runs there too. The instance that received the request
(the receiver) `send`s the call and waits for its `result`; the owner, serving the announcements (`serve`),
`claim`s it (a compare-and-set: one instance, once, and only while its receiver still waits), runs it, and
`settle`s it with the result. When the agent goes away (it cancels, its connection drops, its access ends) the
receiver `leave`s the call: one nobody claimed yet is withdrawn (it never runs), a running one is told why and its
owner ends it (`watch`) as it would end a call of its own agent. When the receiver itself dies, `watch` says so to
the owner (the agent's HTTP request died with it); when the owner dies, `result` says so to the receiver. A call is
never claimed twice, so nothing is run twice.

Alone the process owns everyone and runs every call itself: `LocalAgentCalls` is the shape in memory (the gateway
never hands a call to itself). In a fleet `bot.store.agent_calls.FleetAgentCalls` keeps the calls in rows,
announced on the fleet's bus (`bot.core.fleet.Bus`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import anyio
from anyio.abc import TaskStatus

from bot.core.relay import Announcements
from bot.core.values import Outcome

__all__ = ["LOST_LINE", "AgentCall", "AgentCalls", "Ended", "LocalAgentCalls"]

LOST_LINE: Final = (
    "the bot instance running this call for its person stopped before it answered; the call may or may not "
    "have run: look before you call again"
)
"""What an agent hears when the instance that ran its call died (its result, if any, is lost)."""


@dataclass(frozen=True, slots=True)
class AgentCall:
    """A `tools/call` of an agent, as its receiver hands it over."""

    token_id: int
    user_id: int
    agent: str
    """The token's name."""
    name: str
    """The tool's name as the agent called it (`<server>__<tool>`, `ask_person`, `notify_person`)."""
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Ended:
    """How a handed-over call ended for its receiver: the tool's `result` (a `CallToolResult` as JSON), or `line`
    when there is none (it was withdrawn, or the instance running it died)."""

    result: dict[str, Any] | None
    line: str = ""


class AgentCalls(Protocol):
    """Agents' calls on their way to their person's owner, and their results back (see the module)."""

    async def send(self, call: AgentCall) -> str:
        """Write the call and announce it; its key."""
        ...

    async def result(self, key: str) -> Ended:
        """Wait for the call's end: its result once settled, or why there is none."""
        ...

    async def leave(self, key: str, why: Outcome) -> bool:
        """The agent went (`why`: AGENT_CANCELLED or AGENT_REVOKED). True when the call was withdrawn before anyone
        claimed it (it never runs); otherwise its owner is told, and ends it."""
        ...

    async def claim(self, key: str) -> AgentCall | None:
        """The call, for the one instance that moves it from sent to claimed while its receiver waits; None for
        everyone else."""
        ...

    async def watch(self, key: str) -> Outcome:
        """For the claimer: wait until nobody waits for the call's result any more (its agent left, or its receiver
        died), and say why."""
        ...

    async def settle(self, key: str, result: dict[str, Any]) -> None:
        """The claimed call's result, for its receiver."""
        ...

    async def serve(
        self,
        handle: Callable[[str, int], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = ...,
    ) -> None:
        """Until cancelled: `handle(key, user_id)` for each call announced and not claimed yet (again after a
        wake-up may have been missed, and for calls whose person was just taken over), each in a task of its own."""
        ...


@dataclass(eq=False, slots=True)
class _Slot:
    call: AgentCall
    claimed: bool = False
    left: Outcome | None = None
    result: dict[str, Any] | None = None
    settled: anyio.Event = field(default_factory=anyio.Event)
    gone: anyio.Event = field(default_factory=anyio.Event)


class LocalAgentCalls:
    """`AgentCalls` in memory, for a process alone: what is sent here is claimed here (and the receiver, this
    process, never dies before its owner)."""

    def __init__(self) -> None:
        self._slots: dict[str, _Slot] = {}
        self._announced = Announcements()

    async def send(self, call: AgentCall) -> str:
        key = str(uuid.uuid4())
        self._slots[key] = _Slot(call)
        self._announced.add(key)
        return key

    async def result(self, key: str) -> Ended:
        slot = self._slots[key]
        await slot.settled.wait()
        self._slots.pop(key, None)
        return Ended(slot.result, "" if slot.result is not None else "the call was withdrawn")

    async def leave(self, key: str, why: Outcome) -> bool:
        slot = self._slots.get(key)
        if slot is None:
            return False
        if not slot.claimed:
            slot.claimed = True  # withdrawn: a late claim finds nothing
            slot.settled.set()
            return True
        slot.left = why
        slot.gone.set()
        return False

    async def claim(self, key: str) -> AgentCall | None:
        slot = self._slots.get(key)
        if slot is None or slot.claimed:
            return None
        slot.claimed = True
        return slot.call

    async def watch(self, key: str) -> Outcome:
        slot = self._slots[key]
        await slot.gone.wait()
        return slot.left or Outcome.AGENT_CANCELLED

    async def settle(self, key: str, result: dict[str, Any]) -> None:
        slot = self._slots.get(key)
        if slot is not None and not slot.settled.is_set():
            slot.result = result
            slot.settled.set()

    async def serve(
        self,
        handle: Callable[[str, int], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                for key in await self._announced.taken():
                    slot = self._slots.get(key)
                    if slot is not None:
                        tg.start_soon(handle, key, slot.call.user_id)

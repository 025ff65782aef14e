"""What the instances of a fleet share besides the questions, in rows, with the bus to wake each other. Does I/O.

A load balancer sends any HTTP request to any instance, and after a takeover a person's taps reach another
instance than the one that showed them a list. Three things that one process kept in memory live here instead:

- Mini App launches (`miniapp_launches`): a launch answers a form once, fleet-wide. The row's insert is the
  compare-and-set (`ON CONFLICT DO NOTHING`: of two instances racing, exactly one inserts).
- Mini App answers on their way to the prompt (`miniapp_answers`): the instance that took the page's request
  writes the answer and publishes `miniapp` with its id; the instance whose registry holds the prompt claims it
  (`sent` -> `claimed`, a compare-and-set), answers the prompt, writes whether it was taken and publishes
  `miniapp_done`. The sender waits for that, bounded; when nobody claimed it by then it takes the answer back
  (`sent` -> `expired`, the same compare-and-set), so a late claim cannot answer a form the page was told failed.
- OAuth sign-ins waiting for their browser (`oauth_pending`, by the SHA-256 of `state`): the callback, wherever
  it lands, moves the row `waiting` -> `returned` with the browser's parameters sealed with `[storage]
  secret_key` (the code never travels in a notification), and publishes `signin`; the process whose SDK flow
  waits on that state (it alone holds the PKCE verifier) takes it (`returned` -> `taken`), exchanges the code
  and writes the outcome (`done` / `failed`), publishing `signin_done` for the callback's page.
- `/tools` lists (`tool_lists`): one row per list, its buttons name a tool by its place in it.

A notification only says "look again" (`bot.store.bus`): waiters read the row when woken, and once a second
anyway, so one lost while the listener reconnects costs a second, not the answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import anyio
from anyio.abc import TaskStatus
from sqlalchemy import delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.config import Config
from bot.core import Origin
from bot.store.bus import FleetBus
from bot.store.crypto import Sealer, Unreadable
from bot.store.errors import StoreUnavailable, unavailable_as
from bot.store.rounds import RoundStore
from bot.store.store import Store
from bot.store.tables import miniapp_answers, miniapp_launches, oauth_pending, tool_lists

__all__ = [
    "ANSWER_TOPIC",
    "SIGNIN_TOPIC",
    "Announcements",
    "FleetState",
    "MiniAppAnswer",
    "MiniAppRelay",
    "PendingSignIns",
    "ToolLists",
    "state_key",
]

logger = logging.getLogger(__name__)

ANSWER_TOPIC: Final = "miniapp"
ANSWER_DONE_TOPIC: Final = "miniapp_done"
SIGNIN_TOPIC: Final = "signin"
SIGNIN_DONE_TOPIC: Final = "signin_done"
RECHECK_S: Final = 1.0
"""A waiter reads its row at least this often, whatever the bus says (a notification lost in a reconnect)."""
KEEP_S: Final = 3600.0
"""Finished Mini App answers and sign-ins are deleted once this old (nobody waits on them any more)."""

T = TypeVar("T")


def state_key(state: str) -> str:
    """The row key of an OAuth `state`: its SHA-256 (the state itself is a bearer value of the flow)."""
    return hashlib.sha256(state.encode()).hexdigest()


class Announcements:
    """What a bus topic announced (ids), and `None` for "the bus (re)connected: look at everything", in order,
    for one consumer task (`take`). `announce` and `sweep` are the topic's `on_message` and `on_connect`."""

    def __init__(self, bus: FleetBus, topic: str) -> None:
        self._items: list[str | None] = []
        self._changed = anyio.Event()
        bus.subscribe(topic, self.announce, self.sweep)

    def announce(self, item: str) -> None:
        self._items.append(item)
        self._changed.set()

    def sweep(self) -> None:
        self._items.append(None)
        self._changed.set()

    async def take(self) -> list[str | None]:
        """What was announced since the last call, waiting for something when nothing was."""
        while not self._items:
            self._changed = anyio.Event()
            await self._changed.wait()
        items, self._items = self._items, []
        return items

    async def serve(
        self,
        handle: Callable[[str], Coroutine[Any, Any, None]],
        unhandled: Callable[[], Awaitable[list[str]]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: `handle` each id announced, in a task of its own; after a (re)connect, each id
        `unhandled()` lists (what may have been announced while the bus was away)."""
        async with anyio.create_task_group() as tg:
            task_status.started()
            while True:
                for item in await self.take():
                    try:
                        ids = [item] if item is not None else await unhandled()
                    except StoreUnavailable as exc:
                        logger.warning(
                            "could not look for what was announced while the bus was away: %s", exc
                        )
                        continue
                    for one in ids:
                        tg.start_soon(handle, one)


class _Wakeups:
    """Waiters on row ids, woken by a bus topic (and all of them after a reconnect: they may have missed one)."""

    def __init__(self, bus: FleetBus, topic: str) -> None:
        self._events: dict[str, anyio.Event] = {}
        bus.subscribe(topic, self._wake, self._wake_all)

    def _wake(self, key: str) -> None:
        event = self._events.pop(key, None)
        if event is not None:
            event.set()

    def _wake_all(self) -> None:
        for key in list(self._events):
            self._wake(key)

    async def until(self, key: str, read: Callable[[], Awaitable[T | None]], wait_s: float) -> T | None:
        """`read()` once it is not None (read again when woken, and every `RECHECK_S`); None after `wait_s`."""
        with anyio.move_on_after(wait_s):
            while True:
                event = self._events.setdefault(key, anyio.Event())
                found = await read()
                if found is not None:
                    self._events.pop(key, None)
                    return found
                with anyio.move_on_after(RECHECK_S):
                    await event.wait()
        self._events.pop(key, None)
        return None


@dataclass(frozen=True, slots=True)
class FleetState:
    """What the instances of a fleet share through the database, and the bus that wakes them."""

    bus: FleetBus
    miniapp: MiniAppRelay
    tool_lists: ToolLists
    rounds: RoundStore
    """The kept questions: a Mini App page's prompt held by another instance is found by its token here."""
    signins: PendingSignIns | None
    """With `[storage] secret_key` (which OAuth needs): sign-ins waiting for their browser."""

    @staticmethod
    def of(config: Config, store: Store, bus: FleetBus) -> FleetState:
        """The fleet's shared state, woken by the process's `bus` (the bot builds one only when it may run beside
        others: webhook mode on PostgreSQL; a single instance keeps all of it in memory, as before)."""
        key = config.storage.secret_key if config.storage is not None else None
        return FleetState(
            bus,
            MiniAppRelay(store.engine, bus),
            ToolLists(store.engine),
            store.rounds,
            None if key is None else PendingSignIns(store.engine, bus, key.get()),
        )


def _insert(engine: AsyncEngine) -> Any:
    return postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert


# -- Mini App -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MiniAppAnswer:
    """An answer from a page, in its row: for the prompt with `token`, from `user_id`."""

    id: str
    token: str
    user_id: int
    ok: bool
    content: dict[str, Any] | None
    reason: str | None


class MiniAppRelay:
    """Launches used once fleet-wide, and page answers carried to the instance that holds their prompt."""

    def __init__(self, engine: AsyncEngine, bus: FleetBus, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.bus = bus
        self.clock = clock
        self._done = _Wakeups(bus, ANSWER_DONE_TOPIC)

    @unavailable_as("recording a Mini App launch")
    async def use_launch(self, launch: str, expires: float) -> bool:
        """Mark the launch used; True for the first instance to do so, False when it was used before."""
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(delete(miniapp_launches).where(miniapp_launches.c.expires < now))
            row = {"launch": launch, "used": now, "expires": expires}
            result = await conn.execute(
                _insert(self.engine)(miniapp_launches).values(row).on_conflict_do_nothing()
            )
        return bool(result.rowcount)

    @unavailable_as("releasing a Mini App launch")
    async def release_launch(self, launch: str) -> None:
        """The launch's answer was not taken (the form had ended): the launch did nothing, as before it was used."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(miniapp_launches).where(miniapp_launches.c.launch == launch))

    @unavailable_as("sending a Mini App answer")
    async def send(
        self, token: str, user_id: int, ok: bool, content: dict[str, Any] | None, reason: str | None
    ) -> str:
        """Write the answer for the prompt `token` and wake every instance (`miniapp`); its id."""
        answer_id = str(uuid.uuid4())
        now = self.clock()
        answer = json.dumps({"ok": ok, "content": content, "reason": reason})
        async with self.engine.begin() as conn:
            await conn.execute(delete(miniapp_answers).where(miniapp_answers.c.created < now - KEEP_S))
            await conn.execute(
                insert(miniapp_answers).values(
                    id=answer_id, token=token, user_id=user_id, answer=answer, state="sent", created=now
                )
            )
            await self.bus.publish(conn, ANSWER_TOPIC, answer_id)
        return answer_id

    @unavailable_as("reading a Mini App answer")
    async def unclaimed(self, answer_id: str) -> MiniAppAnswer | None:
        """The answer while nobody has claimed it (the holder reads it before it claims)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(miniapp_answers).where(
                        miniapp_answers.c.id == answer_id, miniapp_answers.c.state == "sent"
                    )
                )
            ).first()
        if row is None:
            return None
        answer = json.loads(row.answer)
        return MiniAppAnswer(
            row.id, row.token, row.user_id, answer["ok"], answer["content"], answer["reason"]
        )

    @unavailable_as("listing Mini App answers")
    async def waiting(self) -> list[str]:
        """Ids of answers nobody has claimed yet (swept after the listener (re)connects)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(miniapp_answers.c.id).where(miniapp_answers.c.state == "sent"))
        return [row.id for row in rows]

    @unavailable_as("claiming a Mini App answer")
    async def claim(self, answer_id: str) -> bool:
        """`sent` -> `claimed`: True for the one instance that may answer the prompt with it."""
        return await self._move(answer_id, "sent", "claimed", publish=False)

    @unavailable_as("settling a Mini App answer")
    async def settled(self, answer_id: str, taken: bool) -> None:
        """`claimed` -> `taken` (the prompt took it) or `gone` (it had ended); the sender hears `miniapp_done`."""
        await self._move(answer_id, "claimed", "taken" if taken else "gone", publish=True)

    async def outcome(self, answer_id: str, wait_s: float) -> bool | None:
        """Whether the prompt took the answer: True, False (it had ended), or None when no instance claimed it
        within `wait_s` (then it never will: the answer is taken back)."""

        async def read() -> str | None:
            state = await self._state(answer_id)
            return state if state in ("taken", "gone") else None

        state = await self._done.until(answer_id, read, wait_s)
        if state is None:
            if await self._withdraw(answer_id):
                return None
            # Claimed just in time: the holder answers the prompt at once, so its word is a moment away.
            state = await self._done.until(answer_id, read, wait_s)
        return None if state is None else state == "taken"

    @unavailable_as("withdrawing a Mini App answer")
    async def _withdraw(self, answer_id: str) -> bool:
        return await self._move(answer_id, "sent", "expired", publish=False)

    @unavailable_as("reading a Mini App answer")
    async def _state(self, answer_id: str) -> str | None:
        async with self.engine.connect() as conn:
            state = await conn.scalar(
                select(miniapp_answers.c.state).where(miniapp_answers.c.id == answer_id)
            )
        return None if state is None else str(state)

    async def _move(self, answer_id: str, before: str, after: str, *, publish: bool) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(miniapp_answers)
                .where(miniapp_answers.c.id == answer_id, miniapp_answers.c.state == before)
                .values(state=after)
            )
            if result.rowcount and publish:
                await self.bus.publish(conn, ANSWER_DONE_TOPIC, answer_id)
        return bool(result.rowcount)


# -- OAuth sign-ins -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SignInOutcome:
    """How a sign-in that came back ended: `ok`, or the reason the browser's page gives."""

    ok: bool
    reason: str


class PendingSignIns:
    """Sign-ins waiting for their browser, by the SHA-256 of `state` (`bot.core.SignInRelay` for the OAuth side:
    `opened`, `closed`), and the browser's return carried to the process whose flow waits on it."""

    def __init__(
        self, engine: AsyncEngine, bus: FleetBus, secret_key: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.engine = engine
        self.bus = bus
        self.clock = clock
        self._sealer = Sealer(secret_key)
        self._done = _Wakeups(bus, SIGNIN_DONE_TOPIC)

    @unavailable_as("recording a pending sign-in")
    async def opened(self, state: str, user_id: int, server: str, expires: float) -> None:
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(delete(oauth_pending).where(oauth_pending.c.expires < now - KEEP_S))
            await conn.execute(
                insert(oauth_pending).values(
                    state=state_key(state),
                    user_id=user_id,
                    server=server,
                    created=now,
                    expires=expires,
                    status="waiting",
                )
            )

    @unavailable_as("ending a pending sign-in")
    async def closed(self, state: str) -> None:
        """The flow is over in its process: a late or replayed return finds nothing. A return still being handled
        keeps its row until its page has read the outcome (deleted with the old rows)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(oauth_pending).where(
                    oauth_pending.c.state == state_key(state),
                    oauth_pending.c.status.in_(("waiting", "returned")),
                )
            )

    @unavailable_as("handing over a sign-in's return")
    async def returned(self, params: dict[str, str]) -> str | None:
        """The browser came back with `params`: `waiting` -> `returned` (once), with them sealed, and the holder
        woken (`signin`). The row's key, or None when the sign-in is unknown, already returned, or expired."""
        key = state_key(params.get("state", ""))
        sealed = self._sealer.seal(json.dumps(params), "oauth_pending:" + key)
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(oauth_pending)
                .where(
                    oauth_pending.c.state == key,
                    oauth_pending.c.status == "waiting",
                    oauth_pending.c.expires >= self.clock(),
                )
                .values(status="returned", params=sealed)
            )
            if not result.rowcount:
                return None
            await self.bus.publish(conn, SIGNIN_TOPIC, key)
        return key

    @unavailable_as("taking a sign-in's return")
    async def take(self, key: str) -> dict[str, str] | None:
        """`returned` -> `taken`: the browser's parameters for the one process that finishes the sign-in."""
        async with self.engine.begin() as conn:
            sealed = await conn.scalar(
                update(oauth_pending)
                .where(oauth_pending.c.state == key, oauth_pending.c.status == "returned")
                .values(status="taken")
                .returning(oauth_pending.c.params)  # the row as updated: the code goes when the outcome comes
            )
        if sealed is None:
            return None
        try:
            params = json.loads(self._sealer.open(sealed, "oauth_pending:" + key))
        except Unreadable:
            logger.warning("a sign-in's return could not be read with this key: another key in the fleet?")
            return None
        return {str(k): str(v) for k, v in params.items()}

    @unavailable_as("listing returned sign-ins")
    async def waiting(self) -> list[str]:
        """Keys of returns nobody has taken yet (swept after the listener (re)connects)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(oauth_pending.c.state).where(oauth_pending.c.status == "returned")
            )
        return [row.state for row in rows]

    @unavailable_as("recording how a sign-in ended")
    async def over(self, key: str, ok: bool, reason: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(oauth_pending)
                .where(oauth_pending.c.state == key, oauth_pending.c.status == "taken")
                .values(status="done" if ok else "failed", reason=reason, params=None)
            )
            await self.bus.publish(conn, SIGNIN_DONE_TOPIC, key)

    async def outcome(self, key: str, wait_s: float) -> SignInOutcome | None:
        """How the sign-in ended, once it has (None after `wait_s`)."""

        @unavailable_as("reading how a sign-in ended")
        async def read() -> SignInOutcome | None:
            async with self.engine.connect() as conn:
                row = (
                    await conn.execute(
                        select(oauth_pending.c.status, oauth_pending.c.reason).where(
                            oauth_pending.c.state == key
                        )
                    )
                ).first()
            if row is None or row.status not in ("done", "failed"):
                return None
            return SignInOutcome(row.status == "done", row.reason or "")

        return await self._done.until(key, read, wait_s)


# -- /tools lists -------------------------------------------------------------------------------------------


class ToolLists:
    """`/tools` lists, one row each: whichever instance handles a tap (after a takeover too) finds the list."""

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.clock = clock

    @unavailable_as("keeping a /tools list")
    async def keep(self, token: str, server: str, tools: list[str], origin: Origin, keep_s: float) -> None:
        """Keep the list (and forget lists older than `keep_s`)."""
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(delete(tool_lists).where(tool_lists.c.created < now - keep_s))
            await conn.execute(
                insert(tool_lists).values(
                    token=token,
                    user_id=origin.user_id,
                    chat_id=origin.chat_id,
                    server=server,
                    tools=json.dumps(tools),
                    created=now,
                )
            )

    @unavailable_as("reading a /tools list")
    async def get(self, token: str, keep_s: float) -> tuple[str, list[str], Origin] | None:
        """The list's server, tool names and who asked where; None when unknown or older than `keep_s`."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(tool_lists).where(
                        tool_lists.c.token == token, tool_lists.c.created >= self.clock() - keep_s
                    )
                )
            ).first()
        if row is None:
            return None
        return row.server, list(json.loads(row.tools)), Origin(chat_id=row.chat_id, user_id=row.user_id)

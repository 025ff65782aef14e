"""What the instances of a fleet share besides the questions, in rows, with the bus to wake each other. Does I/O.

A load balancer sends any HTTP request to any instance, and after a takeover a person's taps reach another
instance than the one that showed them a list. Three things that one process keeps in memory (`shares_of`:
`bot.core.fleet`'s `LocalRelay` and `LocalLaunches`, the same shapes) live here instead; the two relays are
`bot.core.fleet.Relay`s (write, announce, claim by compare-and-set, settle, a bounded wait for the outcome):

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

import json
import logging
import time
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
from bot.core.fleet import Bus, Fleet
from bot.core.relay import (
    LocalSignIns,
    LocalToolLists,
    MiniAppAnswer,
    MiniAppShare,
    SignInOutcome,
    SignInShare,
    ToolListShare,
    state_key,
)
from bot.store.budget import ALONE_BUDGET, OwnBudget, TelegramBudget, fleet_budget
from bot.store.crypto import Sealer, Unreadable
from bot.store.errors import StoreUnavailable, unavailable_as
from bot.store.store import Store
from bot.store.tables import miniapp_answers, miniapp_launches, oauth_pending, tool_lists

__all__ = [
    "ANSWER_TOPIC",
    "SIGNIN_TOPIC",
    "Announcements",
    "MiniAppRelay",
    "PendingSignIns",
    "RowWaiters",
    "Shares",
    "ToolLists",
    "shares_of",
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


class Announcements:
    """What a bus topic announced (ids), and `None` for "the bus (re)connected: look at everything", in order,
    for one consumer task (`take`). `announce` and `sweep` are the topic's `on_message` and `on_connect`."""

    def __init__(self, bus: Bus, topic: str) -> None:
        self._items: list[str | None] = []
        self._changed = anyio.Event()
        bus.subscribe(topic, self.announce, self.sweep)

    def announce(self, item: str) -> None:
        self._items.append(item)
        self._changed.set()

    def sweep(self) -> None:
        if not self._items or self._items[-1] is not None:  # one look at everything covers those before it
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


class RowWaiters:
    """Waiters on row ids, woken by a bus topic (and all of them after a reconnect: they may have missed one)."""

    def __init__(self, bus: Bus, topic: str) -> None:
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
class Shares:
    """What the bot's processes share besides the questions: alone, in memory; in a fleet, in rows with the bus."""

    miniapp: MiniAppShare
    signins: SignInShare
    tool_lists: ToolListShare
    """`/tools` lists, so a tap works on any instance (alone, nobody else to find them)."""
    budget: TelegramBudget | OwnBudget
    """Telegram's flood limits shared by the fleet's instances (alone, its own buckets decide)."""


def shares_of(config: Config, store: Store | None, fleet: Fleet) -> Shares:
    """The shares of this process's `fleet`: in rows on its database when others share its bus (a fleet:
    webhook mode on PostgreSQL), else in memory, as one process keeps them."""
    key = config.storage.secret_key if config.storage is not None else None
    if store is None or not fleet.bus.shared:
        return Shares(MiniAppShare.alone(), LocalSignIns(), LocalToolLists(), ALONE_BUDGET)
    relay = MiniAppRelay(store.engine, fleet.bus)
    return Shares(
        MiniAppShare(relay, relay, store.rounds.by_token),
        LocalSignIns() if key is None else PendingSignIns(store.engine, fleet.bus, key.get()),
        ToolLists(store.engine),
        fleet_budget(config, store.engine),
    )


def _insert(engine: AsyncEngine) -> Any:
    return postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert


# -- Mini App -----------------------------------------------------------------------------------------------


class MiniAppRelay:
    """Launches used once fleet-wide (`Launches`), and page answers carried to the instance that holds their
    prompt (`Relay`: the rows of `miniapp_answers`, announced on `miniapp`, settled on `miniapp_done`)."""

    def __init__(self, engine: AsyncEngine, bus: Bus, *, clock: Callable[[], float] = time.time) -> None:
        self.engine = engine
        self.bus = bus
        self.clock = clock
        self._heard = Announcements(bus, ANSWER_TOPIC)
        self._done = RowWaiters(bus, ANSWER_DONE_TOPIC)

    @unavailable_as("recording a Mini App launch")
    async def use(self, launch: str, expires: float) -> bool:
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
    async def release(self, launch: str) -> None:
        """The launch's answer was not taken (the form had ended): the launch did nothing, as before it was used."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(miniapp_launches).where(miniapp_launches.c.launch == launch))

    @unavailable_as("sending a Mini App answer")
    async def send(self, key: str, item: MiniAppAnswer) -> bool:
        """Write the answer for the prompt `item.token` under `key` and wake every instance (`miniapp`)."""
        now = self.clock()
        answer = json.dumps({"ok": item.ok, "content": item.content, "reason": item.reason})
        async with self.engine.begin() as conn:
            await conn.execute(delete(miniapp_answers).where(miniapp_answers.c.created < now - KEEP_S))
            await conn.execute(
                insert(miniapp_answers).values(
                    id=key, token=item.token, user_id=item.user_id, answer=answer, state="sent", created=now
                )
            )
            await self.bus.publish(conn, ANSWER_TOPIC, key)
        return True

    @unavailable_as("reading a Mini App answer")
    async def peek(self, key: str) -> MiniAppAnswer | None:
        """The answer while nobody has claimed it (the holder reads it before it claims)."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(miniapp_answers).where(
                        miniapp_answers.c.id == key, miniapp_answers.c.state == "sent"
                    )
                )
            ).first()
        return None if row is None else _answer(row.token, row.user_id, row.answer)

    @unavailable_as("listing Mini App answers")
    async def waiting(self) -> list[str]:
        """Ids of answers nobody has claimed yet (swept after the listener (re)connects)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(miniapp_answers.c.id).where(miniapp_answers.c.state == "sent"))
        return [row.id for row in rows]

    @unavailable_as("claiming a Mini App answer")
    async def claim(self, key: str) -> MiniAppAnswer | None:
        """`sent` -> `claimed`: the answer for the one instance that may answer the prompt with it."""
        async with self.engine.begin() as conn:
            row = (
                await conn.execute(
                    update(miniapp_answers)
                    .where(miniapp_answers.c.id == key, miniapp_answers.c.state == "sent")
                    .values(state="claimed")
                    .returning(miniapp_answers.c.token, miniapp_answers.c.user_id, miniapp_answers.c.answer)
                )
            ).first()
        return None if row is None else _answer(row.token, row.user_id, row.answer)

    @unavailable_as("settling a Mini App answer")
    async def settle(self, key: str, outcome: bool) -> None:
        """`claimed` -> `taken` (the prompt took it) or `gone` (it had ended); the sender hears `miniapp_done`."""
        await self._move(key, "claimed", "taken" if outcome else "gone", publish=True)

    async def outcome(self, key: str, wait_s: float, *, take_back: bool = False) -> bool | None:
        """Whether the prompt took the answer: True, False (it had ended), or None when no instance claimed it
        within `wait_s` (with `take_back`, it never will: the answer is taken back)."""

        async def read() -> str | None:
            state = await self._state(key)
            return state if state in ("taken", "gone") else None

        state = await self._done.until(key, read, wait_s)
        if state is None and take_back:
            if await self._withdraw(key):
                return None
            # Claimed just in time: the holder answers the prompt at once, so its word is a moment away.
            state = await self._done.until(key, read, wait_s)
        return None if state is None else state == "taken"

    async def serve(
        self,
        handle: Callable[[str], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: `handle` each answer announced; after the bus (re)connects, each unclaimed one."""
        await self._heard.serve(handle, self.waiting, task_status=task_status)

    @unavailable_as("withdrawing a Mini App answer")
    async def _withdraw(self, key: str) -> bool:
        return await self._move(key, "sent", "expired", publish=False)

    @unavailable_as("reading a Mini App answer")
    async def _state(self, key: str) -> str | None:
        async with self.engine.connect() as conn:
            state = await conn.scalar(select(miniapp_answers.c.state).where(miniapp_answers.c.id == key))
        return None if state is None else str(state)

    async def _move(self, key: str, before: str, after: str, *, publish: bool) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(miniapp_answers)
                .where(miniapp_answers.c.id == key, miniapp_answers.c.state == before)
                .values(state=after)
            )
            if result.rowcount and publish:
                await self.bus.publish(conn, ANSWER_DONE_TOPIC, key)
        return bool(result.rowcount)


def _answer(token: str, user_id: int, text: str) -> MiniAppAnswer:
    answer = json.loads(text)
    return MiniAppAnswer(token, user_id, answer["ok"], answer["content"], answer["reason"])


# -- OAuth sign-ins -----------------------------------------------------------------------------------------


class PendingSignIns:
    """Sign-ins waiting for their browser, by the SHA-256 of `state` (`bot.core.SignInRelay` for the OAuth side:
    `opened`, `closed`), and the browser's return carried to the process whose flow waits on it (`Relay`: the rows
    of `oauth_pending`, announced on `signin`, settled on `signin_done`)."""

    def __init__(
        self, engine: AsyncEngine, bus: Bus, secret_key: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.engine = engine
        self.bus = bus
        self.clock = clock
        self._sealer = Sealer(secret_key)
        self._heard = Announcements(bus, SIGNIN_TOPIC)
        self._done = RowWaiters(bus, SIGNIN_DONE_TOPIC)

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
    async def send(self, key: str, item: dict[str, str]) -> bool:
        """The browser came back with `item` (its parameters; `key` is `state_key` of their state): `waiting` ->
        `returned` (once), with them sealed, and the holder woken (`signin`). False when the sign-in is unknown,
        already returned, or expired."""
        params = item
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
                return False
            await self.bus.publish(conn, SIGNIN_TOPIC, key)
        return True

    @unavailable_as("reading a sign-in's return")
    async def peek(self, key: str) -> dict[str, str] | None:
        """The browser's parameters while nobody has taken them."""
        async with self.engine.connect() as conn:
            sealed = await conn.scalar(
                select(oauth_pending.c.params).where(
                    oauth_pending.c.state == key, oauth_pending.c.status == "returned"
                )
            )
        return None if sealed is None else self._open(key, sealed)

    @unavailable_as("taking a sign-in's return")
    async def claim(self, key: str) -> dict[str, str] | None:
        """`returned` -> `taken`: the browser's parameters for the one process that finishes the sign-in."""
        async with self.engine.begin() as conn:
            sealed = await conn.scalar(
                update(oauth_pending)
                .where(oauth_pending.c.state == key, oauth_pending.c.status == "returned")
                .values(status="taken")
                .returning(oauth_pending.c.params)  # the row as updated: the code goes when the outcome comes
            )
        return None if sealed is None else self._open(key, sealed)

    def _open(self, key: str, sealed: str) -> dict[str, str] | None:
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
    async def settle(self, key: str, outcome: SignInOutcome) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(oauth_pending)
                .where(oauth_pending.c.state == key, oauth_pending.c.status == "taken")
                .values(status="done" if outcome.ok else "failed", reason=outcome.reason, params=None)
            )
            await self.bus.publish(conn, SIGNIN_DONE_TOPIC, key)

    async def serve(
        self,
        handle: Callable[[str], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Until cancelled: `handle` each return announced; after the bus (re)connects, each untaken one."""
        await self._heard.serve(handle, self.waiting, task_status=task_status)

    async def outcome(self, key: str, wait_s: float, *, take_back: bool = False) -> SignInOutcome | None:
        """How the sign-in ended, once it has (None after `wait_s`; with `take_back`, a return nobody took by then
        is dropped: a late take finds nothing)."""

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

        found = await self._done.until(key, read, wait_s)
        if found is None and take_back:
            await self._withdraw(key)
        return found

    @unavailable_as("taking back a sign-in's return")
    async def _withdraw(self, key: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(oauth_pending).where(
                    oauth_pending.c.state == key, oauth_pending.c.status == "returned"
                )
            )


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

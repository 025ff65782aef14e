"""Agents' calls handed from the instance their HTTP request reached to their person's owner, in rows
(`agent_calls`), with the fleet's bus to wake each other (`bot.core.agent_calls.AgentCalls`). Does I/O.

The receiver writes the call (`sent`, naming itself) and publishes `agent_call` with its key and person. Every
instance serving the topic looks; the one that owns the person claims it, `sent` -> `claimed` (a compare-and-set,
in the same statement as the check that its receiver still lives, else `withdrawn`: nobody would read the
result), runs it and writes the result (`done`), publishing `agent_call_done` for the receiver. An agent that goes
away leaves its call: `sent` -> `withdrawn` (never run), or on a claimed one `left_as` is set and
`agent_call_left` wakes the runner, which ends the call as its agent's doing.

Whether an instance lives is what the partitions say of it (`bot.store.fleet`): its `fleet_instances` row has a
fresh heartbeat and its lock session is still connected (a killed process's ends at once). The runner looks at its
receiver, and the receiver at its runner, when woken and every `RECHECK_S`: a dead receiver ends the call on the
runner ("your agent stopped waiting"); a dead runner ends the agent's wait with an error (`claimed` -> `lost`,
so a late result is not taken for the agent's either). A claimed call is never claimed again: nothing runs twice.

Calls nobody has claimed are looked at again every `SWEEP_S` by every instance (and after the bus reconnects), so
a call whose person another instance just took over, or whose announcement was lost, is found by its new owner.

Only for a fleet (PostgreSQL): alone the gateway runs every call itself.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus
from sqlalchemy import delete, insert, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.agent_calls import LOST_LINE, AgentCall, Ended
from bot.core.fleet import Bus
from bot.core.values import Outcome
from bot.errors import StoreUnavailable
from bot.store.engine import failure_reason
from bot.store.errors import unavailable_as
from bot.store.fleet import TAKEOVER_S
from bot.store.fleet_state import Announcements, RowWaiters
from bot.store.tables import agent_calls

__all__ = ["CALL_TOPIC", "DONE_TOPIC", "LEFT_TOPIC", "SWEEP_S", "FleetAgentCalls"]

logger = logging.getLogger(__name__)

CALL_TOPIC: Final = "agent_call"
DONE_TOPIC: Final = "agent_call_done"
LEFT_TOPIC: Final = "agent_call_left"
SWEEP_S: Final = 2.0
"""Calls nobody claimed are looked at again this often (a takeover moved their person, a wake-up was lost)."""
KEEP_S: Final = 3600.0
"""Calls not running are deleted once this old."""
WITHDRAWN_LINE: Final = "the call was withdrawn before it ran"

_ALIVE: Final = (
    "EXISTS (SELECT 1 FROM fleet_instances AS i WHERE i.bot_id = :bot_id AND i.instance = {column} "
    "AND i.heartbeat > extract(epoch from clock_timestamp()) - :takeover "
    "AND EXISTS (SELECT 1 FROM pg_stat_activity AS a WHERE a.pid = i.pid))"
)
"""Whether the instance named in `column` lives (as `bot.store.fleet` counts the live instances)."""

_READ: Final = text(
    "SELECT state, result, left_as, "
    + _ALIVE.format(column="c.receiver")
    + " AS receiver_alive, "
    + _ALIVE.format(column="c.runner")
    + " AS runner_alive FROM agent_calls AS c WHERE c.id = :key"
)
_CLAIM: Final = text(
    "UPDATE agent_calls AS c SET runner = :me, state = CASE WHEN "
    + _ALIVE.format(column="c.receiver")
    + " THEN 'claimed' ELSE 'withdrawn' END WHERE c.id = :key AND c.bot_id = :bot_id AND c.state = 'sent' "
    "RETURNING c.state, c.token_id, c.user_id, c.agent, c.name, c.arguments"
)


class FleetAgentCalls:
    """`AgentCalls` of the bot `bot_id` in a fleet on the PostgreSQL database of `engine`, for this `instance` (its
    id in `fleet_instances`), woken through `bus`."""

    def __init__(
        self,
        engine: AsyncEngine,
        bus: Bus,
        bot_id: int,
        instance: str,
        *,
        clock: Callable[[], float] = time.time,
        takeover_s: float = TAKEOVER_S,
    ) -> None:
        self.engine = engine
        self.bus = bus
        self.bot_id = bot_id
        self.instance = instance
        self.clock = clock
        self.takeover_s = takeover_s
        self._heard = Announcements(bus, CALL_TOPIC)
        self._done = RowWaiters(bus, DONE_TOPIC)
        self._left = RowWaiters(bus, LEFT_TOPIC)
        self._unread = False

    @unavailable_as("handing an agent's call to its person's instance")
    async def send(self, call: AgentCall) -> str:
        key = str(uuid.uuid4())
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(
                delete(agent_calls).where(
                    agent_calls.c.created < now - KEEP_S,
                    agent_calls.c.state != "claimed",  # a call unclaimed for an hour: nobody waits for it
                )
            )
            await conn.execute(
                insert(agent_calls).values(
                    id=key,
                    bot_id=self.bot_id,
                    user_id=call.user_id,
                    token_id=call.token_id,
                    agent=call.agent,
                    name=call.name,
                    arguments=json.dumps(call.arguments),
                    receiver=self.instance,
                    state="sent",
                    created=now,
                )
            )
            await self.bus.publish(conn, CALL_TOPIC, f"{key}:{call.user_id}")
        return key

    async def _row(self, key: str) -> Any:
        """The call's row with whether its receiver and its runner live; None when the database cannot be read
        now (the caller looks again: logged once until a read goes through)."""
        try:
            async with self.engine.connect() as conn:
                params = {"key": key, "bot_id": self.bot_id, "takeover": self.takeover_s}
                row = (await conn.execute(_READ, params)).first()
        except (SQLAlchemyError, OSError, TimeoutError) as exc:
            self._failed(exc)
            return None
        if self._unread:
            logger.info("agent calls: the database answers again")
        self._unread = False
        return row

    def _failed(self, exc: Exception) -> None:
        if not self._unread:
            logger.warning(
                "agent calls: a handed-over call could not be read (looked at again): %s", failure_reason(exc)
            )
        self._unread = True
        return None

    async def result(self, key: str) -> Ended:
        async def read() -> Ended | None:
            row = await self._row(key)
            if row is None:
                return None
            if row.state == "done":
                return Ended(json.loads(row.result))
            if row.state == "withdrawn":
                return Ended(None, WITHDRAWN_LINE)
            if row.state == "lost":
                return Ended(None, LOST_LINE)
            if row.state == "claimed" and not row.runner_alive:
                try:
                    lost = await self._lost(key)
                except StoreUnavailable as exc:
                    self._failed(exc)
                    return None
                if lost:
                    logger.warning("agent calls: the instance running a call handed over from here died")
                    return Ended(None, LOST_LINE)
            return None

        ended = await self._done.until(key, read, math.inf)
        assert ended is not None  # no deadline
        return ended

    @unavailable_as("recording a handed-over call as lost")
    async def _lost(self, key: str) -> bool:
        async with self.engine.begin() as conn:
            moved = await conn.execute(
                update(agent_calls)
                .where(agent_calls.c.id == key, agent_calls.c.state == "claimed")
                .values(state="lost")
            )
        return bool(moved.rowcount)

    @unavailable_as("telling a handed-over call that its agent left")
    async def leave(self, key: str, why: Outcome) -> bool:
        async with self.engine.begin() as conn:
            withdrawn = await conn.execute(
                update(agent_calls)
                .where(agent_calls.c.id == key, agent_calls.c.state == "sent")
                .values(state="withdrawn")
            )
            if withdrawn.rowcount:
                await self.bus.publish(conn, DONE_TOPIC, key)
                return True
            left = await conn.execute(
                update(agent_calls)
                .where(agent_calls.c.id == key, agent_calls.c.state == "claimed")
                .values(left_as=why.value)
            )
            if left.rowcount:
                await self.bus.publish(conn, LEFT_TOPIC, key)
        return False

    @unavailable_as("claiming an agent's call")
    async def claim(self, key: str) -> AgentCall | None:
        params = {"key": key, "bot_id": self.bot_id, "me": self.instance, "takeover": self.takeover_s}
        async with self.engine.begin() as conn:
            row = (await conn.execute(_CLAIM, params)).first()
        if row is None or row.state != "claimed":
            return None
        return AgentCall(row.token_id, row.user_id, row.agent, row.name, json.loads(row.arguments))

    async def watch(self, key: str) -> Outcome:
        async def read() -> Outcome | None:
            row = await self._row(key)
            if row is None:
                return None
            if row.left_as is not None:
                return Outcome(row.left_as)
            if not row.receiver_alive or row.state != "claimed":
                return (
                    Outcome.AGENT_CANCELLED
                )  # its receiver died, or took it for lost: nobody reads the result
            return None

        why = await self._left.until(key, read, math.inf)
        assert why is not None  # no deadline
        return why

    @unavailable_as("writing a handed-over call's result")
    async def settle(self, key: str, result: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            done = await conn.execute(
                update(agent_calls)
                .where(
                    agent_calls.c.id == key,
                    agent_calls.c.state == "claimed",
                    agent_calls.c.runner == self.instance,
                )
                .values(state="done", result=json.dumps(result))
            )
            if done.rowcount:
                await self.bus.publish(conn, DONE_TOPIC, key)

    @unavailable_as("listing agents' calls nobody claimed")
    async def waiting(self) -> list[str]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                agent_calls.select()
                .with_only_columns(agent_calls.c.id, agent_calls.c.user_id)
                .where(agent_calls.c.bot_id == self.bot_id, agent_calls.c.state == "sent")
            )
        return [f"{row.id}:{row.user_id}" for row in rows]

    async def serve(
        self,
        handle: Callable[[str, int], Coroutine[Any, Any, None]],
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        async def one(item: str) -> None:
            key, _, user = item.partition(":")
            await handle(key, int(user))

        async with anyio.create_task_group() as tg:
            await tg.start(self._heard.serve, one, self.waiting)
            task_status.started()
            while True:
                await anyio.sleep(SWEEP_S)
                self._heard.sweep()

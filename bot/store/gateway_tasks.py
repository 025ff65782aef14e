"""The gateway's tasks in the database (`gateway_tasks` table): an agent's call that waits for a person, answered
at once with a task the agent polls. Does I/O.

A task belongs to the agent token that made it: every read names the token, and a task of another token reads as
no task at all. Any process on the database answers for any task (its status and result are rows, not memory);
the result is written once, by a compare-and-set from `working` (so a cancelled task stays cancelled, and of two
processes that would finish it one does). A task is kept `ttl_ms` from its creation, then it is gone (deleted
when next looked at). Every method raises `StoreUnavailable` when the database cannot be read or written.

The process running a task's call says so every `BEAT_S` (`alive`; not while the call waits for approvers: that
wait is kept with the approval request and outlives the process). A `working` task it has not said so of for
`STALE_S` lost its process mid-call (SIGKILL, SIGTERM, a takeover): whoever reads it next fails it
(`ORPHANED`): the call may or may not have run, and nobody is left to keep its result.
"""

from __future__ import annotations

import enum
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core import CallStatus, ToolOutcome
from bot.store.agents import AgentStore
from bot.store.errors import unavailable_as
from bot.store.tables import gateway_tasks

__all__ = [
    "BEAT_S",
    "ORPHANED",
    "PROTOCOL_META",
    "STALE_S",
    "GatewayTask",
    "GatewayTaskStore",
    "TaskState",
    "agent_result",
    "wire",
]

PROTOCOL_META: Final = "io.modelcontextprotocol/"
"""The prefix of `_meta` keys the protocol reserves for itself (a backend's are not the gateway's to repeat)."""
BEAT_S: Final = 3.0
"""How often the process running a task's call says it still runs it (`alive`)."""
STALE_S: Final = 15.0
"""How long since it last said so before a `working` task counts as lost with its process (five beats missed:
room for a slow database and clocks of a fleet's machines that disagree by a few seconds)."""
ORPHANED: Final = (
    "the bot process running this call ended before it finished (it was stopped, killed or taken over); the call "
    "may or may not have run"
)
"""A lost task's line (its `statusMessage`; at 2026-07-28 its error's message)."""


class TaskState(enum.StrEnum):
    """A task's status, as the 2025-11-25 tasks name them (the gateway's tasks never ask the agent for input)."""

    WORKING = "working"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self is not TaskState.WORKING


@dataclass(frozen=True, slots=True)
class GatewayTask:
    """One task as kept."""

    id: str
    token_id: int
    """The agent token that made it: the only one that may read it."""
    user_id: int
    agent: str
    tool: str
    """The gateway tool called (`<server>__<tool>`, `ask_person`, `permission_prompt`)."""
    state: TaskState
    message: str | None
    """Why it failed or was cancelled (the task's `statusMessage`)."""
    result: dict[str, Any] | None
    """The call's `CallToolResult`, as wire JSON, once completed."""
    created: float
    updated: float
    ttl_ms: int
    alive: float | None = None
    """When the process running its call last said so (None: not running, or waiting for approvers)."""

    @property
    def expires(self) -> float:
        return self.created + self.ttl_ms / 1000


class GatewayTaskStore:
    """The `gateway_tasks` table of one database. `clock` is Unix time."""

    def __init__(
        self, engine: AsyncEngine, agents: AgentStore, clock: Callable[[], float] = time.time
    ) -> None:
        self.engine = engine
        self.agents = agents
        """The agent tokens: a task whose token no longer works is not run (`runnable`)."""
        self.clock = clock

    @unavailable_as("storing a gateway task")
    async def create(self, token_id: int, user_id: int, agent: str, tool: str, ttl_ms: int) -> GatewayTask:
        """A new `working` task of the token."""
        now = self.clock()
        task = GatewayTask(
            str(uuid.uuid4()), token_id, user_id, agent, tool, TaskState.WORKING, None, None, now, now, ttl_ms
        )
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(gateway_tasks).values(
                    id=task.id,
                    token_id=token_id,
                    user_id=user_id,
                    agent=agent,
                    tool=tool,
                    status=task.state.value,
                    created=now,
                    updated=now,
                    ttl_ms=ttl_ms,
                )
            )
        return task

    @unavailable_as("reading a gateway task")
    async def get(self, task_id: str, token_id: int | None) -> GatewayTask | None:
        """The task, if it is `token_id`'s (None: whoever's) and not past its time to live; failed first if it lost
        its process mid-call."""
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(delete(gateway_tasks).where(_expired(now)))
            await conn.execute(_orphaned(now).where(gateway_tasks.c.id == task_id))
            row = (await conn.execute(select(gateway_tasks).where(gateway_tasks.c.id == task_id))).first()
        if row is None or (token_id is not None and row.token_id != token_id):
            return None
        return _task(row)

    async def runnable(self, task_id: str) -> GatewayTask | None:
        """The task, if its call may still run: `working`, and the agent token that made it still works (not
        revoked or expired: a task whose token ended is failed so, and None returned)."""
        task = await self.get(task_id, None)
        if task is None or task.state.terminal:
            return None
        if await self.agents.live_one(task.token_id) is None:
            await self.finish(task.id, TaskState.FAILED, message="the agent's access ended")
            return None
        return task

    @unavailable_as("reading the gateway tasks")
    async def of_token(self, token_id: int) -> list[GatewayTask]:
        """The token's live tasks, newest first."""
        now = self.clock()
        async with self.engine.begin() as conn:
            await conn.execute(delete(gateway_tasks).where(_expired(now)))
            await conn.execute(_orphaned(now).where(gateway_tasks.c.token_id == token_id))
            rows = await conn.execute(
                select(gateway_tasks)
                .where(gateway_tasks.c.token_id == token_id)
                .order_by(gateway_tasks.c.created.desc(), gateway_tasks.c.id)
            )
            return [_task(row) for row in rows]

    @unavailable_as("keeping a gateway task alive")
    async def alive(self, task_id: str, running: bool) -> None:
        """The process running the task's call says it does (`running`), or that the call waits for approvers (the
        task is then never lost with the process: the approval request carries it)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(gateway_tasks)
                .where(gateway_tasks.c.id == task_id, gateway_tasks.c.status == TaskState.WORKING.value)
                .values(alive=self.clock() if running else None)
            )

    @unavailable_as("finishing a gateway task")
    async def finish(
        self,
        task_id: str,
        state: TaskState,
        result: dict[str, Any] | None = None,
        message: str | None = None,
    ) -> bool:
        """Settle a `working` task (`state` terminal); False when it was settled already (cancelled, or finished
        by another process) or is gone."""
        assert state.terminal
        text = None if result is None else json.dumps(result, ensure_ascii=False)
        async with self.engine.begin() as conn:
            done = await conn.execute(
                update(gateway_tasks)
                .where(gateway_tasks.c.id == task_id, gateway_tasks.c.status == TaskState.WORKING.value)
                .values(status=state.value, result=text, message=message, updated=self.clock())
            )
        return done.rowcount == 1

    async def settle(
        self, task_id: str, outcome: ToolOutcome, *, fails: frozenset[CallStatus] = frozenset()
    ) -> bool:
        """Keep a call's outcome as its task's result (a cancelled call ends its task cancelled, one ending as
        `fails` says fails it with its line); False when the task was settled already (the agent cancelled it) or
        is gone."""
        if outcome.status is CallStatus.CANCELLED:
            return await self.finish(task_id, TaskState.CANCELLED, message=outcome.text or "cancelled")
        if outcome.status in fails:
            text = outcome.text or f"the call ended: {outcome.status.value}"
            return await self.finish(task_id, TaskState.FAILED, message=text)
        return await self.finish(task_id, TaskState.COMPLETED, wire(agent_result(outcome)))


def agent_result(outcome: ToolOutcome) -> types.CallToolResult:
    """What an agent gets for a call: the server's own result when there is one, else the bot's line as an error.

    The server's `_meta` keys under the protocol's own prefix (`io.modelcontextprotocol/serverInfo` and the
    like) describe the backend's connection, not the gateway's: they are dropped; other keys pass through."""
    if isinstance(outcome.source, types.CallToolResult):
        meta = outcome.source.meta
        if meta is None or not any(key.startswith(PROTOCOL_META) for key in meta):
            return outcome.source
        kept = {key: value for key, value in meta.items() if not key.startswith(PROTOCOL_META)}
        return outcome.source.model_copy(update={"meta": kept or None})
    text = outcome.text or f"the call ended: {outcome.status.value}"
    return types.CallToolResult(
        content=[types.TextContent(text=text)], is_error=outcome.status is not CallStatus.OK
    )


def wire(result: types.CallToolResult) -> dict[str, Any]:
    """A result as JSON for the wire (and the store)."""
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _orphaned(now: float) -> Any:
    """Fails the `working` tasks whose process has not said it runs their call for `STALE_S` (narrowed by the
    caller's `where`)."""
    return (
        update(gateway_tasks)
        .where(
            gateway_tasks.c.status == TaskState.WORKING.value,
            gateway_tasks.c.alive.is_not(None),
            gateway_tasks.c.alive < now - STALE_S,
        )
        .values(status=TaskState.FAILED.value, message=ORPHANED, updated=now)
    )


def _expired(now: float) -> Any:
    return gateway_tasks.c.created + gateway_tasks.c.ttl_ms / 1000.0 < now


def _task(row: Row[Any]) -> GatewayTask:
    return GatewayTask(
        row.id,
        row.token_id,
        row.user_id,
        row.agent,
        row.tool,
        TaskState(row.status),
        row.message,
        None if row.result is None else json.loads(row.result),
        row.created,
        row.updated,
        row.ttl_ms,
        row.alive,
    )

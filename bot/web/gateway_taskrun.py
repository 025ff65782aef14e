"""Agents' calls made tasks, run: the task kept in the store (`bot.store.gateway_tasks`), its call run in the
gateway's task group (not the request's: the agent polls for the result, from this process or another), its outcome
kept for the agent; and which calls are tasks at 2026-07-28 (`rule`). The protocol side (the task methods, the
wire shapes, both eras) is `bot.web.gateway_tasks`. Does I/O (the store, the call).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp_types import INTERNAL_ERROR

from bot.config import ApprovalGate, Config, ServerAuth
from bot.config import Caller as CallerKind
from bot.core import AgentBook, CallStatus, Origin, ToolOutcome
from bot.core.ownership import Ownership
from bot.errors import StoreUnavailable
from bot.servers.hub import Flight, Hub, Unavailable
from bot.store.gateway_tasks import BEAT_S, GatewayTask, GatewayTaskStore, TaskState, wire
from bot.web.gateway_guard import Caller, Ending, Guard
from bot.web.gateway_parts import ASK_PERSON, PERMISSION_PROMPT, the_caller
from bot.web.gateway_tasks import FAILS, MODERN, Support

__all__ = ["WATCH_S", "TaskRunner", "Work"]

logger = logging.getLogger(__name__)

WATCH_S: Final = 0.5
"""How often a running task's call is looked at (in memory) for whether it waits for its approvers."""

Work = Callable[[Origin, Caller, str, dict[str, Any], Flight], Awaitable[ToolOutcome | types.CallToolResult]]
"""A task's call itself (the gateway's `_task_work`): run here, or handed to its person's instance."""


class TaskRunner:
    """Runs agents' calls as tasks while `run` runs (they end with it; what they wait for in the store stays)."""

    def __init__(
        self,
        config: Config,
        hub: Hub,
        agents: AgentBook,
        tasks: GatewayTaskStore,
        guard: Guard,
        owners: Ownership,
        *,
        work: Work,
        split: Callable[[str], tuple[str, str] | None],
    ) -> None:
        """`work`: a task's call; `split`: (server, tool) of a gateway tool's name, None for the bot's own."""
        self.config = config
        self.hub = hub
        self.agents = agents
        self.tasks = tasks
        self.guard = guard
        self.owners = owners
        self.work = work
        self.split = split
        self._running: dict[str, tuple[anyio.CancelScope, Origin]] = {}
        """The tasks whose calls run in this process: their scope, and the origin their approval requests name."""
        self._tg: TaskGroup | None = None
        """Where tasks' calls run: while `run` runs."""

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Tasks' calls run while this runs (cancel it to stop: they end with it)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                task_status.started()
                await anyio.sleep_forever()
            finally:
                self._tg = None

    async def rule(self, params: types.CallToolRequestParams) -> Support | None:
        """Which calls are tasks at 2026-07-28 (`bot.web.gateway_tasks`): a server's tool that declares
        `execution.taskSupport` "optional" or "required" (its own word), and any call that will wait for people: an
        `[[approvals]]` rule gates it, `ask_person`, `permission_prompt`. `notify_person`, an unknown tool and every
        other call are answered as they run."""
        name = params.name
        if name in (ASK_PERSON, PERMISSION_PROMPT):
            return "optional"
        target = self.split(name)
        if target is None:
            return None
        server, tool = target
        gated = self.config.approval_rule(server, tool, CallerKind.AGENT) is not None
        declared = await self._declared(server, tool)
        if declared == "required":
            return "required"
        return "optional" if gated or declared == "optional" else None

    async def _declared(self, server: str, tool: str) -> str | None:
        """The tool's `execution.taskSupport`, from the caller's tool list (connecting if need be, as the call
        would). Not on a server each person signs in to (`auth = "oauth"`): its connecting may wait for the person's
        sign-in, which belongs to the call (an agent that leaves then ends the card as its doing), so such a server's
        tools are tasks only when they wait for approvers."""
        config = self.config.server(server)
        if config is None or config.auth is ServerAuth.OAUTH:
            return None
        caller = the_caller()
        try:
            infos = await self.hub.list_tools(
                server, Origin(caller.user_id, caller.user_id, agent=caller.agent)
            )
        except Unavailable:
            return None  # the call itself will say so
        return next((info.task_support for info in infos if info.name == tool), None)

    async def start(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, ttl_ms: int
    ) -> GatewayTask:
        """A call made a task (`bot.web.gateway_tasks`; the agent asked, 2025-11-25, or the gateway decided,
        2026-07-28): kept as a task, then run in the gateway's task group (not the request's: the agent polls for
        the result, from this process or another)."""
        caller = the_caller()
        tg = self._tg
        if tg is None:
            raise MCPError(code=INTERNAL_ERROR, message="the gateway is stopping")
        try:
            await self.agents.used(caller.token_id)
        except StoreUnavailable:
            logger.warning("gateway: a call by an agent was not counted: the database is unavailable")
        try:
            task = await self.tasks.create(caller.token_id, caller.user_id, caller.agent, params.name, ttl_ms)
        except StoreUnavailable as exc:
            raise MCPError(
                code=INTERNAL_ERROR, message="the task could not be kept: the database is unavailable"
            ) from exc
        origin = Origin(caller.user_id, caller.user_id, agent=caller.agent, task=task.id)
        fails = FAILS if ctx.protocol_version in MODERN else frozenset()
        tg.start_soon(self._run_task, task, origin, caller, params.name, dict(params.arguments or {}), fails)
        return task

    async def _run_task(
        self,
        task: GatewayTask,
        origin: Origin,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        fails: frozenset[CallStatus],
    ) -> None:
        """A task's call, its outcome kept for the agent (a call ending as `fails` says fails its task: the
        2026-07-28 tasks' protocol errors). When the process stops meanwhile nothing is written: the task stays
        `working`, and a call waiting for approvers is run by whoever carries the approval out; one that was running
        is found lost by the next process that reads it (`_keep_alive`)."""
        done: ToolOutcome | types.CallToolResult | None = None
        flight = Flight()
        with self.guard.call(caller) as ending, anyio.CancelScope() as scope:
            self._running[task.id] = (scope, origin)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._end_with_access, task, ending)
                    tg.start_soon(self._keep_alive, task, flight, self._waits_for_approvers(caller, name))
                    done = await self.work(origin, caller, name, arguments, flight)
                    tg.cancel_scope.cancel()
            finally:
                del self._running[task.id]
        if done is None:
            return  # cancelled: by the agent (`tasks/cancel` wrote it), or its access ended (written too)
        approver = self.hub.approver
        stopping = approver is not None and approver.unavailable() is not None
        if stopping and isinstance(done, ToolOutcome) and done.status is CallStatus.REFUSED:
            return  # its wait for approvers ended with the process: the request stays for the next one
        try:
            if isinstance(done, types.CallToolResult):
                await self.tasks.finish(task.id, TaskState.COMPLETED, wire(done))
            else:
                await self.tasks.settle(task.id, done, fails=fails)
        except StoreUnavailable:
            logger.warning("gateway: a task's result was not kept: the database is unavailable")

    def _waits_for_approvers(self, caller: Caller, name: str) -> bool:
        """Whether a task's call will first wait for approvers here (an `[[approvals]]` rule gates the call)."""
        target = self.split(name)
        if target is None or not self.owners.owns(caller.user_id):
            return False
        rule = self.config.approval_rule(target[0], target[1], CallerKind.AGENT)
        return rule is not None and rule.gate is ApprovalGate.CALL

    async def _keep_alive(self, task: GatewayTask, flight: Flight, gated: bool) -> None:
        """While the task's call runs here, say so in the store every `BEAT_S`, so that a process ending mid-call
        leaves the task to be found lost (`bot.store.gateway_tasks`) rather than `working` for good. Not while a
        gated call waits for its approvers (`gated`: before and during that wait): the approval request is kept
        and outlives the process, and whoever carries it out runs the call."""
        waited = not gated
        said: bool | None = None
        last = -BEAT_S
        while True:
            waited = waited or flight.approval
            running = waited and not flight.approval
            now = anyio.current_time()
            if running != said or (running and now - last >= BEAT_S):
                try:
                    await self.tasks.alive(task.id, running)
                except StoreUnavailable:
                    logger.warning("gateway: a task could not be kept alive: the database is unavailable")
                else:
                    if running and not said:
                        logger.info("gateway: an agent's task runs its call here (said in the store)")
                said, last = running, now
            await anyio.sleep(WATCH_S)

    async def _end_with_access(self, task: GatewayTask, ending: Ending) -> None:
        """When the task's token loses its access (revoked, expired, its person no longer allowed), the task fails
        so and its call ends (its approval request for everyone: it is never run)."""
        await ending.event.wait()
        with anyio.CancelScope(shield=True):
            try:
                await self.tasks.finish(task.id, TaskState.FAILED, message=ending.line)
            except StoreUnavailable:
                logger.warning("gateway: a task's end was not kept: the database is unavailable")
            await self.cancel(task)

    async def cancel(self, task: GatewayTask) -> None:
        """`tasks/cancel` of a task whose call runs here: its approval request ends for everyone (as its
        requester's doing), then the call is cancelled. A call running elsewhere runs on; its task stays
        cancelled (its result is not kept)."""
        running = self._running.get(task.id)
        if running is None:
            return
        scope, origin = running
        approver = self.hub.approver
        if approver is not None:
            approver.cancel(lambda other: other is origin)
        scope.cancel()

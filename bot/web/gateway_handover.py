"""Calls handed between the instances of a fleet: an agent's call of a person another instance owns is handed to it
(`bot.core.agent_calls.AgentCalls`, in rows woken by the fleet's bus) and its result awaited where the agent's request
is; each instance also runs the calls handed to it. Alone the process owns everyone and hands nothing over. Does
I/O (the store, through `AgentCalls`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext

from bot.core import Outcome
from bot.core.agent_calls import AgentCall, AgentCalls, Ended
from bot.core.ownership import Ownership
from bot.errors import StoreUnavailable
from bot.web.gateway_guard import Caller, Guard
from bot.web.gateway_parts import (
    AgentProgress,
    Departure,
    gone_event,
    handed_back,
    nowhere,
    text_result,
    to_agent,
)

__all__ = ["HandOver", "RunHere"]

logger = logging.getLogger(__name__)

RunHere = Callable[
    [Caller, str, dict[str, Any], AgentProgress, Sequence[Departure]], Awaitable[types.CallToolResult]
]
"""Runs an agent's call on this process (which owns its person): the gateway's own `_run`."""


class HandOver:
    """The gateway's side of `AgentCalls`: `hand_over` a call (or `task_call` a task's) to the instance that owns its
    person; `take` one handed to this instance, run by `run_here`."""

    def __init__(
        self, calls: AgentCalls, guard: Guard, owners: Ownership, keepalive_s: float, run_here: RunHere
    ) -> None:
        """`keepalive_s`: how often an agent waiting for a handed call hears a beat."""
        self.calls = calls
        self.guard = guard
        self.owners = owners
        self.keepalive_s = keepalive_s
        self.run_here = run_here

    async def hand_over(
        self, ctx: ServerRequestContext[Any], caller: Caller, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """A call of a person another instance owns: handed to it (`AgentCalls`), the result awaited here, where
        the agent's request is. Meanwhile the agent gets a beat every `keepalive_s` (the server's own progress
        stays with the call's instance). When the agent goes (it cancels, its connection drops, its access ends)
        the call is left: not run if nobody claimed it yet, else ended by its instance as the agent's doing."""
        key = await self._send(caller, name, arguments, "a call")
        if not isinstance(key, str):
            return key
        progress = AgentProgress(to_agent(ctx))
        ended: list[Ended] = []

        async def leave_on(event: anyio.Event, why: Outcome) -> None:
            await event.wait()
            await self.leave(key, why)

        with self.guard.call(caller) as ending:
            async with anyio.create_task_group() as tg:
                tg.start_soon(progress.beat, self.keepalive_s, lambda: False)
                tg.start_soon(leave_on, ending.event, Outcome.AGENT_REVOKED)
                gone = gone_event(ctx)
                if gone is not None:
                    tg.start_soon(leave_on, gone, Outcome.AGENT_CANCELLED)
                ended.append(await self._result(key))
                tg.cancel_scope.cancel()
        if ending.event.is_set():
            return text_result(ending.line, error=True)
        return handed_back(ended[0])

    async def leave(self, key: str, why: Outcome) -> None:
        try:
            await self.calls.leave(key, why)
        except StoreUnavailable:
            logger.warning("gateway: a handed-over call could not be told its agent left: database down")

    async def take(self, key: str, user_id: int) -> None:
        """A call handed over by another instance: run here when this process owns its person and claims it first
        (one instance, once), until it ends or nobody waits for it (its agent left, or the instance holding its
        request died: the call then ends as when its agent goes, its cards saying so); its result goes back."""
        if not self.owners.owns(user_id):
            return
        try:
            call = await self.calls.claim(key)
        except StoreUnavailable:
            logger.warning("gateway: a handed-over call could not be claimed: the database is unavailable")
            return
        if call is None:
            return
        caller = Caller(call.token_id, call.user_id, call.agent)
        departure = Departure()

        async def watch() -> None:
            departure.go(await self.calls.watch(key))

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            result = await self.run_here(
                caller, call.name, call.arguments, AgentProgress(nowhere), [departure]
            )
            tg.cancel_scope.cancel()
        try:
            await self.calls.settle(key, result.model_dump(mode="json", by_alias=True, exclude_none=True))
        except StoreUnavailable:
            logger.warning(
                "gateway: a handed-over call's result could not be written: the database is unavailable"
            )

    async def task_call(self, caller: Caller, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """A task's call of a person another instance owns: handed to it as any such call is (`_hand_over`: their
        cards, taps, sessions and `[limits]` are there), its result awaited here, where the task runs. Cancelled
        (the task was cancelled, or its access ended), the call is left: not run if nobody claimed it yet, else
        ended by its instance as the agent's doing. The owner runs it as a call, not as this task: an approval
        it waits for does not outlive that instance's restart as the task's own would."""
        key = await self._send(caller, name, arguments, "a task's call")
        if not isinstance(key, str):
            return key
        return handed_back(await self._result(key))

    async def _send(
        self, caller: Caller, name: str, arguments: dict[str, Any], what: str
    ) -> str | types.CallToolResult:
        """The call handed over (`AgentCalls.send`): its key; or, the database down, the error for the agent."""
        try:
            key = await self.calls.send(
                AgentCall(caller.token_id, caller.user_id, caller.agent, name, arguments)
            )
        except StoreUnavailable:
            logger.warning("gateway: %s could not be handed to its person's instance: database down", what)
            return text_result(
                "toolnexus-bot: the call could not reach the bot instance serving this person (its database is "
                "unavailable); try again",
                error=True,
            )
        logger.info(
            "gateway: %s of agent %s of user %s handed to the instance that owns them",
            what,
            caller.agent,
            caller.user_id,
        )
        return key

    async def _result(self, key: str) -> Ended:
        """The handed-over call's end; cancelled meanwhile (the agent or its task went), the call is left."""
        try:
            return await self.calls.result(key)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self.leave(key, Outcome.AGENT_CANCELLED)
            raise

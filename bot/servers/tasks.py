"""Tool calls made as tasks (2025-11-25, SEP-1686): the call is answered with a task handle the bot polls.

A call to a tool whose `execution.taskSupport` is "optional" or "required", on a server that declares
`tasks.requests.tools.call`, is sent with `task` params; the server answers with a `CreateTaskResult` at once.
The bot polls `tasks/get` at the task's `pollInterval`, reports each new status message as the call's progress,
and once the task needs input (`input_required`) or has ended, asks `tasks/result`: the server's questions come
through that request's stream (as any 2025-era elicitation: the same cards), then its result. The request is
sent once, so a question a later poll still shows as `input_required` is not asked twice. A call that stops
before its task ended (/cancel, its clock, shutdown) sends `tasks/cancel`.

mcp 2.3.0 has the types but not the methods: it checks every `tools/call` result as a `CallToolResult` and
refuses a `CreateTaskResult` (its error carries the raw result, which is read back here, as `untagged_result`
does); `tasks/get`, `tasks/result` and `tasks/cancel` go through `ClientSession.send_request`. Its
`ClientExtension` result claims are keyed by a 2026-07-28 `resultType` and so cannot claim a 2025-11-25 task.

A person's task is kept in the store (`TaskBook`) until its result is shown: after a restart the next process
polls it again (`follow_task`); a process that leaves it (`leaving`) does not cancel it (docs/tasks.md).

Async, does I/O (MCP requests on a borrowed session).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client import ClientSession
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bot.core import Progress, ToolInfo

__all__ = ["created_task", "follow_task", "makes_task", "run_as_task"]

logger = logging.getLogger(__name__)

TASK_SUPPORT: Final = frozenset({"optional", "required"})
"""The tools' `execution.taskSupport` values that make a call a task."""
DEFAULT_POLL_S: Final = 1.0
"""How often a task is polled when its server suggests no interval."""
MIN_POLL_S: Final = 0.2
MAX_POLL_S: Final = 60.0
"""The server's interval, within these bounds (a server cannot make the bot poll in a busy loop, or never)."""
CANCEL_GRACE_S: Final = 5.0
"""How long a stopped call waits for its `tasks/cancel` to be answered."""
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})

StatusSink = Callable[[Progress], Awaitable[None]]
Created = Callable[[types.Task], Awaitable[None]]
"""Told of the task once its server made it (the call keeps it in the store)."""
Leaving = Callable[[], Awaitable[bool]]
"""Whether the process leaves the task to the next one (or to the person's new owner in a fleet): a call stopped
then does not cancel it. Asked shielded, for at most `CANCEL_GRACE_S` (unanswered: left)."""

_REQUEST_FAILED: Final = (
    MCPError,
    ValidationError,
    httpx2.TransportError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)
"""How a request on the task's session fails as an outcome (`classify` names each)."""


async def makes_task(client: Client, tool: str, listed: list[ToolInfo] | None) -> bool:
    """Whether a call to `tool` is made as a task: its server runs tool calls as tasks (2025-11-25
    `tasks.requests.tools.call`) and the tool allows or requires it. `listed` is the session's tool list when
    known (`Connection.tools`); else the server is asked (only a server that takes tasks)."""
    session = client.session
    if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return False
    caps = session.server_capabilities
    tasks = None if caps is None else caps.tasks
    requests = None if tasks is None else tasks.requests
    tools = None if requests is None else requests.tools
    if tools is None or tools.call is None:
        return False
    if listed is not None:
        return any(t.name == tool and t.task_support in TASK_SUPPORT for t in listed)
    cursor: str | None = None
    while True:
        page = await client.list_tools(cursor=cursor)
        for t in page.tools:
            if t.name == tool:
                return t.execution is not None and t.execution.task_support in TASK_SUPPORT
        cursor = page.next_cursor
        if not cursor:
            return False


async def _staying() -> bool:
    return False


def created_task(error: ValidationError) -> types.CreateTaskResult | None:
    """The `CreateTaskResult` a server answered a task-augmented `tools/call` with, which the SDK refused as a
    `CallToolResult` (its error carries the raw result); None when the error is about anything else."""
    for detail in error.errors():
        raw = detail.get("input")
        if detail["type"] == "missing" and isinstance(raw, dict) and "task" in raw and "content" not in raw:
            try:
                return types.CreateTaskResult.model_validate(raw, by_name=False)
            except ValidationError:
                return None
    return None


async def run_as_task(
    session: ClientSession,
    tool: str,
    arguments: dict[str, object] | None,
    on_status: StatusSink,
    meta: types.RequestParamsMeta | None = None,
    created: Created | None = None,
    leaving: Leaving = _staying,
) -> types.CallToolResult:
    """Call `tool` as a task and return its result once the task ended; raises as a request does (`classify`).

    A server that answers with the result itself (a tool whose task support is optional may) is answered so.
    """
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name=tool, arguments=arguments, task=types.TaskMetadata(), _meta=meta
        )
    )
    made: types.CreateTaskResult | None = None
    try:
        return await session.send_request(request, types.CallToolResult)
    except ValidationError as exc:
        made = created_task(exc)
        if made is None:
            raise
    if created is not None:
        await created(made.task)
    return await _follow(session, made.task, on_status, leaving)


async def follow_task(
    session: ClientSession, task_id: str, on_status: StatusSink, leaving: Leaving
) -> types.CallToolResult:
    """Poll a task made before (by the process before a restart) until it ended; its result."""
    task: types.Task = await _get(session, task_id)
    return await _follow(session, task, on_status, leaving)


async def _get(session: ClientSession, task_id: str) -> types.GetTaskResult:
    return await session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
    )


async def _follow(
    session: ClientSession, task: types.Task, on_status: StatusSink, leaving: Leaving
) -> types.CallToolResult:
    """Poll the task until it ended, its questions asked once (through `tasks/result`); its result."""
    task_id = task.task_id
    fetched: list[types.CallToolResult] = []
    failure: list[BaseException] = []
    ended = anyio.Event()
    fetching = False
    done = False
    reported: tuple[str, str | None] | None = None
    steps = 0

    async def fetch() -> None:
        try:
            fetched.append(
                await session.send_request(
                    types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id)),
                    types.CallToolResult,
                )
            )
        except _REQUEST_FAILED as exc:
            failure.append(exc)  # the call's outcome names it
        finally:
            ended.set()

    try:
        async with anyio.create_task_group() as tg:
            while not ended.is_set():
                if (task.status, task.status_message) != reported:
                    reported = (task.status, task.status_message)
                    steps += 1
                    await on_status(
                        Progress(steps, None, task.status_message or task.status.replace("_", " "))
                    )
                if (task.status in TERMINAL or task.status == "input_required") and not fetching:
                    fetching = True  # the server's questions, then its result, come through this one request
                    tg.start_soon(fetch)
                if task.status in TERMINAL:
                    break  # the result request is awaited as the group ends
                with anyio.move_on_after(_interval(task)):
                    await ended.wait()  # a result that comes meanwhile ends the wait
                if ended.is_set():
                    break
                try:
                    task = await _get(session, task_id)
                except _REQUEST_FAILED as exc:
                    failure.append(exc)
                    tg.cancel_scope.cancel()
                    break
        done = True
    finally:
        if not done:
            left = True  # unsure whether the process may still act for the person: the task is not cancelled
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
                left = await leaving()
            if not left:
                await _cancel(session, task_id)
    if failure:
        raise failure[0]
    return fetched[0]


def _interval(task: types.Task) -> float:
    if task.poll_interval is None:
        return DEFAULT_POLL_S
    return min(MAX_POLL_S, max(MIN_POLL_S, task.poll_interval / 1000))


async def _cancel(session: ClientSession, task_id: str) -> None:
    """`tasks/cancel` for a task whose call stopped before it ended; a server that cannot is logged."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
        try:
            await session.send_request(
                types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
                types.CancelTaskResult,
            )
        except _REQUEST_FAILED as exc:
            logger.info("tasks/cancel for a stopped call failed: %s", exc)

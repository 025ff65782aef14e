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

**2026-07-28** (the tasks extension `io.modelcontextprotocol/tasks`, SEP-2663): the bot declares the extension
(`TasksExtension`, given to every `Client`); a server that offers it decides on its own which calls become tasks,
answering `tools/call` with a flat `CreateTaskResult` (`resultType: "task"`) instead of the result. The bot polls
`tasks/get` at the task's `pollIntervalMs` (bounded as above): its `statusMessage` is the call's progress; its
`input_required` `inputRequests` are asked each once through the same path as a 2026-07-28 round's questions
(`Ask`: `bot.servers.rounds`), each answer sent at once with `tasks/update`; once it ended, its inlined `result`
is the call's result (its inlined `error` the call's failure). A call that stops before its task ended sends
`tasks/cancel`. The SDK's `ResultClaim` is what makes the SDK parse a `resultType: "task"` result at all (an
unclaimed tag fails its validation), but its resolver must turn the task into a `CallToolResult` in one go, out
of the bot's sight: the task id would never reach the store, and the questions would have no person to go to. So
the claim's resolver only serves a plain SDK `Client.call_tool` (it polls, and refuses questions); the bot calls
`ClientSession.call_tool(allow_claimed=True)`, the SDK's public seam for it, gets the `CreatedTask` back, keeps
it, and follows it itself (`follow_modern_task`).

Async, does I/O (MCP requests on a borrowed session).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client, MCPError
from mcp.client import ClientSession
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bot.core import Progress, ToolInfo

__all__ = [
    "EXTENSION",
    "Ask",
    "CreatedTask",
    "DetailedTask",
    "TasksExtension",
    "created_task",
    "follow_modern_task",
    "follow_task",
    "makes_task",
    "run_as_task",
]

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
Ask = Callable[[types.InputRequest], Awaitable[types.InputResponse | types.ErrorData]]
"""Asks one of a 2026-07-28 task's input requests (its person's answer, or why it cannot be asked)."""

EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension (SEP-2663)."""
Status = Literal["working", "input_required", "completed", "failed", "cancelled"]


class CreatedTask(types.Result):
    """A 2026-07-28 `CreateTaskResult`: the task (flat, no `task` wrapper) a server answered `tools/call` with."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: Status
    status_message: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """A 2026-07-28 `tasks/get` result: the task, with its result, error or input requests inlined."""

    task_id: str
    status: Status
    status_message: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: types.InputRequests | None = None
    result: types.CallToolResult | None = None
    error: types.ErrorData | None = None


class _TaskParams(types.RequestParams):
    task_id: str


class _UpdateParams(_TaskParams):
    input_responses: types.InputResponses


class _GetTask(types.Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class _UpdateTask(types.Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class _CancelTask(types.Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class TasksExtension(ClientExtension):
    """The bot's declaration of the 2026-07-28 tasks extension, with the claim that lets the SDK parse a
    `resultType: "task"` result. The bot itself takes the claimed `CreatedTask` back (`allow_claimed=True`) and
    follows it (`follow_modern_task`); the resolver serves only a plain `Client.call_tool`."""

    identifier = EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=_resolve),)


async def _resolve(created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
    async def refuse(request: types.InputRequest) -> types.ErrorData:
        return types.ErrorData(code=types.INVALID_REQUEST, message=f"no one to answer {request.method}")

    async def ignore(status: Progress) -> None:
        return None

    return await follow_modern_task(ctx.session, created, ignore, _staying, refuse)


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
    session: ClientSession, task_id: str, on_status: StatusSink, leaving: Leaving, ask: Ask | None = None
) -> types.CallToolResult:
    """Poll a task made before (by the process before a restart) until it ended; its result. Either era: a
    2026-07-28 session's task is polled as the extension's, its input requests asked through `ask` (without
    one, refused)."""
    if session.protocol_version in MODERN_PROTOCOL_VERSIONS:

        async def refuse(request: types.InputRequest) -> types.ErrorData:
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"no one to answer {request.method}")

        detailed = await _get_modern(session, task_id)
        return await follow_modern_task(session, detailed, on_status, leaving, ask or refuse)
    task: types.Task = await _get(session, task_id)
    return await _follow(session, task, on_status, leaving)


async def _get_modern(session: ClientSession, task_id: str) -> DetailedTask:
    return await session.send_request(_GetTask(params=_TaskParams(task_id=task_id)), DetailedTask)


async def follow_modern_task(
    session: ClientSession,
    task: CreatedTask | DetailedTask,
    on_status: StatusSink,
    leaving: Leaving,
    ask: Ask,
) -> types.CallToolResult:
    """Poll a 2026-07-28 task until it ended; its result. Raises as a request does (`classify`): a failed task
    as its inlined error, a task cancelled elsewhere as an `MCPError` saying so.

    Each input request (by its key) is asked once: a key a later poll still shows, its card out or its answer
    sent, is not asked again. Each answer goes back at once with `tasks/update`, unless the process is leaving
    (the next one polls the task and asks again). A task that ends with cards still out withdraws them.
    """
    task_id = task.task_id
    asked: set[str] = set()
    failure: list[BaseException] = []
    answered = anyio.Event()
    reported: tuple[str, str | None] | None = None
    steps = 0
    done = False
    detailed: DetailedTask | None = task if isinstance(task, DetailedTask) else None

    async def answer(key: str, request: types.InputRequest, tg: anyio.abc.TaskGroup) -> None:
        nonlocal answered
        got = await ask(request)
        if await _left(leaving):
            return  # the next process polls the task and asks again
        try:
            if isinstance(got, types.ErrorData):
                raise MCPError.from_error_data(got)
            await session.send_request(
                _UpdateTask(params=_UpdateParams(task_id=task_id, input_responses={key: got})),
                types.EmptyResult,  # an empty `{resultType: "complete"}` ack
            )
        except _REQUEST_FAILED as exc:
            failure.append(exc)  # the call's outcome names it
            tg.cancel_scope.cancel()
            return
        answered.set()  # poll again at once: the task goes on

    try:
        async with anyio.create_task_group() as tg:
            while True:
                if (task.status, task.status_message) != reported:
                    reported = (task.status, task.status_message)
                    steps += 1
                    await on_status(
                        Progress(steps, None, task.status_message or task.status.replace("_", " "))
                    )
                if task.status in TERMINAL and detailed is not None:  # a poll carries its outcome
                    tg.cancel_scope.cancel()  # questions still out are withdrawn
                    break
                if detailed is not None and task.status == "input_required":
                    for key, request in (detailed.input_requests or {}).items():
                        if key not in asked:
                            asked.add(key)
                            tg.start_soon(answer, key, request, tg)
                with anyio.move_on_after(
                    0 if task.status in TERMINAL else _interval_ms(task.poll_interval_ms)
                ):
                    await answered.wait()
                answered = anyio.Event()
                try:
                    detailed = await _get_modern(session, task_id)
                except _REQUEST_FAILED as exc:
                    failure.append(exc)
                    tg.cancel_scope.cancel()
                    break
                task = detailed
        done = not failure
    finally:
        if not done and not await _left(leaving):
            await _cancel(session, task_id, modern=True)
    if failure:
        raise failure[0]
    return _outcome(detailed)


def _outcome(task: DetailedTask | None) -> types.CallToolResult:
    """An ended 2026-07-28 task's result: its inlined result, or its failure raised."""
    assert task is not None  # the loop ends on a poll
    if task.status == "completed" and task.result is not None:
        return task.result
    if task.status == "failed" and task.error is not None:
        raise MCPError(task.error.code, f"the task failed: {task.error.message}", task.error.data)
    if task.status == "cancelled":
        raise MCPError(types.INTERNAL_ERROR, "the task was cancelled by the server")
    raise MCPError(types.INTERNAL_ERROR, f"the task ended {task.status} with nothing to show")


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
        if not done and not await _left(leaving):
            await _cancel(session, task_id)
    if failure:
        raise failure[0]
    return fetched[0]


async def _left(leaving: Leaving) -> bool:
    """Whether the process leaves the task (`leaving`), asked shielded and for at most `CANCEL_GRACE_S`: unsure
    whether it may still act for the person, it leaves the task (does not cancel it)."""
    left = True
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
        left = await leaving()
    return left


def _interval(task: types.Task) -> float:
    return _interval_ms(task.poll_interval)


def _interval_ms(poll_ms: int | None) -> float:
    if poll_ms is None:
        return DEFAULT_POLL_S
    return min(MAX_POLL_S, max(MIN_POLL_S, poll_ms / 1000))


async def _cancel(session: ClientSession, task_id: str, *, modern: bool = False) -> None:
    """`tasks/cancel` for a task whose call stopped before it ended; a server that cannot is logged."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE_S):
        try:
            if modern:
                await session.send_request(
                    _CancelTask(params=_TaskParams(task_id=task_id)), types.EmptyResult
                )
            else:
                await session.send_request(
                    types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id)),
                    types.CancelTaskResult,
                )
        except _REQUEST_FAILED as exc:
            logger.info("tasks/cancel for a stopped call failed: %s", exc)

"""Agents' calls as tasks (MCP 2025-11-25 tasks, SEP-1686): the gateway's side. Does I/O (the store).

An agent's `tools/call` carrying `task` is answered at once with a task (`CreateTaskResult`); the call runs on in the
gateway, and its result is kept in the store (`bot.store.gateway_tasks`), where any process on the database reads
it for `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel`: only for the agent token that made it. A call
that waits for approvers keeps its task's id with its approval request (`Origin.task`): if the process ends before
the approvers decide, the request stays in the store, and whoever carries the approval out later (after a restart,
or a takeover) runs the call and keeps its result for the task (`GatewayTaskStore.settle`), so the agent's poll gets it.

Where the SDK falls short: its low-level `Server` has no task support, and its per-version result sieve validates every 2025-11-25 `tools/call` result as a `CallToolResult`, so a
`CreateTaskResult` cannot come from the `tools/call` handler. The task is made in a `Server.middleware`
(`TaskMiddleware`), which the runner trusts with its own result; `tasks/*` are served with `add_request_handler`
(they are not among the SDK's spec methods); the `tasks` capability is added by overriding `get_capabilities`.
The SEP-2133 `Extension` interface does not fit: it belongs to `MCPServer` (the low-level `Server` only
advertises extension settings), and its `intercept_tool_call` result is sieved like the handler's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

from bot.store.gateway_tasks import GatewayTask, GatewayTaskStore, TaskState

__all__ = [
    "DEFAULT_TTL_MS",
    "MAX_TTL_MS",
    "POLL_MS",
    "TaskMiddleware",
    "TaskingServer",
    "task_handlers",
]

DEFAULT_TTL_MS: Final = 24 * 3600 * 1000
"""How long a task is kept when the agent asks for no `ttl` (its approvers may take a day)."""
MAX_TTL_MS: Final = 7 * 24 * 3600 * 1000
"""The longest a task is kept, whatever the agent asks."""
POLL_MS: Final = 2000
"""The poll interval the gateway suggests (`pollInterval`)."""
RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
LEGACY: Final = "2025-11-25"
"""The protocol version whose tasks the gateway serves."""


def _iso(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).isoformat().replace("+00:00", "Z")


def task_of(task: GatewayTask) -> types.Task:
    return types.Task(
        task_id=task.id,
        status=task.state.value,
        status_message=task.message,
        created_at=_iso(task.created),
        last_updated_at=_iso(task.updated),
        ttl=task.ttl_ms,
        poll_interval=POLL_MS,
    )


def ttl_of(asked: types.TaskMetadata) -> int:
    """The task's time to live: as the agent asked, within `MAX_TTL_MS`."""
    return DEFAULT_TTL_MS if asked.ttl is None else max(1, min(asked.ttl, MAX_TTL_MS))


def _legacy(ctx: ServerRequestContext[Any, Any]) -> None:
    """`tasks/*` as 2025-11-25 has them; at 2026-07-28 they are the tasks extension's (not served here): the
    method is not found, as for a server without tasks."""
    if ctx.protocol_version != LEGACY:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)


def _not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


class TaskingServer(Server[Any]):
    """The SDK's low-level `Server`, declaring the 2025-11-25 `tasks` capability (list, cancel, `tools/call`) in the
    handshake; not at 2026-07-28 (`server/discover`), where tasks are an extension's, not served here."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") not in (None, LEGACY):
            return capabilities
        tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks})


Start = Callable[[ServerRequestContext[Any, Any], types.CallToolRequestParams, int], Awaitable[GatewayTask]]
"""Start a task-augmented call (its params, its time to live): the task, kept, its call running."""


class TaskMiddleware:
    """`Server.middleware`: a 2025-11-25 `tools/call` carrying `task` is answered with the task `start` made,
    instead of reaching the `tools/call` handler (whose result the SDK would sieve as a `CallToolResult`)."""

    def __init__(self, start: Start) -> None:
        self.start = start

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        raw = ctx.params
        if ctx.method != "tools/call" or ctx.protocol_version != LEGACY or not raw or raw.get("task") is None:
            return await call_next(ctx)
        params = types.CallToolRequestParams.model_validate(raw, by_name=False)
        assert params.task is not None
        task = await self.start(ctx, params, ttl_of(params.task))
        return types.CreateTaskResult(task=task_of(task))


Reader = Callable[[], int]
"""The agent token of the request being handled."""


def task_handlers(
    tasks: GatewayTaskStore, token: Reader, cancel: Callable[[GatewayTask], Awaitable[None]]
) -> dict[str, tuple[type[Any], Any]]:
    """`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel` over the store, for the token `token` reads (a
    task of another token is not found). `cancel` ends a task's call where it runs here."""

    async def get(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> types.GetTaskResult:
        _legacy(ctx)
        task = await tasks.get(params.task_id, token())
        if task is None:
            raise _not_found()
        return types.GetTaskResult(**task_of(task).model_dump())

    async def result(
        ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """The call's result once the task is terminal: this request waits until then (the spec's blocking
        `tasks/result`), reading the store every poll interval."""
        _legacy(ctx)
        while True:
            task = await tasks.get(params.task_id, token())
            if task is None:
                raise _not_found()
            if task.state.terminal:
                break
            await anyio.sleep(POLL_MS / 1000)
        related = {RELATED_TASK: {"taskId": task.id}}
        if task.result is not None:
            body = dict(task.result)
            body["_meta"] = {**(body.get("_meta") or {}), **related}
            return body
        line = task.message or f"the task ended: {task.state.value}"
        return {"content": [{"type": "text", "text": line}], "isError": True, "_meta": related}

    async def list_tasks(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> types.ListTasksResult:
        _legacy(ctx)
        return types.ListTasksResult(tasks=[task_of(task) for task in await tasks.of_token(token())])

    async def cancel_task(
        ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> types.CancelTaskResult:
        _legacy(ctx)
        task = await tasks.get(params.task_id, token())
        if task is None:
            raise _not_found()
        if task.state.terminal:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Cannot cancel task: already in terminal status '{task.state.value}'",
            )
        await tasks.finish(task.id, TaskState.CANCELLED, message="cancelled by the agent")
        await cancel(task)
        settled = await tasks.get(task.id, token())
        return types.CancelTaskResult(**task_of(settled or task).model_dump())

    return {
        "tasks/get": (types.GetTaskRequestParams, get),
        "tasks/result": (types.GetTaskPayloadRequestParams, result),
        "tasks/list": (types.PaginatedRequestParams, list_tasks),
        "tasks/cancel": (types.CancelTaskRequestParams, cancel_task),
    }

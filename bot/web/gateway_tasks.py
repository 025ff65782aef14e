"""Agents' calls as tasks: the gateway's side of the 2025-11-25 tasks (SEP-1686) and of the 2026-07-28 tasks
extension (`io.modelcontextprotocol/tasks`, SEP-2663). Does I/O (the store).

Both eras keep a task in the store (`bot.store.gateway_tasks`), where any process on the database reads it, only for
the agent token that made it. A call that waits for approvers keeps its task's id with its approval request
(`Origin.task`): if the process ends before the approvers decide, the request stays in the store, and whoever carries
the approval out later (after a restart, or a takeover) runs the call and keeps its result for the task
(`GatewayTaskStore.settle`), so the agent's poll gets it.

2025-11-25 (client-directed): an agent's `tools/call` carrying `task` is answered at once with a task
(`CreateTaskResult`, the task nested); `tasks/get`, `tasks/result`, `tasks/list` and `tasks/cancel` read it.

2026-07-28 (server-directed, for an agent that declares the extension, per request in
`_meta["io.modelcontextprotocol/clientCapabilities"].extensions`): the gateway decides which calls are tasks
(`TaskRule`): a call becomes a task when the server's tool declares `execution.taskSupport` "optional" or
"required", or when it will wait for people (an `[[approvals]]` rule gates it; `ask_person`; `permission_prompt`);
every other call is answered as it runs. The answer is a flat `CreateTaskResult` (`resultType: "task"`, the task's
fields at the top, `ttlMs`, `pollIntervalMs`). `tasks/get` is the `DetailedTask`: a completed task inlines the
call's `result` (a tool's own error is `completed` with `result.isError`), a failed one its `error` (the call broke
at the protocol level: the server's JSON-RPC error, the server unreachable, no result in time). `tasks/cancel` and
`tasks/update` answer an empty ack. The gateway never hands a server's question to the agent (it goes to the
person's phone), so a task is never `input_required` and `tasks/update` has nothing to deliver. An agent that did
not declare the extension gets the call's result as it runs, except for a tool that requires a task (-32021, the
missing capability named), and -32021 for `tasks/get`, `tasks/update`, `tasks/cancel`. `tasks/list` and
`tasks/result` are not the extension's: at 2026-07-28 they are not found (-32601). `tasks/*` at 2026-07-28 carry
`Mcp-Name: <taskId>` (SEP-2243 as SEP-2663 extends it): a missing or different one is refused (-32020).

Where the SDK falls short: its low-level `Server` has no task support and does not apply an `Extension` (only
`MCPServer(extensions=...)` does), and its per-version result sieve validates every 2025-11-25 `tools/call` result
as a `CallToolResult`. So the 2025-11-25 task is made in a `Server.middleware` (`TaskMiddleware`), which the runner
trusts with its own result; the 2026-07-28 side is an `Extension` (`TasksExtension`: its `methods()` and its
`intercept_tool_call`, whose 2026-07-28 `resultType: "task"` the sieve leaves to the extension) that
`install` applies to the low-level `Server` through its public surface as `MCPServer` would: the handlers with
`add_request_handler` (`tasks/get` and `tasks/cancel` are one method in both eras, so one handler picks the era's:
the handler table is keyed by method alone), the interceptor with `compose_tool_call_handler`, and the
advertisement in `Server.extensions`, which `TaskingServer.get_capabilities` shows at 2026-07-28 only (the
2025-11-25 handshake declares `capabilities.tasks` instead). The SDK checks `Mcp-Name` only for its own
name-bearing methods, so the `tasks/*` one is checked here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding, compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.server.mcpserver import require_client_extension
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field
from starlette.requests import Request

from bot.core import CallStatus
from bot.store.gateway_tasks import GatewayTask, GatewayTaskStore, TaskState

__all__ = [
    "DEFAULT_TTL_MS",
    "EXTENSION",
    "FAILS",
    "MAX_TTL_MS",
    "POLL_MS",
    "TaskMiddleware",
    "TaskRule",
    "TaskingServer",
    "TasksExtension",
    "install",
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
"""The protocol version of the client-directed tasks (SEP-1686)."""
EXTENSION: Final = "io.modelcontextprotocol/tasks"
"""The 2026-07-28 tasks extension (SEP-2663)."""
MODERN: Final = frozenset(MODERN_PROTOCOL_VERSIONS)
"""The protocol versions whose tasks are the extension's."""
FAILS: Final = frozenset({CallStatus.FAILED, CallStatus.UNAVAILABLE, CallStatus.TIMED_OUT})
"""How a call ends that makes its 2026-07-28 task `failed` (an inlined `error`), not `completed`: it broke at the
protocol level (the server's JSON-RPC error, the server unreachable or gone, no result in time). A tool's own error,
a refusal (approvers said no, a limit) and the gateway's own lines are results (`completed`, `isError`)."""


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
    """`tasks/*` as 2025-11-25 has them; at 2026-07-28 `tasks/list` and `tasks/result` are not the extension's:
    the method is not found."""
    if ctx.protocol_version != LEGACY:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)


def _not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


class TaskingServer(Server[Any]):
    """The SDK's low-level `Server`, declaring the 2025-11-25 `tasks` capability (list, cancel, `tools/call`) in the
    handshake; at 2026-07-28 (`server/discover`) its extensions instead (`Server.extensions`: `install` puts the
    tasks extension there), never a `capabilities.tasks` slot."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN:
            return capabilities
        tasks = types.ServerTasksCapability(
            list=types.TasksListCapability(),
            cancel=types.TasksCancelCapability(),
            requests=types.ServerTasksRequestsCapability(
                tools=types.TasksToolsCapability(call=types.TasksCallCapability())
            ),
        )
        return capabilities.model_copy(update={"tasks": tasks, "extensions": None})


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


# -- 2026-07-28: the tasks extension (SEP-2663) -------------------------------------------------------------

Support = Literal["optional", "required"]
TaskRule = Callable[[types.CallToolRequestParams], Awaitable[Support | None]]
"""Whether a call is a task at 2026-07-28: "required" (the server's tool requires it), "optional" (it may be, and is
for an agent that declared the extension), None (answered as it runs)."""
Cancel = Callable[[GatewayTask], Awaitable[None]]
"""Ends a task's call where it runs in this process."""


class UpdateTaskRequestParams(types.RequestParams):
    """`tasks/update`: the answers to a task's `inputRequests` (a gateway task never has any)."""

    task_id: str
    input_responses: dict[str, Any] = Field(default_factory=lambda: {})


def _task_fields(task: GatewayTask) -> dict[str, Any]:
    """The extension's `Task`: flat, `ttlMs` and `pollIntervalMs` in integer milliseconds."""
    fields: dict[str, Any] = {
        "taskId": task.id,
        "status": task.state.value,
        "createdAt": _iso(task.created),
        "lastUpdatedAt": _iso(task.updated),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": POLL_MS,
    }
    if task.message is not None:
        fields["statusMessage"] = task.message
    return fields


def created(task: GatewayTask) -> dict[str, Any]:
    """A 2026-07-28 `CreateTaskResult`: `resultType: "task"` and the task's own fields (no nested `task`)."""
    return {"resultType": "task", **_task_fields(task)}


def detailed(task: GatewayTask) -> dict[str, Any]:
    """A 2026-07-28 `DetailedTask` (`tasks/get`): a completed task's `result` (the `CallToolResult`, as kept: no
    related-task `_meta`), a failed one's `error` (JSON-RPC shaped)."""
    body = _task_fields(task)
    if task.state is TaskState.COMPLETED and task.result is not None:
        body["result"] = task.result
    elif task.state is TaskState.FAILED:
        body["error"] = {"code": INTERNAL_ERROR, "message": task.message or "the task failed"}
    return body


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the agent declared the tasks extension (at 2026-07-28: in this request's envelope)."""
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and EXTENSION in (capabilities.extensions or {})


def _routed(ctx: ServerRequestContext[Any, Any], task_id: str) -> None:
    """SEP-2243 as SEP-2663 extends it: a `tasks/*` request over HTTP carries `Mcp-Name: <taskId>`; a missing or
    different one is a header mismatch (-32020, HTTP 400), as the SDK answers one of its own name-bearing methods."""
    request = ctx.request
    if not isinstance(request, Request):
        return  # not over HTTP: no headers
    if decode_header_value(request.headers.get(MCP_NAME_HEADER)) != task_id:
        raise MCPError(
            code=HEADER_MISMATCH,
            message=f"{MCP_NAME_HEADER} header does not match the request body's 'taskId'",
        )


class TasksExtension(Extension):
    """The 2026-07-28 tasks extension, over the gateway's store: `tasks/get`, `tasks/update`, `tasks/cancel` for the
    token `token` reads (a task of another token is not found), and `tools/call` intercepted: a call `rule` makes a
    task is answered with the task `start` made. `cancel` ends a task's call where it runs here."""

    identifier = EXTENSION

    def __init__(
        self, tasks: GatewayTaskStore, token: Reader, start: Start, rule: TaskRule, cancel: Cancel
    ) -> None:
        self.tasks = tasks
        self.token = token
        self.start = start
        self.rule = rule
        self.cancel = cancel

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", types.GetTaskRequestParams, self._get, MODERN),
            MethodBinding("tasks/update", UpdateTaskRequestParams, self._update, MODERN),
            MethodBinding("tasks/cancel", types.CancelTaskRequestParams, self._cancel, MODERN),
        )

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """At 2026-07-28: a call the rule makes a task is one for an agent that declared the extension; for one
        that did not it runs as a plain call, unless its tool requires a task (-32021). A 2025-11-25 `task` param
        makes no task here (the rule alone decides)."""
        if ctx.protocol_version not in MODERN:
            return await call_next(ctx)
        support = await self.rule(params)
        if support is None:
            return await call_next(ctx)
        if not _declared(ctx):
            if support == "required":
                require_client_extension(ctx, EXTENSION)
            return await call_next(ctx)
        return created(await self.start(ctx, params, DEFAULT_TTL_MS))

    async def _known(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> GatewayTask:
        """The token's task named by a `tasks/*` request, its routing header and the extension checked first."""
        _routed(ctx, task_id)
        require_client_extension(ctx, EXTENSION)
        task = await self.tasks.get(task_id, self.token())
        if task is None:
            raise _not_found()
        return task

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        return detailed(await self._known(ctx, params.task_id))

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskRequestParams
    ) -> dict[str, Any]:
        """An empty ack: a gateway task never waits for the agent's input (a server's questions go to the person's
        phone), so there is nothing to deliver."""
        await self._known(ctx, params.task_id)
        return {}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        """An empty ack; a working task is `cancelled` and its call ended (its approval request for everyone); a
        terminal one stays as it is (the same ack: cancelling is idempotent)."""
        task = await self._known(ctx, params.task_id)
        if not task.state.terminal:
            await self.tasks.finish(task.id, TaskState.CANCELLED, message="cancelled by the agent")
            await self.cancel(task)
        return {}


def install(
    server: Server[Any],
    extension: Extension,
    legacy: dict[str, tuple[type[Any], Any]],
    call_tool: Callable[
        [ServerRequestContext[Any, Any], types.CallToolRequestParams], Awaitable[HandlerResult]
    ],
) -> None:
    """Apply `extension` to the low-level `server` as `MCPServer(extensions=...)` would, through its public surface:
    advertised in `Server.extensions`, its methods served at their protocol versions, `call_tool` (the `tools/call`
    handler) wrapped in its interceptor. `legacy` are the handlers of other versions (`task_handlers`); a method in
    both is one handler that picks the era's (the handler table is keyed by method alone)."""
    server.extensions[extension.identifier] = extension.settings()
    others = dict(legacy)
    for binding in extension.methods():
        other = others.pop(binding.method, None)
        server.add_request_handler(binding.method, binding.params_type, _by_era(binding, other))
    for method, (params_type, handler) in others.items():
        server.add_request_handler(method, params_type, handler)
    server.add_request_handler(
        "tools/call", types.CallToolRequestParams, compose_tool_call_handler([extension], call_tool)
    )


def _by_era(binding: MethodBinding, other: tuple[type[Any], Any] | None) -> Any:
    """`binding`'s handler at its versions, `other`'s (if any) at the rest; not found where neither serves."""
    versions = binding.protocol_versions

    async def handle(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        if versions is None or ctx.protocol_version in versions:
            return await binding.handler(ctx, params)
        if other is None:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=binding.method)
        handler: Callable[[ServerRequestContext[Any, Any], Any], Awaitable[HandlerResult]] = other[1]
        return await handler(ctx, params)

    return handle

"""Questions a server sends as tasks (2025-11-25 experimental tasks, SEP-1686): the bot as the receiver. Does I/O.

A server that sees `tasks.requests.elicitation.create` among the client's capabilities may send its
`elicitation/create` with a `task` field: the client answers at once with a task (`CreateTaskResult`) and the
server polls it with `tasks/get`, fetches the answer with `tasks/result`, or ends it with `tasks/cancel`.

The MCP SDK (mcp 2.3.0) leaves the 2025-11-25 tasks out on purpose: `ClientSession` builds its capabilities with
no `tasks`, parses no server-sent `tasks/*` request (they get "Method not found"), and accepts only an
`ElicitResult` from the elicitation callback. So this sits on the session's transport streams, the SDK's public
seam for a transport: it adds the capability to `initialize`, answers the `tasks/*` requests itself, and hands
the question on to the SDK as a plain `elicitation/create` under a request id of its own (with the task named
in `_meta`, `io.modelcontextprotocol/related-task`): the bot's usual path shows the card (a `Request`), and the
SDK's answer to that id, caught on the way out, becomes the task's result. `tasks/cancel` becomes the SDK's own
`notifications/cancelled` for that id, which ends the card as a server's withdrawn question.

Tasks live as long as the session (a stdio server dies with the bot anyway; see docs/tasks.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from bot.servers.streams import ReadProxy, StreamProxy

logger = logging.getLogger(__name__)

RELATED_TASK: Final = "io.modelcontextprotocol/related-task"
"""The `_meta` key that ties a message to a task (2025-11-25)."""
POLL_INTERVAL_MS: Final = 1000
"""The poll interval the bot suggests to the server (a person answers in seconds at best)."""
DEFAULT_TTL_MS: Final = 3_600_000
"""How long a finished question's task is kept when the server asked for no TTL (an hour)."""
CAPABILITY: Final[dict[str, Any]] = {"requests": {"elicitation": {"create": {}}}, "cancel": {}}
"""What the bot declares under `capabilities.tasks` at `initialize`: task-augmented elicitations, and
`tasks/cancel` (no `tasks/list`: a server polls the tasks it was given)."""

Status = types.TaskStatus
TERMINAL: Final[frozenset[Status]] = frozenset({"completed", "failed", "cancelled"})


def related_task(meta: Mapping[str, Any] | None) -> str | None:
    """The task a question the bot was handed belongs to (its `_meta`), if any."""
    related = (meta or {}).get(RELATED_TASK)
    task_id = related.get("taskId") if isinstance(related, dict) else None
    return task_id if isinstance(task_id, str) else None


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@dataclass(eq=False, slots=True)
class QuestionTask:
    """One question a server sent as a task, as the bot keeps it while the session lives."""

    task_id: str
    forward_id: str
    """The request id under which the question went on to the SDK (its answer comes back under it)."""
    created: datetime
    ttl_ms: int | None
    status: Status = "working"
    status_message: str | None = None
    updated: datetime | None = None
    outcome: dict[str, Any] | None = None
    """The SDK's answer: `{"result": ElicitResult}` or `{"error": ErrorData}`."""
    done: anyio.Event = field(default_factory=anyio.Event)

    def wire(self) -> dict[str, Any]:
        """The task as `tasks/get` (and `tasks/cancel`, `CreateTaskResult.task`) shows it."""
        task = types.Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.status_message,
            created_at=_iso(self.created),
            last_updated_at=_iso(self.updated or self.created),
            ttl=self.ttl_ms,
            poll_interval=POLL_INTERVAL_MS,
        )
        return task.model_dump(by_alias=True, mode="json", exclude_none=True) | {"ttl": self.ttl_ms}


class QuestionTasks:
    """The questions one session's server sent as tasks: wraps that session's transport (`streams`)."""

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        self._tasks: dict[str, QuestionTask] = {}
        self._forwarded: dict[str, QuestionTask] = {}

    def get(self, task_id: str) -> QuestionTask | None:
        return self._tasks.get(task_id)

    def mark(self, task_id: str | None, status: Status, message: str | None = None) -> None:
        """The bot's own progress on a question (the card shown: `input_required`; answered: `working`)."""
        task = self._tasks.get(task_id) if task_id is not None else None
        if task is not None and task.status not in TERMINAL:
            self._set(task, status, message)

    @asynccontextmanager
    async def streams(self, transport: Any) -> AsyncIterator[tuple[Any, Any]]:
        """The transport's (read, write) streams as the SDK should see them."""
        async with transport as (read, write), anyio.create_task_group() as tg:
            yield _Read(read, write, self, tg), _Write(write, self)
            tg.cancel_scope.cancel()

    # -- from the server --------------------------------------------------------------------------------------

    async def intercept(
        self, request: JSONRPCRequest, write: Any, tg: anyio.abc.TaskGroup
    ) -> SessionMessage | None:
        """A request from the server: what to hand the SDK instead (None: answered here)."""
        params = request.params or {}
        if request.method == "elicitation/create":
            return await self._create(request, params, write)
        task = self._tasks.get(str(params.get("taskId")))
        if task is None or self._expired(task):
            await _error(write, request.id, types.INVALID_PARAMS, "Failed to retrieve task: Task not found")
            return None
        if request.method == "tasks/get":
            await _reply(write, request.id, task.wire())
        elif request.method == "tasks/result":
            tg.start_soon(self._result_when_done, task, request.id, write)
        else:  # tasks/cancel
            return await self._cancel(task, request.id, write)
        return None

    async def _create(self, request: JSONRPCRequest, params: dict[str, Any], write: Any) -> SessionMessage:
        self._sweep()
        asked = params["task"] if isinstance(params["task"], dict) else {}
        ttl = asked.get("ttl")
        task = QuestionTask(
            task_id=str(uuid.uuid4()),
            forward_id=f"task-question-{uuid.uuid4()}",
            created=self._now(),
            ttl_ms=ttl if isinstance(ttl, int) and ttl > 0 else DEFAULT_TTL_MS,
        )
        self._tasks[task.task_id] = task
        self._forwarded[task.forward_id] = task
        await _reply(write, request.id, {"task": task.wire()})
        meta = dict(params.get("_meta") or {}) | {RELATED_TASK: {"taskId": task.task_id}}
        plain = {key: value for key, value in params.items() if key != "task"} | {"_meta": meta}
        return SessionMessage(
            JSONRPCRequest(jsonrpc="2.0", id=task.forward_id, method=request.method, params=plain)
        )

    async def _result_when_done(self, task: QuestionTask, request_id: types.RequestId, write: Any) -> None:
        """`tasks/result` waits for the answer (the spec's blocking fetch), then sends it or its error (unless
        the session ended meanwhile: then nobody is left to send it to)."""
        await task.done.wait()
        outcome = task.outcome or {}
        try:
            if "result" in outcome:
                meta = dict(outcome["result"].get("_meta") or {}) | {RELATED_TASK: {"taskId": task.task_id}}
                await _reply(write, request_id, outcome["result"] | {"_meta": meta})
            elif "error" in outcome:
                error = outcome["error"]
                code = error.get("code", types.INTERNAL_ERROR)
                await _error(write, request_id, code, error.get("message", ""))
            else:
                message = f"Task {task.task_id} was cancelled: no result"
                await _error(write, request_id, types.INVALID_PARAMS, message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            logger.debug("tasks/result for %s: the session ended before the answer", task.task_id)

    async def _cancel(
        self, task: QuestionTask, request_id: types.RequestId, write: Any
    ) -> SessionMessage | None:
        if task.status in TERMINAL:
            await _error(
                write,
                request_id,
                types.INVALID_PARAMS,
                f"Cannot cancel task in terminal status: {task.status}",
            )
            return None
        self._set(task, "cancelled", "cancelled by the server")
        task.done.set()
        await _reply(write, request_id, task.wire())
        # The SDK's own cancel for the question it holds: its callback is cancelled and the card says so.
        cancel = {"requestId": task.forward_id, "reason": "the server cancelled the task"}
        return SessionMessage(
            JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=cancel)
        )

    # -- from the SDK -----------------------------------------------------------------------------------------

    def answered(self, message: JSONRPCResponse | JSONRPCError) -> bool:
        """The SDK's answer to a forwarded question: kept as the task's result (True: not for the server)."""
        task = self._forwarded.pop(str(message.id), None) if message.id is not None else None
        if task is None:
            return False
        if task.status not in TERMINAL:
            if isinstance(message, JSONRPCResponse):
                task.outcome = {"result": message.result}
                self._set(task, "completed", None)
            else:
                task.outcome = {"error": message.error.model_dump(mode="json", exclude_none=True)}
                self._set(task, "failed", message.error.message)
            task.done.set()
        return True

    def _set(self, task: QuestionTask, status: Status, message: str | None) -> None:
        task.status = status
        task.status_message = message
        task.updated = self._now()

    def _expired(self, task: QuestionTask) -> bool:
        if task.ttl_ms is None:
            return False
        return (self._now() - task.created).total_seconds() * 1000 > task.ttl_ms

    def _sweep(self) -> None:
        """Forget finished tasks past their TTL (a running one stays while its card does)."""
        for task in [t for t in self._tasks.values() if t.status in TERMINAL and self._expired(t)]:
            del self._tasks[task.task_id]


async def _reply(write: Any, request_id: types.RequestId, result: dict[str, Any]) -> None:
    await write.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)))


async def _error(write: Any, request_id: types.RequestId, code: int, message: str) -> None:
    error = types.ErrorData(code=code, message=message)
    await write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id, error=error)))


_TASK_METHODS: Final = frozenset({"elicitation/create", "tasks/get", "tasks/result", "tasks/cancel"})


class _Read(ReadProxy):
    """The read stream the SDK sees: task requests answered on the way, a task's question handed on plain."""

    def __init__(self, inner: Any, write: Any, tasks: QuestionTasks, tg: anyio.abc.TaskGroup) -> None:
        super().__init__(inner)
        self._write = write
        self._tasks = tasks
        self._tg = tg

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            message = item.message if isinstance(item, SessionMessage) else None
            if not isinstance(message, JSONRPCRequest) or message.method not in _TASK_METHODS:
                return item
            if message.method == "elicitation/create" and "task" not in (message.params or {}):
                return item
            handed = await self._tasks.intercept(message, self._write, self._tg)
            if handed is not None:
                handed.metadata = item.metadata
                return handed


class _Write(StreamProxy):
    """The write stream the SDK writes to: `initialize` declares the tasks capability, and the SDK's answers to
    forwarded questions stay here as their tasks' results."""

    def __init__(self, inner: Any, tasks: QuestionTasks) -> None:
        super().__init__(inner)
        self._tasks = tasks

    async def send(self, item: Any) -> None:
        message = item.message if isinstance(item, SessionMessage) else None
        if isinstance(message, JSONRPCResponse | JSONRPCError) and self._tasks.answered(message):
            return
        if (
            isinstance(message, JSONRPCRequest)
            and message.method == "initialize"
            and message.params is not None
        ):
            capabilities = dict(message.params.get("capabilities") or {}) | {"tasks": CAPABILITY}
            message = message.model_copy(update={"params": message.params | {"capabilities": capabilities}})
            item = SessionMessage(message, metadata=item.metadata)
        await self._inner.send(item)

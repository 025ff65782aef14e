"""A streamable HTTP MCP server (2026-07-28) that serves the tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663), with tasks that outlive the client's session. Does I/O.

Run as its own process (`python -m tests.fakes.servers.modern_tasks --fd N --log PATH`) on a listening socket the
test made and passed in. Built on the SDK's `MCPServer` and its server `Extension` interface: the extension
advertises itself under `capabilities.extensions`, intercepts `tools/call` of its task tools (server-directed:
a request whose `_meta` client capabilities name the extension gets a `CreateTaskResult`, any other the plain
result), and serves `tasks/get`, `tasks/update` and `tasks/cancel`. The wire shapes are the ones the conformance
suite checks: a flat `CreateTaskResult` (`resultType: "task"`, `taskId`, `status`, `createdAt`, `lastUpdatedAt`,
`ttlMs`, `pollIntervalMs`), a `DetailedTask` on `tasks/get` with the result (`completed`), the error (`failed`)
or the `inputRequests` (`input_required`) inlined, and empty `{resultType: "complete"}` acks. Its tasks are kept
by the process, not by a session, so a client that restarts polls the task it made before (the spec binds tasks
to the requestor).

Tools (each a task when the client declared the extension):
- `brew(what)`: "Boiling water", then "Waiting for the kettle" until the test posts to `/finish`; then completed,
  "brewed <what>".
- `ask_name(greeting)`: `input_required` with an `elicitation/create` input request (key "name"); completed with
  "<greeting>, <name>!" once `tasks/update` answers it (or "no name (<action>)").
- `explode()`: failed, with the inlined error `-32603` "the boiler exploded".
- `grumble()`: completed with a tool error (`isError`), "the kettle is cold".
- `sign_up()`: asks the person's name in an `input_required` round first (no task), then makes the retried call
  a task (the MRTR-then-task composition), completed with "signed up <name>".

Every request received is appended to the log as one JSON line (its method, the task id, the input responses).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import socket
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp import MCPError
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from pydantic import ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["EXTENSION", "Tasks", "build_server", "main"]

EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TOOLS = frozenset({"brew", "ask_name", "explode", "grumble", "sign_up"})
TTL_MS = 600_000
POLL_MS = 200
CAPABILITIES_META = "io.modelcontextprotocol/clientCapabilities"


class TaskIdParams(types.RequestParams):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str = Field(alias="taskId")


class UpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class Tasks(Extension):
    """The tasks extension: the server's tasks (kept by the process) and the methods on them."""

    identifier = EXTENSION

    def __init__(self, log: str) -> None:
        self.log = log
        self.tasks: dict[str, dict[str, Any]] = {}
        self.jobs: dict[str, asyncio.Task[None]] = {}
        self.answers: dict[str, dict[str, asyncio.Future[dict[str, Any]]]] = {}
        self.finished = asyncio.Event()

    def write(self, entry: dict[str, object]) -> None:
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/update", UpdateParams, self.update),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        )

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        declared = _declares(ctx)
        self.write({"method": "tools/call", "tool": params.name, "task": declared})
        if params.name not in TASK_TOOLS or not declared:
            return await call_next(ctx)
        if params.name == "sign_up" and not params.input_responses:
            return await call_next(ctx)  # its round first
        arguments = dict(params.arguments or {})
        if params.name == "sign_up":
            answer = (params.input_responses or {}).get("name")
            content = answer.content if isinstance(answer, types.ElicitResult) else None
            arguments["name"] = (content or {}).get("name")
        task_id = uuid.uuid4().hex
        now = _now()
        task: dict[str, Any] = {
            "taskId": task_id,
            "status": "working",
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_MS,
        }
        self.tasks[task_id] = task
        self.answers[task_id] = {}
        self.jobs[task_id] = asyncio.get_running_loop().create_task(
            self._run(task_id, params.name, arguments)
        )
        return {"resultType": "task", **task}

    def _set(self, task_id: str, **fields: Any) -> None:
        task = self.tasks[task_id]
        if task["status"] in ("completed", "failed", "cancelled"):
            return
        for key in ("statusMessage", "inputRequests", "result", "error"):
            task.pop(key, None)
        task.update(fields, lastUpdatedAt=_now())

    async def _run(self, task_id: str, tool: str, arguments: dict[str, Any]) -> None:
        if tool == "brew":
            self._set(task_id, status="working", statusMessage="Boiling water")
            await asyncio.sleep(0.5)
            self._set(task_id, status="working", statusMessage="Waiting for the kettle")
            await self.finished.wait()
            self._set(task_id, status="completed", result=_text(f"brewed {arguments.get('what')}"))
        elif tool == "ask_name":
            answer = asyncio.get_running_loop().create_future()
            self.answers[task_id]["name"] = answer
            request = {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": "What is your name?",
                    "requestedSchema": {
                        "type": "object",
                        "properties": {"name": {"type": "string", "title": "Name"}},
                        "required": ["name"],
                    },
                },
            }
            self._set(task_id, status="input_required", inputRequests={"name": request})
            got = await answer
            self._set(task_id, status="working", statusMessage="Writing the greeting")
            content = got.get("content") or {}
            if got.get("action") == "accept" and isinstance(content, dict):
                text = f"{arguments.get('greeting', 'Hello')}, {content.get('name')}!"
            else:
                text = f"no name ({got.get('action')})"
            self._set(task_id, status="completed", result=_text(text))
        elif tool == "sign_up":
            self._set(task_id, status="working", statusMessage="Signing up")
            await asyncio.sleep(0.2)
            self._set(task_id, status="completed", result=_text(f"signed up {arguments.get('name')}"))
        elif tool == "grumble":
            await asyncio.sleep(0.2)
            self._set(task_id, status="completed", result={**_text("the kettle is cold"), "isError": True})
        else:
            await asyncio.sleep(0.2)
            self._set(
                task_id,
                status="failed",
                error={"code": types.INTERNAL_ERROR, "message": "the boiler exploded"},
            )

    def _task(self, ctx: ServerRequestContext[Any, Any], method: str, params: TaskIdParams) -> dict[str, Any]:
        entry: dict[str, object] = {"method": method, "taskId": params.task_id}
        if isinstance(params, UpdateParams):
            entry["inputResponses"] = params.input_responses
        self.write(entry)
        if not _declares(ctx):
            raise MCPError(-32021, f"{method} needs the {EXTENSION} extension")
        task = self.tasks.get(params.task_id)
        if task is None:
            raise MCPError(types.INVALID_PARAMS, "Task not found")
        return task

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        return {"resultType": "complete", **self._task(ctx, "tasks/get", params)}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> HandlerResult:
        task = self._task(ctx, "tasks/update", params)
        waiting = self.answers.get(task["taskId"], {})
        for key, answer in params.input_responses.items():
            future = waiting.get(key)
            if future is not None and not future.done() and isinstance(answer, dict):
                future.set_result(answer)
        return {"resultType": "complete"}

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        task = self._task(ctx, "tasks/cancel", params)
        if task["status"] not in ("completed", "failed", "cancelled"):
            self._set(task["taskId"], status="cancelled", statusMessage="Cancelled by the client")
            self.jobs[task["taskId"]].cancel()
        return {"resultType": "complete"}


def _declares(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request's client capabilities (its `_meta`) name the tasks extension."""
    caps = (ctx.meta or {}).get(CAPABILITIES_META) or {}
    extensions = caps.get("extensions") if isinstance(caps, dict) else None
    return isinstance(extensions, dict) and EXTENSION in extensions


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def build_server(log: str) -> tuple[MCPServer, Tasks]:
    """The server and its tasks extension; every request is appended to `log`."""
    tasks = Tasks(log)
    server = MCPServer(
        "toolnexus-test-modern-tasks", version="1.0.0", log_level="WARNING", extensions=[tasks]
    )

    @server.tool()
    async def brew(what: str) -> str:
        """Brews something (a task: it waits for the kettle)."""
        return f"brewed {what} at once"

    @server.tool()
    async def ask_name(greeting: str = "Hello") -> str:
        """Greets the person by name (a task: it asks their name)."""
        return f"{greeting}, stranger!"

    @server.tool()
    async def explode() -> str:
        """Fails (a task)."""
        return "no boom"

    @server.tool()
    async def grumble() -> str:
        """Reports a tool error (a task)."""
        return "no grumble"

    @server.tool()
    async def sign_up(ctx: Context) -> str | types.InputRequiredResult:
        """Asks the person's name (a round), then signs them up (a task)."""
        schema = {
            "type": "object",
            "properties": {"name": {"type": "string", "title": "Name"}},
            "required": ["name"],
        }
        ask = types.ElicitRequest.model_validate(
            {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": "Your name for the sign-up?",
                    "requestedSchema": schema,
                },
            }
        )
        return types.InputRequiredResult(input_requests={"name": ask}, request_state="sign-up")

    @server.tool()
    async def greet(name: str) -> str:
        """A plain call."""
        return f"Hello, {name}!"

    return server, tasks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.servers.modern_tasks")
    parser.add_argument("--fd", type=int, required=True, help="a listening TCP socket passed in")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    server, tasks = build_server(args.log)

    async def finish(request: Request) -> Response:
        tasks.finished.set()
        return Response(status_code=204)

    app = server.streamable_http_app()
    app.router.routes.append(Route("/finish", finish, methods=["POST"]))
    listener = socket.socket(fileno=args.fd)
    config = uvicorn.Config(app, log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [listener])


if __name__ == "__main__":
    main()

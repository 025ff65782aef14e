"""A streamable HTTP MCP server (2025-11-25) whose tool runs as a task that outlives the client's session. Does I/O.

Run as its own process (`python -m tests.fakes.servers.tasks_http --fd N --log PATH`) on a listening socket the
test made and passed in. The MCP Python SDK's server has no 2025-11-25 tasks, and the reference server-everything
keeps its tasks per session, so this one speaks the few JSON-RPC methods by hand (plain JSON responses, no SSE),
with its tasks kept by the process: a client that restarts can poll a task it made in its session before, as the
spec allows (tasks are bound to the requestor, not to a session).

The tool `brew` makes a task that stays `working` until the test posts to `/finish`; then it is `completed` with
the text "brewed <what>". Every JSON-RPC request received is appended to the log as one JSON line (its method and,
for tasks, its task id), so a test sees what reached the server.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import socket
import uuid
from typing import Any

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = ["Brewer", "build_app", "main"]

VERSION = "2025-11-25"
BREW = {
    "name": "brew",
    "description": "Brews something; runs as a task until the test says it is done.",
    "inputSchema": {"type": "object", "properties": {"what": {"type": "string"}}, "required": ["what"]},
    "execution": {"taskSupport": "required"},
}


class Brewer:
    """The server's tasks, kept by the process (not by a session), and the log of what it received."""

    def __init__(self, log: str) -> None:
        self.log = log
        self.tasks: dict[str, dict[str, Any]] = {}
        self.finished = anyio.Event()

    def write(self, entry: dict[str, object]) -> None:
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    def task_of(self, task_id: str) -> dict[str, Any]:
        task = self.tasks[task_id]
        if self.finished.is_set() and task["status"] == "working":
            task["status"], task["statusMessage"] = "completed", "done"
        return {k: v for k, v in task.items() if k != "what"}

    async def handle(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "initialize":
            return {
                "protocolVersion": VERSION,
                "capabilities": {"tools": {}, "tasks": {"cancel": {}, "requests": {"tools": {"call": {}}}}},
                "serverInfo": {"name": "toolnexus-test-tasks", "version": "1.0.0"},
            }
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [BREW]}
        if method == "tools/call":
            now = dt.datetime.now(dt.UTC).isoformat()
            task_id = uuid.uuid4().hex
            self.tasks[task_id] = {
                "taskId": task_id,
                "status": "working",
                "statusMessage": "Brewing (waiting for the kettle)",
                "createdAt": now,
                "lastUpdatedAt": now,
                "ttl": 600_000,
                "pollInterval": 200,
                "what": (params.get("arguments") or {}).get("what", "?"),
            }
            return {"task": self.task_of(task_id)}
        return await self.on_task(method, str(params.get("taskId")))

    async def on_task(self, method: str, task_id: str) -> dict[str, Any]:
        if task_id not in self.tasks:
            raise KeyError(task_id)
        if method == "tasks/get":
            return self.task_of(task_id)
        if method == "tasks/cancel":
            self.tasks[task_id]["status"] = "cancelled"
            return self.task_of(task_id)
        if method == "tasks/result":
            while self.task_of(task_id)["status"] == "working":
                await self.finished.wait()
            text = f"brewed {self.tasks[task_id]['what']}"
            return {"content": [{"type": "text", "text": text}], "isError": False}
        raise LookupError(method)

    async def mcp(self, request: Request) -> Response:
        if request.method != "POST":
            return Response(status_code=405)
        message = await request.json()
        method = message.get("method", "")
        params = message.get("params") or {}
        if "id" not in message:
            return Response(status_code=202)  # a notification
        self.write({"method": method, **({"taskId": params["taskId"]} if "taskId" in params else {})})
        try:
            result = await self.handle(method, params)
        except KeyError:
            error = {"code": -32602, "message": "no such task"}
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error})
        except LookupError:
            error = {"code": -32601, "message": f"unknown method {method}"}
            return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "error": error})
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    async def finish(self, request: Request) -> Response:
        self.finished.set()
        return Response(status_code=204)


def build_app(log: str) -> Starlette:
    brewer = Brewer(log)
    return Starlette(
        routes=[
            Route("/mcp", brewer.mcp, methods=["GET", "POST", "DELETE"]),
            Route("/finish", brewer.finish, methods=["POST"]),
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.servers.tasks_http")
    parser.add_argument("--fd", type=int, required=True, help="a listening TCP socket passed in")
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    listener = socket.socket(fileno=args.fd)
    config = uvicorn.Config(build_app(args.log), log_level="warning")
    anyio.run(uvicorn.Server(config).serve, [listener])


if __name__ == "__main__":
    main()

"""A scripted OpenAI Responses API for driving a real Codex CLI offline, on 127.0.0.1.

I/O: an aiohttp server in the test's event loop. `POST /v1/responses` streams, in turn, each of `script`'s
replies as the API does (server-sent events: `response.created`, one `response.output_item.done`,
`response.completed`); every request's JSON body is kept in `requests`. A reply is a shell command through Codex's
`exec_command` tool, asking to run outside the sandbox (so that Codex asks for approval: `command("touch x")`),
or the final text (`said("done")`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

__all__ = ["FakeResponses", "command", "fake_responses", "outputs", "said"]


def command(cmd: str) -> dict[str, Any]:
    arguments = {
        "cmd": cmd,
        "sandbox_permissions": "require_escalated",
        "justification": "a scripted command",
    }
    return {"type": "function_call", "name": "exec_command", "arguments": json.dumps(arguments)}


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


def outputs(body: dict[str, Any]) -> list[str]:
    """The outputs of the function calls a request hands back to the model."""
    return [
        str(item.get("output"))
        for item in body.get("input", [])
        if item.get("type") == "function_call_output"
    ]


@dataclass
class FakeResponses:
    script: list[dict[str, Any]]
    url: str = ""
    """The API's base (`.../v1`), for a model provider's `base_url`."""
    requests: list[dict[str, Any]] = field(default_factory=list)


def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()


@asynccontextmanager
async def fake_responses(script: list[dict[str, Any]]) -> AsyncIterator[FakeResponses]:
    fake = FakeResponses(list(script))
    ids = itertools.count(1)

    async def responses(request: web.Request) -> web.StreamResponse:
        fake.requests.append(await request.json())
        n = next(ids)
        item = {**(fake.script.pop(0) if fake.script else said("(the script is over)")), "id": f"item_{n}"}
        if item["type"] == "function_call":
            item["call_id"] = f"call_{n}"
        usage = {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_event({"type": "response.created", "response": {"id": f"resp_{n}"}}))
        await response.write(_event({"type": "response.output_item.done", "item": item}))
        await response.write(
            _event({"type": "response.completed", "response": {"id": f"resp_{n}", "usage": usage}})
        )
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/responses", responses)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    try:
        yield fake
    finally:
        await runner.cleanup()

"""A scripted Anthropic Messages API for driving a real Claude Code CLI offline, on 127.0.0.1.

I/O: an aiohttp server in the test's event loop. `POST /v1/messages` answers, in turn, each of `script`'s replies
as the API streams one (server-sent events: `message_start`, `content_block_start` / `_delta` / `_stop` per
block, `message_delta` with the stop reason, `message_stop`); every request's JSON body is kept in `requests`.
A reply is a Bash `tool_use` (`bash("touch x")`) or the final text (`text("done")`). Requests that are not the
conversation's turns (Claude Code's own side calls: a title for the session, a count of tokens) get a short text
without using the script: they carry no `tools`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from aiohttp import web

__all__ = ["FakeAnthropic", "Reply", "bash", "fake_anthropic", "text"]


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted answer of the model: a tool use (`tool` and its `input`) or, without a tool, `said`."""

    said: str = ""
    tool: str | None = None
    input: dict[str, Any] = field(default_factory=dict)


def bash(command: str) -> Reply:
    return Reply(tool="Bash", input={"command": command, "description": "a scripted command"})


def text(said: str) -> Reply:
    return Reply(said=said)


@dataclass
class FakeAnthropic:
    """The endpoint (`url`, for `ANTHROPIC_BASE_URL`), what it still has to say, and what it was sent."""

    script: list[Reply]
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    """The bodies of the conversation's turns (requests with `tools`), in order."""
    paths: list[str] = field(default_factory=list)
    """Every request's method and path (side calls too)."""
    changed: anyio.Event = field(default_factory=anyio.Event)

    async def wait_for_turns(self, count: int) -> list[dict[str, Any]]:
        """Until `count` turns were asked for (the caller bounds the wait)."""
        while len(self.requests) < count:
            self.changed = anyio.Event()
            await self.changed.wait()
        return self.requests


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The `tool_result` blocks of a turn's last user message."""
    last = body["messages"][-1]
    content = last.get("content")
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and block.get("type") == "tool_result"]


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _stream(reply: Reply, model: str, ids: itertools.count[int]) -> list[bytes]:
    n = next(ids)
    usage = {
        "input_tokens": 10,
        "output_tokens": 1,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    message: dict[str, Any] = {
        "id": f"msg_fake{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    events = [_event("message_start", {"type": "message_start", "message": message})]
    if reply.tool is None:
        block: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": reply.said}
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_fake{n}", "name": reply.tool, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.input)}
        stop = "tool_use"
    events += [
        _event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        _event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        _event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        _event("message_stop", {"type": "message_stop"}),
    ]
    return events


@asynccontextmanager
async def fake_anthropic(script: list[Reply]) -> AsyncIterator[FakeAnthropic]:
    fake = FakeAnthropic(list(script))
    ids = itertools.count(1)

    async def messages(request: web.Request) -> web.StreamResponse:
        fake.paths.append(f"{request.method} {request.path}")
        body = await request.json()
        model = str(body.get("model", "claude-fake"))
        if body.get("tools"):
            fake.requests.append(body)
            fake.changed.set()
            reply = fake.script.pop(0) if fake.script else text("(the script is over)")
        else:
            reply = text("Scripted")
        if not body.get("stream"):
            n = next(ids)
            content: list[dict[str, Any]] = (
                [{"type": "text", "text": reply.said}]
                if reply.tool is None
                else [{"type": "tool_use", "id": f"toolu_fake{n}", "name": reply.tool, "input": reply.input}]
            )
            return web.json_response(
                {
                    "id": f"msg_fake{n}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": content,
                    "stop_reason": "end_turn" if reply.tool is None else "tool_use",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                }
            )
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for chunk in _stream(reply, model, ids):
            await response.write(chunk)
        await response.write_eof()
        return response

    async def count_tokens(request: web.Request) -> web.Response:
        fake.paths.append(f"{request.method} {request.path}")
        return web.json_response({"input_tokens": 10})

    async def other(request: web.Request) -> web.Response:
        fake.paths.append(f"{request.method} {request.path}")
        return web.json_response({}, status=404)

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app.router.add_route("*", "/{tail:.*}", other)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        await runner.cleanup()

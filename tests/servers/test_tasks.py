"""`bot.servers.tasks` against the reference server-everything over stdio (pinned in tests/conformance, installed
by `.ci/run`), through the SDK's own client: what the server's task store says of the bot's tasks."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters, stdio_client

from bot.core import Progress
from bot.servers.tasks import makes_task, run_as_task
from tests.conformance import suite

pytestmark = pytest.mark.anyio

EVERYTHING = (
    suite.CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
)


@pytest.fixture(autouse=True)
def _installed() -> None:
    if not EVERYTHING.exists() or not suite.NODE.exists():
        why = f"server-everything not installed; run: {suite.INSTALL}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


@asynccontextmanager
async def everything() -> AsyncIterator[Client]:
    params = StdioServerParameters(command=str(suite.NODE), args=[str(EVERYTHING), "stdio"])
    async with Client(stdio_client(params), mode="legacy") as client:
        yield client


async def task_status(client: Client, task_id: str) -> str:
    got = await client.session.send_request(
        types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id)), types.GetTaskResult
    )
    return got.status


async def test_only_tools_that_allow_tasks_are_called_as_tasks() -> None:
    """The research query (taskSupport "required") is a task; the long-running operation (no taskSupport) and an
    unknown tool are not."""
    async with everything() as client:
        assert await makes_task(client, "simulate-research-query", None)
        assert not await makes_task(client, "trigger-long-running-operation", None)
        assert not await makes_task(client, "no-such-tool", None)


async def test_a_call_stopped_before_its_task_ended_cancels_the_task_on_the_server() -> None:
    """The call's scope is cancelled while the task works (as /cancel does): the server's task is `cancelled`
    (the bot sent `tasks/cancel`), not left working."""
    seen: list[Progress] = []
    working = anyio.Event()

    async def on_status(progress: Progress) -> None:
        seen.append(progress)
        working.set()

    async def research(client: Client) -> None:
        await run_as_task(client.session, "simulate-research-query", {"topic": "tides"}, on_status)

    async with everything() as client:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(research, client)
                with anyio.fail_after(10):
                    await working.wait()
                scope.cancel()
        listed = await client.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
        assert [t.status for t in listed.tasks] == ["cancelled"]
        assert seen[0].message == "Gathering sources..."
        assert await task_status(client, listed.tasks[0].task_id) == "cancelled"

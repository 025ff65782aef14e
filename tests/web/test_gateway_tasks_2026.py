"""Agents' calls as tasks of the 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) through the
gateway, end to end. The SDK's own `Client` at 2026-07-28 is the agent: it declares the extension as a
`ClientExtension` whose result claim takes the `resultType: "task"` answer (and, for `Client.call_tool`, resolves it
by polling `tasks/get`, sent with its `Mcp-Name` header as a typed request); approvers and the person tap on the fake
Bot API; the store is a SQLite file, and the bot is restarted in process on it (its parts stopped as `s.stop` stops
them). The conformance suite's tasks scenarios cover the wire shapes (tests/conformance/test_server_scenarios.py);
these cover what waits for people."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from bot.web.gateway import GATEWAY_PATH
from tests.telegram.harness import ALICE_ID
from tests.web.agents import make_token, text_of
from tests.web.test_gateway import submit
from tests.web.test_gateway_approvals import DEPLOY, ops_scene

pytestmark = pytest.mark.anyio

EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = ("completed", "failed", "cancelled")


class CreatedTask(types.Result):
    """A 2026-07-28 `CreateTaskResult`: flat."""

    result_type: Literal["task"]
    task_id: str
    status: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class DetailedTask(types.Result):
    """`tasks/get` at 2026-07-28."""

    result_type: str | None = None
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    result: types.CallToolResult | None = None
    error: dict[str, Any] | None = None


class Ack(types.Result):
    """`tasks/cancel` and `tasks/update` at 2026-07-28: an empty result."""

    result_type: str | None = None


class GetTask(types.Request[types.GetTaskRequestParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: types.GetTaskRequestParams
    name_param = "taskId"


class CancelTask(types.Request[types.CancelTaskRequestParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: types.CancelTaskRequestParams
    name_param = "taskId"


async def get_task(session: ClientSession, task_id: str) -> DetailedTask:
    request = GetTask(params=types.GetTaskRequestParams(task_id=task_id))
    return await session.send_request(request, DetailedTask)


async def cancel_task(session: ClientSession, task_id: str) -> Ack:
    request = CancelTask(params=types.CancelTaskRequestParams(task_id=task_id))
    return await session.send_request(request, Ack)


async def polled(session: ClientSession, task_id: str, within_s: float = 30) -> DetailedTask:
    """`tasks/get` at the task's poll interval until it is terminal (bounded by `within_s`)."""
    with anyio.fail_after(within_s):
        while True:
            task = await get_task(session, task_id)
            if task.status in TERMINAL:
                return task
            await anyio.sleep((task.poll_interval_ms or 1000) / 1000)


class Tasks(ClientExtension):
    """The agent's side of the extension: a call the gateway made a task is polled to its result; `made` collects
    the tasks it was given."""

    identifier = EXTENSION

    def __init__(self) -> None:
        self.made: list[CreatedTask] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve),)

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        self.made.append(created)
        done = await polled(ctx.session, created.task_id)
        if done.result is not None:
            return done.result
        line = (done.error or {}).get("message") or done.status_message or done.status
        return types.CallToolResult(content=[types.TextContent(text=str(line))], is_error=True)


@asynccontextmanager
async def agent(port: int, token: str, tasks: Tasks | None = None) -> AsyncIterator[Client]:
    """The SDK's `Client` at 2026-07-28 presenting `token`, declaring the tasks extension when given `tasks`."""
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx2.Timeout(30.0, read=120.0),
            trust_env=False,
        ) as http,
        Client(
            streamable_http_client(f"http://127.0.0.1:{port}{GATEWAY_PATH}", http_client=http),
            read_timeout_seconds=None,
            extensions=[] if tasks is None else [tasks],
        ) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        yield client


async def test_a_2026_agents_approval_gated_call_is_a_task_that_an_approval_after_a_restart_runs_once(
    tmp_path: Any,
) -> None:
    """The agent declares the extension. Its ungated `status` is answered as it runs; its `deploy` (2 of 3 approvers)
    is a task at once, `working`. Bob approves; the bot stops and a new one starts on the same database; Carol's
    approval on the old card runs the deploy once; the agent, polling the new process, gets the task completed
    with the server's result inlined. Another token of the same person finds no such task; the server advertises
    the extension and no `tasks` slot."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        async with agent(o.port, token, Tasks()) as client:
            advertised = client.server_capabilities
            plain = await client.session.call_tool("prod__status", {}, allow_claimed=True)
            with anyio.fail_after(15):  # a task is answered at once (a call would wait for the approvers)
                created = await client.session.call_tool("prod__deploy", DEPLOY, allow_claimed=True)
            assert isinstance(created, CreatedTask), created
            working = await get_task(client.session, created.task_id)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        s.stop.set()
        with anyio.fail_after(20):
            await s.stopped.wait()
        assert o.ledger.calls == [("status", {})]

        async with ops_scene(tmp_path, world=o) as again:
            answer = await again.carol.press(card, "✅ Approve")
            assert not answer.show_alert, answer.text
            async with agent(again.port, token, Tasks()) as client:
                done = await polled(client.session, created.task_id)
            other = await make_token(again.url, ALICE_ID, "other-bot")
            async with agent(again.port, other, Tasks()) as stranger:
                with pytest.raises(MCPError) as refused:
                    await get_task(stranger.session, created.task_id)
    assert advertised is not None and advertised.tasks is None
    assert advertised.extensions is not None and EXTENSION in advertised.extensions
    assert isinstance(plain, types.CallToolResult) and text_of(plain) == "all green"
    assert created.status == "working" and created.ttl_ms and created.poll_interval_ms
    assert working.status == "working" and working.result is None and working.error is None
    assert done.status == "completed" and done.result is not None, done
    assert text_of(done.result) == "deployed web 1.2.3" and not done.result.is_error
    assert o.ledger.calls == [("status", {}), ("deploy", DEPLOY)]
    assert refused.value.code == -32602


async def test_a_2026_agents_question_is_a_task_answered_on_the_phone_and_its_cancel_after_the_end_is_an_empty_ack(
    tmp_path: Any,
) -> None:
    """`ask_person` by an agent declaring the extension is a task (it waits for a person): the SDK's `Client`
    polls it while Alice answers Yes on her phone, and gets the typed answer. `notify_person` is answered as it runs.
    `tasks/cancel` of the finished task is an empty ack and leaves it completed."""
    async with ops_scene(tmp_path, approvals=[]) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        tasks = Tasks()
        got: list[types.CallToolResult] = []
        async with agent(o.port, token, tasks) as client:
            told = await client.session.call_tool("notify_person", {"message": "hello"}, allow_claimed=True)

            async def ask() -> None:
                got.append(await client.call_tool("ask_person", {"message": "Ship it?"}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(ask)
                card = await s.fake.wait_for(
                    lambda m: m.chat_id == ALICE_ID and "Ship it?" in m.text and bool(m.buttons)
                )
                await s.alice.press(card, "Yes")
                await submit(s, card)
            [made] = tasks.made
            ack = await cancel_task(client.session, made.task_id)
            after = await get_task(client.session, made.task_id)
    assert isinstance(told, types.CallToolResult) and not told.is_error
    assert got[0].structured_content == {"action": "accept", "content": {"answer": True}}
    assert ack.result_type == "complete" and ack.model_extra in (None, {})
    assert after.status == "completed"


async def test_a_2026_agent_without_the_extension_gets_an_approval_gated_call_as_it_runs_and_no_tasks(
    tmp_path: Any,
) -> None:
    """An agent that does not declare the extension: its gated deploy is answered once Bob and Carol approve (no
    task), and `tasks/get` is refused as a capability it did not declare (-32021)."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult | types.InputRequiredResult | types.Result] = []
        async with agent(o.port, token) as client:

            async def deploy() -> None:
                got.append(await client.session.call_tool("prod__deploy", DEPLOY, allow_claimed=True))

            async with anyio.create_task_group() as tg:
                tg.start_soon(deploy)
                card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
                await s.bob.press(card, "✅ Approve")
                await o.carol.press(card, "✅ Approve")
            with pytest.raises(MCPError) as refused:
                await get_task(client.session, "any")
    [result] = got
    assert isinstance(result, types.CallToolResult) and text_of(result) == "deployed web 1.2.3"
    assert refused.value.code == -32021

"""Agents' calls as tasks (MCP 2025-11-25 tasks) through the gateway, end to end: the SDK's own `Client` is the agent
polling `tasks/get` / `tasks/result` as typed requests (the task-augmented `tools/call` itself is sent as JSON-RPC:
see `call_as_task`); approvers tap on the fake Bot API; the store is a SQLite file. The bot is restarted in process
on the same database (its parts stopped as `s.stop` stops them), and, as the installed `toolnexus-bot`, SIGKILLed
and started again."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client, MCPError

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.store.gateway_tasks import TaskState
from bot.web.gateway import GATEWAY_PATH
from tests.fakes.telegram import FakeTelegram
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID
from tests.telegram.test_approvals_restart import BOB_ID, CAROL_ID, DAVE_ID, OPS, ledger_lines
from tests.telegram.test_drain import Bot, bot_process
from tests.web.agents import agent, make_token, revoke, text_of
from tests.web.test_gateway import submit
from tests.web.test_gateway_approvals import DEPLOY, ops_scene
from tests.zygote import server_toml

pytestmark = pytest.mark.anyio

LEGACY = "2025-11-25"


async def call_as_task(
    port: int, token: str, name: str, arguments: Mapping[str, object]
) -> types.CreateTaskResult:
    """`tools/call` with `task`, as JSON-RPC over HTTP on a session of its own: the SDK's client validates every
    2025-11-25 `tools/call` result as a `CallToolResult`, so it cannot receive the `CreateTaskResult` (the task
    belongs to the token, not the session: the SDK's `Client` polls it on another session)."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    url = f"http://127.0.0.1:{port}{GATEWAY_PATH}"
    async with httpx.AsyncClient(trust_env=False, timeout=30, headers=headers) as http:
        hello = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}
        started = await http.post(
            url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        )
        session = {"Mcp-Session-Id": started.headers["mcp-session-id"], "Mcp-Protocol-Version": LEGACY}
        await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        params = {"name": name, "arguments": dict(arguments), "task": {"ttl": 600_000}}
        body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        answer = await http.post(url, json=body, headers=session)
    data = [line[5:] for line in answer.text.splitlines() if line.startswith("data:")] or [answer.text]
    message = json.loads(data[-1])
    return types.CreateTaskResult.model_validate(message["result"], by_name=False)


LISTENING = "web endpoint listening"
"""What a bot process logs once its web endpoint (the gateway with it) takes requests."""


async def serving(bot: Bot) -> Bot:
    """`bot` once it logged that its web endpoint (the gateway with it) listens."""
    await bot.logged(LISTENING, timeout=60)
    return bot


async def get_task(client: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.GetTaskResult)


async def task_result(client: Client, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CallToolResult)


async def polled(client: Client, task_id: str, within_s: float = 30) -> types.GetTaskResult:
    """`tasks/get` at the task's poll interval until it is terminal (bounded by `within_s`)."""
    with anyio.fail_after(within_s):
        while True:
            task = await get_task(client, task_id)
            if task.status in ("completed", "failed", "cancelled"):
                return task
            await anyio.sleep((task.poll_interval or 1000) / 1000)


async def test_an_agents_task_approved_after_a_restart_runs_once_and_the_agents_poll_gets_the_result(
    tmp_path: Path,
) -> None:
    """The agent calls the deploy (2 of 3 approvers) as a task: it gets the task at once, `working`. Bob approves;
    the bot stops and a new bot process starts on the same database. Carol's approval on the old card runs the
    deploy exactly once, and the agent, polling the new process, sees the task completed and gets the server's
    result; another token of the same person cannot read the task."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "prod__deploy", DEPLOY)
        async with agent(o.port, token, mode="legacy") as client:
            assert created.task.status == "working" and created.task.ttl == 600_000
            card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
            assert "Alice (agent ci-bot) asks to call deploy on prod" in card.text
            assert (await get_task(client, created.task.task_id)).status == "working"
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        s.stop.set()
        with anyio.fail_after(20):
            await s.stopped.wait()
        assert o.ledger.calls == []

        async with ops_scene(tmp_path, world=o) as again:
            answer = await again.carol.press(card, "✅ Approve")
            assert not answer.show_alert, answer.text
            async with agent(again.port, token, mode="legacy") as client:
                done = await polled(client, created.task.task_id)
                result = await task_result(client, created.task.task_id)
            other = await make_token(again.url, ALICE_ID, "other-bot")
            async with agent(again.port, other, mode="legacy") as stranger:
                with pytest.raises(MCPError) as refused:
                    await get_task(stranger, created.task.task_id)
            settled = await s.fake.wait_for(lambda m: m is card and not m.reply_markup)
    assert done.status == "completed"
    assert text_of(result) == "deployed web 1.2.3" and not result.is_error
    assert o.ledger.calls == [("deploy", DEPLOY)]
    assert refused.value.code == -32602
    assert "not run" not in settled.text.lower()


async def test_an_agents_task_survives_a_sigkill_between_two_approvals_and_runs_once(tmp_path: Path) -> None:
    """The installed bot, gateway on: the agent's deploy task waits for 2 of 3 approvers; Bob approves; the bot is
    SIGKILLed (no shutdown of any kind) and started again on the same database; Carol approves on the old card: the
    stdio server (a new process of it) receives the deploy once, and the agent's poll of the new process gets the
    server's result."""
    db, ledger, config = tmp_path / "bot.db", tmp_path / "ledger.jsonl", tmp_path / "bot.toml"
    port = free_port()
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE_ID, first_name="Alice")
        bob = fake.user(id=BOB_ID, first_name="Bob")
        carol = fake.user(id=CAROL_ID, first_name="Carol")
        dave = fake.user(id=DAVE_ID, first_name="Dave")
        fake.group(OPS, title="On-call", members=[alice, bob, carol, dave])
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
            f"allowed_users = [{ALICE_ID}, {BOB_ID}]\n"
            f'[storage]\nurl = "sqlite:///{db}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "https://bot.example.com"\n'
            "[gateway]\nenabled = true\n"
            "[servers.prod]\n"
            + server_toml("tests.fakes.servers.ledger", str(ledger))
            + f'[[approvals]]\nservers = ["prod"]\ntools = ["deploy"]\napprovers = [{BOB_ID}, {CAROL_ID}, {DAVE_ID}]\n'
            f"quorum = 2\nchat = {OPS}\n"
        )
        async with bot_process(config, fake) as first:
            await serving(first)
            token = await make_token(f"sqlite:///{db}", ALICE_ID, "ci-bot")
            created = await call_as_task(port, token, "prod__deploy", DEPLOY)
            assert created.task.status == "working"
            card = await fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=30)
            await bob.press(card, "✅ Approve", timeout=30)
            await fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text, timeout=30)
            first.process.kill()  # SIGKILL: no shutdown of any kind
            await first.process.wait()
        assert ledger_lines(ledger) == []

        async with bot_process(config, fake) as second:
            await serving(second)
            answer = await carol.press(card, "✅ Approve", timeout=60)
            assert not answer.show_alert, answer.text
            async with agent(port, token, mode="legacy") as client:
                done = await polled(client, created.task.task_id)
                result = await task_result(client, created.task.task_id)
            assert await second.terminate() == 0
    assert done.status == "completed"
    assert text_of(result) == "deployed web 1.2.3" and not result.is_error
    assert ledger_lines(ledger) == [{"tool": "deploy", "arguments": DEPLOY}]


async def cancel_task(client: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, types.CancelTaskResult)


async def test_an_agent_cancelling_its_task_ends_the_approval_request_and_a_late_approval_runs_nothing(
    tmp_path: Path,
) -> None:
    """`tasks/cancel` while the task waits for approvers (Bob has approved): the task is cancelled, the request ends
    as its requester's doing (the card says so, without buttons), Carol's late tap runs nothing, and a second
    `tasks/cancel` of the now terminal task is refused."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "prod__deploy", DEPLOY)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        late = card.button("✅ Approve").callback_data
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        async with agent(o.port, token, mode="legacy") as client:
            cancelled = await cancel_task(client, created.task.task_id)
            ended = await s.fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=15)
            answer = await o.carol.press_data(card, late)
            after = await get_task(client, created.task.task_id)
            with pytest.raises(MCPError) as again:
                await cancel_task(client, created.task.task_id)
    assert cancelled.status == "cancelled" and after.status == "cancelled"
    assert "Cancelled: nothing was sent" in ended.text, ended.text
    assert answer.show_alert and o.ledger.calls == []
    assert again.value.code == -32602


async def test_cancel_in_the_chat_cancels_an_agents_task_waiting_for_approvers(tmp_path: Path) -> None:
    """Alice's /cancel in her private chat ends her agent's task that waits for approvers: the task is cancelled
    and the approval request ends; nothing runs."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "prod__deploy", DEPLOY)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.alice.send("/cancel")
        await s.fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=15)
        async with agent(o.port, token, mode="legacy") as client:
            done = await polled(client, created.task.task_id)
    assert done.status == "cancelled", done
    assert o.ledger.calls == []


async def test_an_agents_task_whose_token_was_revoked_before_the_approval_after_a_restart_is_not_run(
    tmp_path: Path,
) -> None:
    """Bob approves the agent's deploy task; the bot stops; Alice revokes the agent's token; a new bot process starts
    and Carol approves on the old card: the deploy is not run (a revoked token's work ends), Alice is told so, and
    the task failed (read through the store: the revoked token may read nothing)."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "prod__deploy", DEPLOY)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        s.stop.set()
        with anyio.fail_after(20):
            await s.stopped.wait()
        await revoke(o.url, ALICE_ID, "ci-bot")

        async with ops_scene(tmp_path, world=o) as again:
            await again.carol.press(card, "✅ Approve")
            told = await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "not run" in m.text)
        async with open_store(StorageConfig(url=Secret(o.url))) as store:
            kept = await store.tasks.get(created.task.task_id, None)
    assert "its access ended" in told.text and "(agent ci-bot)" in told.text
    assert kept is not None and kept.state is TaskState.FAILED
    assert o.ledger.calls == []


async def test_an_agents_question_as_a_task_is_answered_on_the_phone_and_the_poll_gets_the_answer(
    tmp_path: Path,
) -> None:
    """`ask_person` as a task (the gateway declares `tasks` for `tools/call`; `ask_person` may be a task,
    `notify_person` not): the agent has its task at once and lists it; Alice answers Yes on her phone (and submits); the
    task completes and `tasks/result` is the tool's own result (`action: accept`, the typed answer)."""
    async with ops_scene(tmp_path, approvals=[]) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "ask_person", {"message": "Ship it?"})
        card = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "Ship it?" in m.text and bool(m.buttons)
        )
        async with agent(o.port, token, mode="legacy") as client:
            declared = client.server_capabilities.tasks
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            listed = await client.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
            await s.alice.press(card, "Yes")
            await submit(s, card)
            done = await polled(client, created.task.task_id)
            result = await task_result(client, created.task.task_id)
    assert declared is not None and declared.requests is not None and declared.requests.tools is not None
    asking, telling = tools["ask_person"].execution, tools["notify_person"].execution
    assert asking is not None and asking.task_support == "optional" and telling is None
    assert [t.task_id for t in listed.tasks] == [created.task.task_id]
    assert done.status == "completed"
    assert result.structured_content == {"action": "accept", "content": {"answer": True}}


async def test_revoking_an_agents_token_fails_its_task_waiting_for_approvers_and_ends_the_request(
    tmp_path: Path,
) -> None:
    """The agent's deploy task waits for approvers (Bob has approved); Alice's agent token is revoked: the task
    fails (its line says the token was revoked), the request ends for everyone and Carol's late tap runs nothing."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "ci-bot")
        created = await call_as_task(o.port, token, "prod__deploy", DEPLOY)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        late = card.button("✅ Approve").callback_data
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        await revoke(o.url, ALICE_ID, "ci-bot")
        await s.fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=15)
        answer = await o.carol.press_data(card, late)
        async with open_store(StorageConfig(url=Secret(o.url))) as store:
            kept = await store.tasks.get(created.task.task_id, None)
    assert kept is not None and kept.state is TaskState.FAILED
    assert kept.message is not None and "this agent token was revoked" in kept.message
    assert answer.show_alert and o.ledger.calls == []

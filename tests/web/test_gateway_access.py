"""Who an agent token lets in, and for how long: the gateway checks the token's person against the access rules
on every request, and a token whose access ends (revoked in the chat or by the operator's command in another
process) has its calls in flight ended, their cards saying so. The SDK's own `Client` is the agent; the bot is
the real one, on the fake Bot API."""

from __future__ import annotations

import json
import logging
import os
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError

from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat
from tests.web.agents import agent, agent_mode, gateway_scene, make_token, revoke, text_of
from tests.zygote import EXE, run_bot

pytestmark = pytest.mark.anyio

PROTOCOLS = ["legacy", "2026-07-28"]
GO_ON = {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}
REVOKED_CARD = "Cancelled: your agent's access was revoked"
REPO = Path(__file__).resolve().parents[2]


async def raw_list(port: int, token: str) -> httpx2.Response:
    async with httpx2.AsyncClient(trust_env=False) as http:
        return await http.post(
            f"http://127.0.0.1:{port}/mcp",
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_person_no_longer_allowed_is_refused_on_every_request_and_logged_once(
    tmp_path: Path, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Bob made a token while allowed; the bot now runs with only Alice in `allowed_users`. Every request of
    Bob's agent gets 403 with one line naming why (the SDK's client hands it to the agent), in both eras; the
    bot logs the refusal once, not once per request. Alice's agent still works."""
    async with gateway_scene(tmp_path, allowed=[ALICE_ID]) as (_, port, url):
        bob = await make_token(url, BOB_ID, "laptop")
        alice = await make_token(url, ALICE_ID, "ci")
        with caplog.at_level(logging.INFO, logger="bot.web"):
            statuses: list[int] = []
            with pytest.raises(BaseException) as raised:  # noqa: PT011 - an MCPError, or a group of one
                async with agent(port, bob, agent_mode(protocol), statuses) as client:
                    await client.list_tools()
            first, second = await raw_list(port, bob), await raw_list(port, bob)
        async with agent(port, alice, agent_mode(protocol)) as client:
            assert (await client.list_tools()).tools
    assert "may not use this bot" in str(_mcp_error(raised.value))
    assert set(statuses) == {403}
    assert first.status_code == second.status_code == 403
    line = first.json()["error"]["message"]
    assert f"user {BOB_ID}" in line and "allowed_users" in line and "\n" not in line
    refusals = [r for r in caplog.records if "refused (403)" in r.getMessage()]
    assert len(refusals) == 1, [r.getMessage() for r in refusals]


def _mcp_error(error: BaseException) -> MCPError:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, MCPError), repr(error)
    return error


async def card_for(s: Chat, words: str) -> Msg:
    return await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and words in m.text and bool(m.buttons))


async def revoke_by_operator(tmp_path: Path, url: str, *args: str) -> str:
    """`toolnexus-bot agents revoke ...` in its own process, on the bot's database; its output."""
    config = tmp_path / "operator.toml"
    config.write_text(
        f'[telegram]\ntoken = "123456:{"A" * 35}"\nallowed_users = [1]\n[storage]\nurl = "{url}"\n'
        '[servers.demo]\ncommand = "python"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "TOOLNEXUS_"))}
    done = await run_bot(
        [str(EXE), "agents", "revoke", "--config", str(config), *args],
        cwd=REPO,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("by", ["chat", "operator"])
async def test_revoking_a_token_ends_its_call_in_flight_and_its_card(
    tmp_path: Path, protocol: str, by: str
) -> None:
    """Alice's agent waits for her answer to a server's question; the token is revoked, by Alice's
    `/agents revoke` or by the operator's `toolnexus-bot agents revoke` in another process: the card loses its
    buttons and says the agent's access was revoked, the server hears `cancel`, and the agent's call ends with
    an error saying the token was revoked."""
    async with gateway_scene(tmp_path, protocol=protocol) as (s, port, url):
        token = await make_token(url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult] = []
        async with agent(port, token, agent_mode(protocol)) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                args = {"message": "Deploy now?", "schema_json": json.dumps(GO_ON)}
                got.append(await client.call_tool("t__ask_form", args))

            tg.start_soon(call)
            card = await card_for(s, "Deploy now?")
            if by == "chat":
                await s.alice.send("/agents revoke ci-bot")
            else:
                said = await revoke_by_operator(tmp_path, url, "--user", str(ALICE_ID), "--name", "ci-bot")
                assert "ci-bot" in said and token not in said
            await s.fake.wait_for(lambda m: m is card and REVOKED_CARD in m.text and not m.buttons)
        assert got[0].is_error
        assert "agent token was revoked" in text_of(got[0])


async def test_revoking_a_token_ends_its_agents_own_question(tmp_path: Path) -> None:
    """The agent's own `ask_person` card ends too when its token is revoked, and the agent gets the error."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "planner")
        got: list[types.CallToolResult] = []
        async with agent(port, token) as client, anyio.create_task_group() as tg:

            async def ask() -> None:
                got.append(await client.call_tool("ask_person", {"message": "Ship it?"}))

            tg.start_soon(ask)
            card = await card_for(s, "Ship it?")
            await s.alice.send("/agents revoke planner")
            await s.fake.wait_for(lambda m: m is card and REVOKED_CARD in m.text and not m.buttons)
        assert got[0].is_error and "agent token was revoked" in text_of(got[0])


async def test_a_token_at_its_session_cap_is_refused_while_another_persons_agent_still_initializes(
    tmp_path: Path,
) -> None:
    """`sessions_per_token = 3`: Bob's hog token holds three 2025-11-25 sessions; a fourth is refused with 429 and
    a line naming the cap, while Alice's legacy agent still initializes and lists tools. A session its client
    ended no longer counts; once the hog's clients end theirs, it may open one again."""
    async with gateway_scene(tmp_path, {"sessions_per_token": 3}, protocol="legacy") as (_, port, url):
        hog = await make_token(url, BOB_ID, "hog")
        alice = await make_token(url, ALICE_ID, "ci")
        async with AsyncExitStack() as held:
            async with agent(port, hog, "legacy") as client:  # its client ends it: no longer counted
                assert (await client.list_tools()).tools
            for _ in range(3):
                await held.enter_async_context(agent(port, hog, "legacy"))
            statuses: list[int] = []
            with pytest.raises(BaseException) as raised:  # noqa: PT011 - an MCPError, or a group of one
                async with agent(port, hog, "legacy", statuses):
                    pass
            assert statuses == [429]
            assert "already has 3 sessions open" in str(_mcp_error(raised.value))
            async with agent(port, alice, "legacy") as client:
                assert (await client.list_tools()).tools
        async with agent(port, hog, "legacy") as client:
            assert (await client.list_tools()).tools


async def test_opening_a_session_counts_as_a_call_in_the_limits(tmp_path: Path) -> None:
    """`calls_per_minute = 2` (an agent's own share: 1): the agent's first 2025-11-25 session opens; a second
    one within the minute is refused with 429 naming the limit, as a second tool call would be."""
    async with gateway_scene(tmp_path, protocol="legacy", limits={"calls_per_minute": 2}) as (_, port, url):
        token = await make_token(url, ALICE_ID, "ci")
        async with agent(port, token, "legacy") as client:
            assert (await client.list_tools()).tools
        statuses: list[int] = []
        with pytest.raises(BaseException) as raised:  # noqa: PT011 - an MCPError, or a group of one
            async with agent(port, token, "legacy", statuses):
                pass
    assert statuses == [429]
    assert "at most 1 calls a minute for agent ci" in str(_mcp_error(raised.value))


class _Terminations(logging.Handler):
    """Counts the SDK transport's "Terminating session" records; `done` once there were `expected`."""

    def __init__(self, expected: int) -> None:
        super().__init__(logging.INFO)
        self.expected = expected
        self.seen = 0
        self.done = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "Terminating session" in record.getMessage():
            self.seen += 1
            if self.seen >= self.expected:
                self.done.set()


async def test_revoking_a_token_closes_its_sessions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Bob's token holds two 2025-11-25 sessions and is revoked in the database (as another process would): the
    bot closes both within seconds (the SDK's transport says it terminated them), so they no longer take room
    under the SDK's cap on sessions."""
    transport = logging.getLogger("mcp.server.streamable_http")
    terminations = _Terminations(2)
    async with gateway_scene(tmp_path, protocol="legacy") as (_, port, url):
        hog = await make_token(url, BOB_ID, "hog")
        with caplog.at_level(logging.INFO, logger=transport.name):
            transport.addHandler(terminations)
            try:
                async with agent(port, hog, "legacy"), agent(port, hog, "legacy"):
                    await revoke(url, BOB_ID, "hog")
                    with anyio.fail_after(10):
                        await terminations.done.wait()
            finally:
                transport.removeHandler(terminations)

"""Who an agent token lets in, and for how long: the gateway checks the token's person against the access rules
on every request, and a token whose access ends (revoked in the chat or by the operator's command in another
process) has its calls in flight ended, their cards saying so. The SDK's own `Client` is the agent; the bot is
the real one, on the fake Bot API."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError

from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat
from tests.web.agents import agent, agent_mode, gateway_scene, make_token, text_of

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
    done = await anyio.run_process(
        [sys.executable, "-m", "bot", "agents", "revoke", "--config", str(config), *args],
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

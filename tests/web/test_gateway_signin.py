"""An agent's call that needs the person to sign in, end to end: the SDK's own `Client` is the agent, through
`/mcp` on the bot's web endpoint, to a protected MCP server (the SDK's server-side auth, `tests/fakes/servers/
oauth.py`); the sign-in card goes to the person on the fake Bot API and a scripted browser signs in over HTTP
on loopback, through the bot's own callback. The agent's call waits meanwhile and then returns the server's
result; the tokens are the person's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp_types as types
import pytest

from tests.fakes.servers.oauth import follow, serve_protected, sign_in
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, GROUP_ID, Chat, is_result, result_body
from tests.web.agents import PUBLIC_URL, agent, gateway_scene, make_token, text_of

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
CONSENT = "Open 127.0.0.1"


@asynccontextmanager
async def signin_scene(tmp_path: Path, url: str) -> AsyncIterator[tuple[Chat, int, str]]:
    """The gateway scene with one OAuth server `gh` at `url` (the sign-in callback on the same endpoint); (scene,
    port, database URL)."""
    async with gateway_scene(
        tmp_path, servers={"gh": {"url": url, "auth": "oauth"}}, in_process={}, secret_key=KEY
    ) as scene:
        yield scene


def is_sign_in_card(m: Msg) -> bool:
    return "needs you to sign in" in m.text and CONSENT in m.buttons


async def test_an_agents_call_waits_for_the_persons_sign_in_and_returns_the_servers_result(
    tmp_path: Path,
) -> None:
    """Alice has never signed in to `gh`; her agent calls `gh__whoami`. The sign-in card goes to Alice's private
    chat only, naming the agent; she consents and signs in in the browser (the bot's callback page); the agent's
    still-open call then returns the server's result for Alice, and no result lands in the chat (the agent has
    it). The tokens are hers: her own `/call gh whoami` from the chat runs without a second sign-in."""
    async with serve_protected() as (server, url), signin_scene(tmp_path, url) as (s, port, store_url):
        token = await make_token(store_url, ALICE_ID, "ci-bot")
        got: list[types.CallToolResult] = []
        async with agent(port, token) as client, anyio.create_task_group() as tg:

            async def call() -> None:
                got.append(await client.call_tool("gh__whoami", {}))

            tg.start_soon(call)
            card = await s.fake.wait_for(is_sign_in_card, timeout=15)
            assert card.chat_id == ALICE_ID
            assert "for your agent <b>ci-bot</b>" in card.html, card.html
            elsewhere = [m for chat in (BOB_ID, GROUP_ID) for m in s.fake.messages(chat)]
            assert not [m for m in elsewhere if "sign in" in m.text]

            await s.alice.press(card, CONSENT)
            card = await s.fake.wait_for(lambda m: m is card and "Consent given" in m.text)
            link = card.button(CONSENT).url
            assert link is not None and got == []
            back = await sign_in(link, "alice")
            assert back.startswith(PUBLIC_URL + "/oauth/callback?")
            page = await follow(back, f"http://127.0.0.1:{port}")
            assert page.status_code == 200 and "You can go back to Telegram" in page.text
            await s.fake.wait_for(lambda m: m is card and "Signed in to gh" in m.text and not m.buttons)
        assert text_of(got[0]) == "you are alice" and not got[0].is_error
        assert not [m for m in s.fake.messages(ALICE_ID) if "you are alice" in m.text]

        asked = await s.alice.send("/call gh whoami")
        result = await s.fake.wait_for(lambda m: is_result(m, asked), timeout=15)
        assert "you are alice" in result_body(result)
        cards = [m for m in s.fake.messages(ALICE_ID) if "sign in" in m.text or "Signed in" in m.text]
        assert cards == [card], cards  # the agent's one sign-in card, settled; none for the chat's call
    assert server.subjects_seen == ["alice", "alice"]
    assert server.grants["authorization_code"] == 1


async def test_an_agent_that_cancels_during_the_sign_in_ends_the_card_and_the_person_can_still_sign_in(
    tmp_path: Path,
) -> None:
    """The agent cancels its call while Alice's sign-in card is open: the card says the agent stopped waiting
    (not that the server withdrew it), without buttons. Nothing is left half done: her own `/call gh whoami`
    then shows a new sign-in card, and signing in completes it."""
    async with serve_protected() as (server, url), signin_scene(tmp_path, url) as (s, port, store_url):
        token = await make_token(store_url, ALICE_ID, "ci-bot")
        async with agent(port, token) as client:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await client.call_tool("gh__whoami", {})

                tg.start_soon(call)
                card = await s.fake.wait_for(is_sign_in_card, timeout=15)
                tg.cancel_scope.cancel()
            card = await s.fake.wait_for(lambda m: m is card and not m.buttons, timeout=15)
            assert "Cancelled: your agent stopped waiting" in card.text, card.text

        asked = await s.alice.send("/call gh whoami")
        again = await s.fake.wait_for(
            lambda m: is_sign_in_card(m) and m.message_id > asked.message_id, timeout=15
        )
        assert "agent" not in again.text
        await s.alice.press(again, CONSENT)
        again = await s.fake.wait_for(lambda m: m is again and "Consent given" in m.text)
        page = await follow(
            await sign_in(again.button(CONSENT).url or "", "alice"), f"http://127.0.0.1:{port}"
        )
        assert page.status_code == 200
        result = await s.fake.wait_for(lambda m: is_result(m, asked), timeout=15)
        assert "you are alice" in result_body(result)
    assert server.subjects_seen == ["alice"]

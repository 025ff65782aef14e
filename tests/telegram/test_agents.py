"""/agents end to end: the real bot (PTB against the fake Bot API, a SQLite database, the gateway on a local port)
makes, lists and revokes agent tokens, and the SDK's own `Client` is the agent that uses them at `/mcp`."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from bot.config import Secret, StorageConfig
from bot.core.agents import TOKEN_PREFIX, new_token_text
from bot.logs import REDACTED, setup_logging
from bot.store import open_store
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.handlers.agents import GATEWAY_OFF, NOT_YOURS, ONLY_CONFIGURED, PRIVATE_ONLY
from bot.web.gateway import GATEWAY_PATH
from tests.fakes.telegram import Msg
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID, BOB_ID, MALLORY_ID, Chat, bot_scene
from tests.web.agents import PUBLIC_URL, agent, gateway_scene

pytestmark = pytest.mark.anyio

TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]+")


async def tool_names(port: int, token: str, statuses: list[int] | None = None) -> set[str]:
    async with agent(port, token, statuses=statuses) as client:
        return {tool.name for tool in (await client.list_tools()).tools}


async def refused(port: int, token: str) -> bool:
    """Whether the gateway turns an agent with `token` away: the SDK's client fails to connect, on a 401."""
    statuses: list[int] = []
    try:
        await tool_names(port, token, statuses)
    except Exception:  # whichever error (group) the SDK raises when it cannot connect
        return bool(statuses) and set(statuses) == {401}
    return False


async def ask(s: Chat, text: str, *, who: str = "alice", chat: int | None = None) -> Msg:
    """`who` sends `text` (in their private chat unless `chat`); the bot's next message there."""
    person = getattr(s, who)
    await person.send(text, chat=chat)
    # A generous bound: the first command of a scene also waits for the bot's first getUpdates on a busy machine.
    return await s.fake.next_message(chat if chat is not None else person.id, timeout=15)


async def make(s: Chat, name: str) -> tuple[Msg, str]:
    """`/agents new <name>` in Alice's private chat: the message and the token it shows."""
    shown = await ask(s, f"/agents new {name}")
    found = TOKEN.findall(shown.text)
    assert found, shown.text
    return shown, found[0]


def entities(m: Msg, kind: str) -> list[str]:
    """The text of a message's entities of one kind (Telegram's offsets count UTF-16 units)."""
    units = m.text.encode("utf-16-le")
    return [
        units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        for e in m.entities
        if e["type"] == kind
    ]


async def live_tokens(url: str, user_id: int) -> list[str]:
    """The names of a person's live tokens, as the store has them."""
    async with open_store(StorageConfig(url=Secret(url))) as store:
        return [token.name for token in await store.agents.of(user_id)]


async def test_new_shows_the_token_once_with_the_lines_to_register_it_and_it_works_at_the_gateway(
    tmp_path: Path,
) -> None:
    """The token, the `claude mcp add` line and the JSON block (each a code entity, one tap to copy) name the
    public `/mcp` and the same token; the agent lists tools with it; the list never shows it again."""
    async with gateway_scene(tmp_path) as (s, port, _):
        shown, token = await make(s, "ci-bot")
        endpoint = PUBLIC_URL + GATEWAY_PATH
        assert set(TOKEN.findall(shown.text)) == {token}
        claude = f'claude mcp add --transport http ci-bot {endpoint} --header "Authorization: Bearer {token}"'
        blocks = entities(shown, "pre")
        assert claude in blocks
        (json_block,) = [b for b in blocks if b.startswith("{")]
        assert json.loads(json_block) == {
            "mcpServers": {
                "ci-bot": {"type": "http", "url": endpoint, "headers": {"Authorization": f"Bearer {token}"}}
            }
        }
        assert token in entities(shown, "code")
        assert "only time the token is shown" in shown.text and "/agents revoke ci-bot" in shown.text
        assert "until revoked" in shown.text  # token_days = 0

        assert {"notify_person", "ask_person", "demo__deploy"} <= await tool_names(port, token)
        listed = await ask(s, "/agents")
        assert "ci-bot" in listed.text and TOKEN.search(listed.text) is None


async def test_a_loopback_http_public_url_lets_an_agent_on_this_machine_try_the_gateway_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`public_url = "http://127.0.0.1:PORT"` (no TLS: trying it on a laptop) is accepted; the bot says once
    at start that nothing else can reach it, and the `claude mcp add` line `/agents new` prints names
    `http://127.0.0.1:PORT/mcp`, where the agent's token lists the tools."""
    port = free_port()
    local = f"http://127.0.0.1:{port}"
    web = {"listen": "127.0.0.1", "port": port, "public_url": local}
    storage = f"sqlite:///{tmp_path / 'bot.db'}"
    with caplog.at_level(logging.WARNING, logger="bot.telegram.app"):
        async with bot_scene(web=web, storage=storage, gateway={"enabled": True}) as s:
            shown, token = await make(s, "laptop")
            claude = (
                f"claude mcp add --transport http laptop {local}{GATEWAY_PATH} "
                f'--header "Authorization: Bearer {token}"'
            )
            assert claude in entities(shown, "pre")
            assert "demo__deploy" in await tool_names(port, token)
    warned = [r.getMessage() for r in caplog.records if "plain http" in r.getMessage()]
    assert warned == [
        f"[web] public_url {local} is plain http on this machine: agents here can try the gateway; nothing "
        "else can reach it (use https behind a reverse proxy for real)"
    ]


async def test_token_days_give_a_token_an_expiry_that_the_card_and_the_list_show(tmp_path: Path) -> None:
    port = free_port()
    web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL}
    storage = f"sqlite:///{tmp_path / 'bot.db'}"
    async with bot_scene(web=web, storage=storage, gateway={"enabled": True, "token_days": 30}) as s:
        shown, _ = await make(s, "nightly")
        assert "valid until 20" in shown.text
        listed = await ask(s, "/agents list")
        assert "expires 20" in listed.text


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("-dash-first", "is not one"),
        ("has space", "is not one"),
        ("a" * 33, "is not one"),
        ("semi;colon", "is not one"),
        ("<b>x</b>", "&lt;b&gt;"),  # escaped: the fake Bot API refuses a message with a stray tag
        ("", "/agents new &lt;name&gt;"),
    ],
)
async def test_a_bad_name_is_refused_with_the_rule_and_makes_no_token(
    tmp_path: Path, name: str, says: str
) -> None:
    async with gateway_scene(tmp_path) as (s, _, url):
        answer = await ask(s, f"/agents new {name}".rstrip())
        assert TOKEN.search(answer.text) is None
        assert says in answer.html
        assert await live_tokens(url, ALICE_ID) == []


async def test_a_duplicate_name_is_refused_and_the_first_token_still_works(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, port, url):
        _, first = await make(s, "ide")
        again = await ask(s, "/agents new ide")
        assert "already have an agent token named ide" in again.text and TOKEN.search(again.text) is None
        assert await live_tokens(url, ALICE_ID) == ["ide"]
        assert "notify_person" in await tool_names(port, first)
        # Bob's names are his own.
        bobs = await ask(s, "/agents new ide", who="bob")
        assert TOKEN.search(bobs.text) is not None


async def test_the_list_shows_calls_and_last_use_after_a_gateway_call(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, port, _):
        _, token = await make(s, "ci")
        before = await ask(s, "/agents")
        assert "never used" in before.text and "0 calls" in before.text and "made 20" in before.text
        async with agent(port, token) as client:
            result = await client.call_tool("notify_person", {"message": "build 42 is green"})
        assert not result.is_error
        await s.fake.next_message(s.alice, "build 42 is green")
        after = await ask(s, "/agents")
        assert "1 call" in after.text and "last used 20" in after.text and "never used" not in after.text


async def test_revoke_by_button_updates_the_list_and_the_gateway_refuses_the_token_at_once(
    tmp_path: Path,
) -> None:
    """An agent's open session works, then Alice taps Revoke: the list says so and drops the token, and the
    very next request of that session, and any new connection, is refused (401)."""
    async with gateway_scene(tmp_path) as (s, port, url):
        _, token = await make(s, "ci")
        _, other = await make(s, "ide")
        listed = await ask(s, "/agents")
        assert listed.buttons == ["Revoke ci", "Revoke ide"]
        data = listed.button("Revoke ci").callback_data
        statuses: list[int] = []
        async with agent(port, token, statuses=statuses) as client:
            assert (await client.list_tools()).tools
            tapped = await s.alice.press(listed, "Revoke ci")
            assert tapped.text == "Revoked ci." and not tapped.show_alert
            edited = await s.fake.wait_for(lambda m: m is listed and "Revoked ci" in m.text)
            assert edited.buttons == ["Revoke ide"]
            with pytest.raises(MCPError):
                await client.list_tools()
        first = statuses.index(401)
        assert first > 0 and set(statuses[:first]) <= {200, 202}  # the session worked until the tap
        assert set(statuses[first:]) == {401}
        assert await refused(port, token)
        assert await live_tokens(url, ALICE_ID) == ["ide"]
        assert "notify_person" in await tool_names(port, other)
        # A second tap on the old button changes nothing.
        again = await s.alice.press_data(listed, data)
        assert again.show_alert and "Already revoked" in again.text


async def test_revoke_by_name(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, port, url):
        _, token = await make(s, "ci")
        assert "notify_person" in await tool_names(port, token)
        answer = await ask(s, "/agents revoke ci")
        assert "Revoked ci" in answer.text and "You have no agent tokens" in answer.text
        assert await refused(port, token)
        assert await live_tokens(url, ALICE_ID) == []
        unknown = await ask(s, "/agents revoke ci")
        assert "no live agent token named ci" in unknown.text


async def test_another_person_cannot_revoke_by_a_forged_or_forwarded_tap(tmp_path: Path) -> None:
    """Bob sends Alice's Revoke data from his own chat (as on a forwarded copy), and data naming himself with
    Alice's token id: both are refused, and Alice's token still works."""
    async with gateway_scene(tmp_path) as (s, port, url):
        _, token = await make(s, "ci")
        listed = await ask(s, "/agents")
        alices = listed.button("Revoke ci").callback_data
        assert alices is not None
        bobs_chat = await ask(s, "/agents", who="bob")
        assert "You have no agent tokens" in bobs_chat.text

        forwarded = await s.bob.press_data(bobs_chat, alices)
        assert forwarded.show_alert and forwarded.text == NOT_YOURS
        unpacked = Button(Kind.AGENT, alices.split(":")[1], 0, Action.REVOKE, BOB_ID).pack()
        forged = await s.bob.press_data(bobs_chat, unpacked)
        assert forged.show_alert and "Revoked" not in forged.text

        assert await live_tokens(url, ALICE_ID) == ["ci"]
        assert "notify_person" in await tool_names(port, token)
        assert "Revoked" not in listed.text


async def test_with_the_gateway_off_agents_says_so_in_one_line_and_is_not_offered(tmp_path: Path) -> None:
    async with bot_scene(storage=f"sqlite:///{tmp_path / 'bot.db'}") as s:
        answer = await ask(s, "/agents new ci")
        assert answer.text == GATEWAY_OFF and not answer.buttons
        assert "agents" not in {command for command, _ in s.fake.commands}
        assert "/agents" not in (await ask(s, "/help")).text


async def test_with_the_gateway_on_agents_is_in_the_menu_and_the_help(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, _, _):
        assert "agents" in {command for command, _ in s.fake.commands}
        assert "/agents new <name>" in (await ask(s, "/help")).text


async def test_in_a_group_agents_answers_one_line_and_makes_nothing(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, _, url):
        answer = await ask(s, "/agents new ci", chat=s.group)
        assert answer.text == PRIVATE_ONLY and TOKEN.search(answer.text) is None
        assert (await ask(s, "/agents", chat=s.group)).text == PRIVATE_ONLY
        assert await live_tokens(url, ALICE_ID) == []


async def test_under_allow_everyone_a_stranger_cannot_make_tokens(tmp_path: Path) -> None:
    """A public demo: Mallory may call tools, but /agents is only for `allowed_users` (Alice)."""
    async with gateway_scene(tmp_path, allow_everyone=True, allowed=[ALICE_ID]) as (s, port, url):
        answer = await ask(s, "/agents new mine", who="mallory")
        assert answer.text == ONLY_CONFIGURED
        assert (await ask(s, "/agents", who="mallory")).text == ONLY_CONFIGURED
        assert await live_tokens(url, MALLORY_ID) == []
        _, token = await make(s, "ci")
        assert "notify_person" in await tool_names(port, token)


def fail_with(token: str) -> None:
    raise RuntimeError(f"the agent sent Authorization: Bearer {token}")


@pytest.mark.usefixtures("restored_logging")
def test_an_agent_token_never_reaches_a_log_record() -> None:
    """No config secret names it (people make tokens at run time): a token in a message's arguments, in a
    traceback is redacted by its form, for every handler."""
    token = new_token_text()
    setup_logging("INFO", ())
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logging.getLogger().addHandler(handler)
    log = logging.getLogger("some.library")
    log.info("request with %s", f"Bearer {token}")
    try:
        fail_with(token)
    except RuntimeError:
        log.exception("the call failed")
    text = stream.getvalue()
    assert token not in text and token[len(TOKEN_PREFIX) :] not in text
    assert f"request with Bearer {REDACTED}" in text and "fail_with" in text

"""`/hooks/<client>` with the payloads each agent's documentation records (Codex's: openai/codex PR #17563 and its
`permission-request.command.input.schema.json`; Claude Code's `PreToolUse`: its hooks reference), posted as the
agents post them: the card, the answer in the agent's own format, the refusals. Both agents' own CLIs are driven
in tests/hooks; here the events they do not send there (a PreToolUse, an Edit, an MCP tool)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import insert, select

from bot.config import Secret, StorageConfig
from bot.core.remembered import canonical_input
from bot.store import open_engine, open_store
from bot.store.tables import agent_tokens, remembered_decisions
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, Chat
from tests.web.agents import gateway_scene, make_token, revoke

pytestmark = pytest.mark.anyio

ASKS = "asks to:"
CODEX_PERMISSION = {
    "session_id": "019a-codex-session",
    "turn_id": "turn-7",
    "transcript_path": "/home/alice/.codex/sessions/rollout.jsonl",
    "cwd": "/home/alice/shop",
    "hook_event_name": "PermissionRequest",
    "model": "gpt-5",
    "permission_mode": "default",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -f /tmp/example.txt", "description": "clean up the <old> file"},
}
CLAUDE_EDIT = {
    "session_id": "6547c675-ee34-4825-9aa3-f0a77b3fe4d2",
    "transcript_path": "/home/alice/.claude/projects/shop/6547c675.jsonl",
    "cwd": "/home/alice/shop",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Edit",
    "tool_input": {
        "file_path": "/home/alice/shop/app.py",
        "old_string": "debug = True",
        "new_string": "debug = False",
    },
    "tool_use_id": "toolu_01",
}


def entities(m: Msg, kind: str) -> list[str]:
    units = m.text.encode("utf-16-le")
    return [
        units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        for e in m.entities
        if e["type"] == kind
    ]


async def post(port: int, client: str, body: dict[str, Any], token: str | None) -> httpx.Response:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
        return await http.post(f"http://127.0.0.1:{port}/hooks/{client}", json=body, headers=headers)


async def answered(
    s: Chat, port: int, client: str, body: dict[str, Any], token: str, button: str
) -> tuple[Msg, httpx.Response]:
    """Post `body` as the agent's hook, tap `button` on the card it brings: (the card, the hook's answer)."""
    got: list[httpx.Response] = []
    async with anyio.create_task_group() as tg:

        async def ask() -> None:
            got.append(await post(port, client, body, token))

        tg.start_soon(ask)
        card = await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and ASKS in m.text and bool(m.buttons))
        await s.alice.press(card, button)
    return card, got[0]


async def test_codexs_permission_request_brings_a_card_and_gets_codexs_answer(tmp_path: Path) -> None:
    """Codex's documented PermissionRequest for a shell command: the card shows the command as code, its
    justification escaped, the working directory and the session; Allow and Deny come back as Codex reads them."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "codex-box")
        card, allowed = await answered(s, port, "codex", CODEX_PERMISSION, token, "✅ Allow")
        assert "rm -f /tmp/example.txt" in entities(card, "pre")
        assert "clean up the <old> file" in card.text and "Codex" in card.text
        assert "/home/alice/shop" in card.text and "019a-codex-session" in card.text
        assert allowed.json() == {
            "hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}
        }
        _, denied = await answered(s, port, "codex", CODEX_PERMISSION, token, "❌ Deny")
    assert denied.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "toolnexus-bot: Alice denied this on the phone"},
        }
    }


async def test_claude_codes_pre_tool_use_edit_shows_a_diff_and_a_deny_gives_the_reason(
    tmp_path: Path,
) -> None:
    """A PreToolUse for an Edit: the card shows the change as a diff; Deny answers with `permissionDecision`
    and the reason Claude Code hands its model. Codex's PreToolUse, allowed, gets no decision (Codex honours only
    a deny there)."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        card, denied = await answered(s, port, "claude-code", CLAUDE_EDIT, token, "❌ Deny")
        (diff,) = entities(card, "pre")
        assert "-debug = True\n+debug = False" in diff and "app.py" in card.text
        assert denied.json() == {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "toolnexus-bot: Alice denied this on the phone",
            }
        }
        codex_pre = {**CODEX_PERMISSION, "hook_event_name": "PreToolUse", "tool_use_id": "call_1"}
        _, allowed = await answered(s, port, "codex", codex_pre, token, "✅ Allow")
    assert allowed.status_code == 200 and allowed.json() == {}


async def test_an_mcp_tool_is_shown_with_its_server_and_arguments_and_remembered_for_an_hour(
    tmp_path: Path,
) -> None:
    """An MCP tool's prompt names the tool and its server and shows its arguments; "Allow for an hour" answers
    the same ask in another session at once (no second card), saying it was the remembered rule."""
    ask = {
        **CLAUDE_EDIT,
        "hook_event_name": "PermissionRequest",
        "tool_name": "mcp__github__create_issue",
        "tool_input": {"repo": "shop", "title": "Fix <checkout>"},
    }
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        card, allowed = await answered(s, port, "claude-code", ask, token, "Allow for an hour")
        assert "create_issue" in card.text and "github" in card.text
        (arguments,) = entities(card, "pre")
        assert json.loads(arguments) == {"repo": "shop", "title": "Fix <checkout>"}
        assert allowed.json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
        again = await post(port, "claude-code", {**ask, "session_id": "another"}, token)
        cards = [m for m in s.fake.messages(ALICE_ID, from_bot=True) if ASKS in m.text]
    assert again.json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
    assert len(cards) == 1


async def test_a_hook_without_a_live_token_is_refused_and_reaches_nobody(tmp_path: Path) -> None:
    """No token, a made-up one, a revoked one: 401; an unknown client: 404; an event that is no permission
    prompt: an empty answer (no decision). None of them sends a card."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        assert (await post(port, "codex", CODEX_PERMISSION, None)).status_code == 401
        assert (await post(port, "codex", CODEX_PERMISSION, "tnx_madeup")).status_code == 401
        assert (await post(port, "cursor", CODEX_PERMISSION, token)).status_code == 404
        stop = {**CODEX_PERMISSION, "hook_event_name": "Stop"}
        quiet = await post(port, "codex", stop, token)
        assert quiet.status_code == 200 and quiet.json() == {}
        await revoke(url, ALICE_ID, "laptop")
        assert (await post(port, "codex", CODEX_PERMISSION, token)).status_code == 401
    assert not [m for m in s.fake.messages(ALICE_ID, from_bot=True) if ASKS in m.text]


async def test_the_audit_keeps_a_tools_input_as_audit_content_says(tmp_path: Path) -> None:
    """`[audit] content = "keys"`: the ask's row names the input's keys, never the command; the answer's row
    still says who decided."""
    async with gateway_scene(tmp_path, audit={"content": "keys"}) as (s, port, url):
        token = await make_token(url, ALICE_ID, "codex-box")
        await answered(s, port, "codex", CODEX_PERMISSION, token, "❌ Deny")
        async with open_store(StorageConfig(url=Secret(url))) as store:
            rows = [r.as_dict() for r in await store.audit.rows() if r.event.startswith("permission_")]
    asked, decided = rows
    assert asked["detail"]["input_keys"] == ["command", "description"]
    assert "rm -f" not in json.dumps(asked)
    assert decided["detail"]["by"] == "person" and decided["detail"]["name"] == "Alice"


async def test_an_allow_does_not_reach_an_agent_whose_token_was_revoked_while_the_card_waited(
    tmp_path: Path,
) -> None:
    """The token is revoked while Alice's card waits; her Allow then goes back as a deny that says why."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                got.append(await post(port, "codex", CODEX_PERMISSION, token))

            tg.start_soon(ask)
            card = await s.fake.wait_for(
                lambda m: m.chat_id == ALICE_ID and ASKS in m.text and bool(m.buttons)
            )
            await revoke(url, ALICE_ID, "laptop")
            await s.alice.press(card, "✅ Allow")
    decision = got[0].json()["hookSpecificOutput"]["decision"]
    assert decision["behavior"] == "deny" and "revoked" in decision["message"]


async def test_a_remembered_allow_a_database_writer_inserts_answers_the_prompt_but_its_audit_shows_no_making(
    tmp_path: Path,
) -> None:
    """SECURITY.md "The database", as its attacker tries it: beside an "allow for an hour" Alice gave on her
    phone, someone who can write the database inserts one of their own for another edit. The bot cannot tell it
    from hers (that prompt is allowed with no card); what it keeps is the record: the prompt's
    `permission_decided` names a decision that no `decision_remembered` row made, while hers has its row."""
    edit: dict[str, object] = {"file_path": "/etc/passwd", "old_string": "x", "new_string": "y"}
    ask = {**CLAUDE_EDIT, "hook_event_name": "PermissionRequest", "tool_input": edit}
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        mine = {**CLAUDE_EDIT, "hook_event_name": "PermissionRequest"}
        await answered(s, port, "claude-code", mine, token, "Allow for an hour")
        now = dt.datetime.now(dt.UTC)
        tool_input = canonical_input(edit)
        engine = await open_engine(url, migrate=False)
        try:
            async with engine.begin() as conn:
                agent_id = await conn.scalar(
                    select(agent_tokens.c.id).where(agent_tokens.c.user_id == ALICE_ID)
                )
                await conn.execute(
                    insert(remembered_decisions).values(
                        user_id=ALICE_ID,
                        agent_id=agent_id,
                        tool="Edit",
                        input=tool_input,
                        input_hash=hashlib.sha256(tool_input.encode()).hexdigest(),
                        allow=True,
                        span="hour",
                        session="",
                        made_at=now.isoformat(timespec="microseconds"),
                        until=(now + dt.timedelta(hours=1)).isoformat(timespec="microseconds"),
                    )
                )
        finally:
            await engine.dispose()
        answer = await post(port, "claude-code", ask, token)
        async with open_store(StorageConfig(url=Secret(url))) as store:
            rows = [r.as_dict() for r in await store.audit.rows()]
    assert answer.json()["hookSpecificOutput"]["decision"] == {"behavior": "allow"}
    assert len([m for m in s.fake.messages(ALICE_ID, from_bot=True) if ASKS in m.text]) == 1  # hers only
    used = [
        r["detail"] for r in rows if r["event"] == "permission_decided" and r["detail"]["by"] == "remembered"
    ]
    made = [r["detail"]["decision"] for r in rows if r["event"] == "decision_remembered"]
    assert len(made) == 1 and [u["decision_id"] in made for u in used] == [False]

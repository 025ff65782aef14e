"""`/hooks/<client>` under `[[approvals]]` rules and with decisions remembered in the database: a prompt a rule with
a quorum covers goes to its approvers (as a gated call), the card's remember buttons are the ones the rules allow,
and a remembered answer outlives the process, naming its maker. Real PTB against the fake Bot API, a SQLite
file, the hook posted as Claude Code and Codex post it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from bot.config import Secret, StorageConfig
from bot.store import open_store
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat
from tests.web.agents import agent, gateway_scene, make_token, text_of
from tests.web.test_gateway_approvals import CAROL_ID, DAVE_ID, OPS, ops_scene
from tests.web.test_hooks import ASKS, CODEX_PERMISSION, post

pytestmark = pytest.mark.anyio

RM = {**CODEX_PERMISSION, "tool_input": {"command": "rm -rf build", "description": "clean"}}
TWO_FOR_RM = {"hooks": ["Bash(rm *)"], "approvers": [BOB_ID, CAROL_ID, DAVE_ID], "quorum": 2, "chat": OPS}
ALICE_ALONE = {"approvers": [ALICE_ID], "self_approval": True}
NEVER_PUSH = {"hooks": ["Bash(git push*)"], **ALICE_ALONE, "remember": False}
ALWAYS_NPM = {"hooks": ["Bash(npm *)"], **ALICE_ALONE, "remember": "always"}
CLAUDE_BASH = {
    "session_id": "6547c675-ee34-4825-9aa3-f0a77b3fe4d2",
    "cwd": "/home/alice/shop",
    "permission_mode": "default",
    "hook_event_name": "PreToolUse",
    "tool_name": "Bash",
    "tool_input": {"command": "make test"},
    "tool_use_id": "toolu_01",
}


def bash(body: dict[str, Any], command: str) -> dict[str, Any]:
    return {**body, "tool_input": {"command": command}}


def behaviour(answer: httpx.Response) -> tuple[str, str]:
    """A PermissionRequest's answer as (allow|deny, message)."""
    decision = answer.json()["hookSpecificOutput"]["decision"]
    return decision["behavior"], decision.get("message", "")


def person_cards(s: Chat) -> list[Msg]:
    return [m for m in s.fake.messages(ALICE_ID, from_bot=True) if ASKS in m.text]


async def audit_rows(url: str) -> list[dict[str, Any]]:
    async with open_store(StorageConfig(url=Secret(url))) as store:
        return [row.as_dict() for row in await store.audit.rows()]


async def test_a_rule_with_a_quorum_of_two_puts_an_agents_rm_to_its_approvers_and_allows_only_when_both_approve(
    tmp_path: Path,
) -> None:
    """`hooks = ["Bash(rm *)"]`, quorum 2: the prompt reaches the approvers' card (Approve / Reject only), not
    Alice's one-tap card; Bob's approval alone leaves the agent waiting, Carol's makes it allow. The next
    `rm` is denied when Bob rejects, the agent told who rejected it. Audited as a call's approval is."""
    async with ops_scene(tmp_path, approvals=[TWO_FOR_RM]) as o:
        s = o.s
        token = await make_token(o.url, ALICE_ID, "codex-box")
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                got.append(await post(o.port, "codex", RM, token))

            tg.start_soon(ask)
            card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
            assert card.buttons == ["✅ Approve", "❌ Reject"]
            assert "Alice (agent codex-box) asks to call Bash on codex" in card.text
            assert "rm -rf build" in card.text and "Needs 2 of: Bob, Carol, Dave" in card.text
            await s.bob.press(card, "✅ Approve")
            card = await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
            assert got == []
            await o.carol.press(card, "✅ Approve")
        assert behaviour(got[0]) == ("allow", "")

        got.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            second = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup) and m is not card)
            await s.bob.press(second, "❌ Reject")
        allow, message = behaviour(got[0])
        assert allow == "deny" and "rejected by Bob" in message
        assert person_cards(s) == []
        rows = await audit_rows(o.url)
    events = [r["event"] for r in rows]
    assert events.count("approval_requested") == 2 and events.count("approved") == 2
    assert "rejected" in events
    decided = [r["detail"] for r in rows if r["event"] == "permission_decided"]
    assert [(d["by"], d["allow"]) for d in decided] == [("approvers", True), ("approvers", False)]


async def test_the_card_offers_only_the_remember_buttons_the_rules_allow_and_always_where_they_say_so(
    tmp_path: Path,
) -> None:
    """Alice is the one approver of two rules: under `remember = false` her card has Allow and Deny only; under
    `remember = "always"` it also has "Always for exactly this", and that answer lets exactly the same command
    through at once afterwards, naming her."""
    async with gateway_scene(tmp_path, approvals=[NEVER_PUSH, ALWAYS_NPM]) as (s, port, url):
        token = await make_token(url, ALICE_ID, "codex-box")
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:

            async def ask(body: dict[str, Any]) -> None:
                got.append(await post(port, "codex", body, token))

            tg.start_soon(ask, bash(CODEX_PERMISSION, "git push origin main"))
            push = await s.fake.wait_for(lambda m: ASKS in m.text and bool(m.buttons))
            assert push.buttons == ["✅ Allow", "❌ Deny"]
            await s.alice.press(push, "✅ Allow")
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, bash(CODEX_PERMISSION, "npm test"))
            npm = await s.fake.wait_for(lambda m: m is not push and ASKS in m.text and bool(m.buttons))
            assert npm.buttons == [
                "✅ Allow",
                "❌ Deny",
                "Allow for this session",
                "Allow for an hour",
                "Always for exactly this",
            ]
            await s.alice.press(npm, "Always for exactly this")
        with anyio.fail_after(20):
            again = await post(
                port, "codex", {**bash(CODEX_PERMISSION, "npm test"), "session_id": "other"}, token
            )
        assert behaviour(again)[0] == "allow" and len(person_cards(s)) == 2
        rows = await audit_rows(url)
    (last,) = [r["detail"] for r in rows if r["event"] == "permission_decided"][-1:]
    assert last["by"] == "remembered" and last["span"] == "always"
    assert last["line"].startswith("allowed by the rule Alice made at ")


async def test_a_session_answer_is_kept_in_the_database_and_answers_after_a_restart_naming_its_maker(
    tmp_path: Path,
) -> None:
    """Alice allows `make test` for this session; the bot stops; a new process on the same database file answers
    the same ask in the same session at once (no card), saying "allowed by the rule Alice made at ..." although
    this process never saw her tap; the same command in another session gets a card."""
    async with gateway_scene(tmp_path) as (s, port, url):
        token = await make_token(url, ALICE_ID, "laptop")
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:

            async def ask(body: dict[str, Any]) -> None:
                got.append(await post(port, "claude-code", body, token))

            tg.start_soon(ask, CLAUDE_BASH)
            card = await s.fake.wait_for(lambda m: ASKS in m.text and bool(m.buttons))
            await s.alice.press(card, "Allow for this session")
        assert got[0].json()["hookSpecificOutput"]["permissionDecision"] == "allow"
        s.stop.set()
        with anyio.fail_after(20):
            await s.stopped.wait()

        async with gateway_scene(tmp_path, world=s) as (again, port, _):
            with anyio.fail_after(20):
                answer = await post(port, "claude-code", CLAUDE_BASH, token)
            said = answer.json()["hookSpecificOutput"]
            assert said["permissionDecision"] == "allow"
            assert said["permissionDecisionReason"].startswith(
                "toolnexus-bot: allowed by the rule Alice made at "
            )
            assert said["permissionDecisionReason"].endswith(" UTC (session)")
            assert len(person_cards(again)) == 1
            got.clear()
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, {**CLAUDE_BASH, "session_id": "another"})
                other = await again.fake.wait_for(
                    lambda m: m is not card and ASKS in m.text and bool(m.buttons)
                )
                await again.alice.press(other, "❌ Deny")
            assert got[0].json()["hookSpecificOutput"]["permissionDecision"] == "deny"


async def test_a_persons_remembered_allow_does_not_pass_a_rule_whose_approvers_are_others(
    tmp_path: Path,
) -> None:
    """Alice allows `rm -rf build` for an hour; the bot restarts with a rule giving `rm` to Bob, Carol and Dave
    (one of them enough, remembering allowed), listed after one that leaves `rm` to Alice herself: her answer is
    not used, the prompt goes to their card (not hers), and only Bob's approval lets it through."""
    async with ops_scene(tmp_path, approvals=[]) as o:
        token = await make_token(o.url, ALICE_ID, "codex-box")
        got: list[httpx.Response] = []
        async with anyio.create_task_group() as tg:

            async def ask(port: int) -> None:
                got.append(await post(port, "codex", RM, token))

            tg.start_soon(ask, o.port)
            card = await o.s.fake.wait_for(lambda m: ASKS in m.text and bool(m.buttons))
            await o.s.alice.press(card, "Allow for an hour")
        assert behaviour(got[0])[0] == "allow"
        o.s.stop.set()
        with anyio.fail_after(20):
            await o.s.stopped.wait()

        one_of_three = {**TWO_FOR_RM, "quorum": 1}
        alices_own = {"hooks": ["Bash(rm *)"], **ALICE_ALONE}
        async with ops_scene(tmp_path, world=o, approvals=[alices_own, one_of_three]) as again:
            got.clear()
            async with anyio.create_task_group() as tg:
                tg.start_soon(ask, again.port)
                approval = await again.s.fake.wait_for(lambda m: again.card(m) and bool(m.reply_markup))
                assert got == [] and len(person_cards(again.s)) == 1
                await again.s.bob.press(approval, "✅ Approve")
            allow, _ = behaviour(got[0])
            assert allow == "allow"
            rows = await audit_rows(o.url)
    decided = [r["detail"] for r in rows if r["event"] == "permission_decided"]
    assert [d["by"] for d in decided] == ["person", "approvers"]


async def test_claude_codes_permission_prompt_tool_under_the_rule_waits_for_both_approvers_too(
    tmp_path: Path,
) -> None:
    """The gateway's `permission_prompt` (Claude Code's `--permission-prompt-tool`) for `rm -rf build` goes to
    the same approvers' card; the tool answers `deny` with who rejected it."""
    async with ops_scene(tmp_path, approvals=[TWO_FOR_RM]) as o:
        token = await make_token(o.url, ALICE_ID, "laptop")
        got: list[types.CallToolResult] = []
        async with agent(o.port, token) as client, anyio.create_task_group() as tg:

            async def prompt() -> None:
                arguments = {"tool_name": "Bash", "input": {"command": "rm -rf build"}}
                got.append(await client.call_tool("permission_prompt", arguments))

            tg.start_soon(prompt)
            card = await o.s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
            assert "Alice (agent laptop) asks to call Bash on prompt-tool" in card.text
            await o.carol.press(card, "❌ Reject")
        answer = json.loads(text_of(got[0]))
        assert answer["behavior"] == "deny" and "rejected by Carol" in answer["message"]
        assert person_cards(o.s) == []

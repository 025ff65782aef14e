"""/agents and remembered decisions end to end: the real bot (PTB against the fake Bot API, a SQLite database, the
gateway on) lists each agent's remembered answers to its permission prompts, escaped and readable, and forgets
one on its person's tap only; the decisions are kept and checked through another store on the same database, as
another process of the fleet would."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from bot.config import ApprovalRule, Secret, StorageConfig
from bot.core.remembered import Ask, Decision, Span
from bot.store import Store, open_store
from bot.store.remembered import StoredMemory
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.handlers.agents import NOT_YOURS
from tests.telegram.harness import ALICE_ID, BOB_ID
from tests.telegram.test_agents import ask, make
from tests.web.agents import gateway_scene

pytestmark = pytest.mark.anyio

NOW = dt.datetime.now(dt.UTC)
ALWAYS_FOR_NPM = ApprovalRule(hooks=("Bash(npm *)",), approvers=frozenset({ALICE_ID}), remember="always")


@asynccontextmanager
async def memory(url: str) -> AsyncIterator[tuple[StoredMemory, Store]]:
    """The remembered decisions of the bot's database, through a store of their own (as another process)."""
    async with open_store(StorageConfig(url=Secret(url))) as store:
        yield StoredMemory(store.engine, store.audit, rules=[ALWAYS_FOR_NPM]), store


async def agent_ids(url: str, user_id: int) -> dict[str, int]:
    async with open_store(StorageConfig(url=Secret(url))) as store:
        return {token.name: token.id for token in await store.agents.of(user_id)}


def bash(person: int, agent: int, command: str, session: str = "5f0c2a9e-77aa-4f0e-9d7c-1b2c3d4e5f60") -> Ask:
    return Ask.of(person, agent, session, "Bash", {"command": command, "description": "why"})


async def keep(url: str, asked: Ask, allow: bool, span: Span) -> Decision:
    async with memory(url) as (kept, _):
        return await kept.keep(asked, allow, span, NOW)


async def test_agents_lists_each_agents_remembered_answers_escaped_with_a_forget_button_each(
    tmp_path: Path,
) -> None:
    """Allow for a session, deny for an hour, allow always: each under its agent's name with allow/deny, what,
    for how long and when made; a command holding HTML shows as text; a long one keeps its start and its end;
    Bob's decisions are not on Alice's list."""
    async with gateway_scene(tmp_path) as (s, _, url):
        await make(s, "claude")
        await make(s, "codex")
        ids = await agent_ids(url, ALICE_ID)
        long = "make build && " + " && ".join(f"step{i}" for i in range(60)) + " && rm -rf /srv/data"
        await keep(url, bash(ALICE_ID, ids["claude"], 'echo "<b>hi</b>" && ls'), True, Span.SESSION)
        await keep(url, bash(ALICE_ID, ids["codex"], long), False, Span.HOUR)
        await keep(url, bash(ALICE_ID, ids["claude"], "npm test"), True, Span.ALWAYS)
        await keep(url, bash(BOB_ID, 999, "rm -rf bobs"), True, Span.HOUR)

        listed = await ask(s, "/agents")
        text = listed.text
        assert "Remembered answers" in text
        assert 'claude: ✅ allow Bash echo "<b>hi</b>" && ls — for session 5f0c2a9e… · made 20' in text
        assert "claude: ✅ allow Bash npm test — always · made 20" in text
        until = (NOW + dt.timedelta(hours=1)).strftime("%Y-%m-%d %H:%M UTC")
        (line,) = [ln for ln in text.splitlines() if "codex:" in ln]
        assert line.startswith("• codex: ⛔ deny Bash make build && step0 && ")
        assert (
            f"rm -rf /srv/data — until {until} · made 20" in line and "step30" not in line and " … " in line
        )
        assert "rm -rf bobs" not in text
        assert listed.buttons[:2] == ["Revoke claude", "Revoke codex"]
        forget = listed.buttons[2:]
        assert len(forget) == 3 and all(label.startswith("Forget ") for label in forget)
        assert forget[0] == "Forget allow npm test"  # newest first


async def test_forget_by_button_ends_the_answer_in_every_process_and_is_audited(tmp_path: Path) -> None:
    """Alice taps Forget: the list is drawn again saying so, the decision no longer answers through another store
    on the database, an audit row names it; a second tap on the old button says it is gone already."""
    async with gateway_scene(tmp_path) as (s, _, url):
        await make(s, "claude")
        asked = bash(ALICE_ID, (await agent_ids(url, ALICE_ID))["claude"], "pytest -x")
        kept = await keep(url, asked, True, Span.SESSION)
        listed = await ask(s, "/agents")
        data = listed.button("Forget allow pytest -x").callback_data
        tapped = await s.alice.press(listed, "Forget allow pytest -x")
        assert tapped.text == "Forgotten." and not tapped.show_alert
        edited = await s.fake.wait_for(lambda m: m is listed and "Forgot: allow Bash pytest -x" in m.text)
        assert edited.buttons == ["Revoke claude"]
        async with memory(url) as (other, store):
            assert await other.recall(asked, NOW) is None
            rows = [(r.event, r.user_id, r.as_dict()["detail"]) for r in await store.audit.rows()]
        assert ("decision_forgotten", ALICE_ID) in [(event, user) for event, user, _ in rows]
        (forgotten,) = [detail for event, _, detail in rows if event == "decision_forgotten"]
        assert forgotten["decision"] == kept.id and forgotten["by"] == ALICE_ID
        again = await s.alice.press_data(listed, data)
        assert again.show_alert and again.text == "Already forgotten."


async def test_another_person_cannot_forget_by_a_forwarded_or_forged_tap(tmp_path: Path) -> None:
    """Bob sends Alice's Forget data from his chat, and data naming himself with her decision's id: both refused,
    and her decision still answers."""
    async with gateway_scene(tmp_path) as (s, _, url):
        await make(s, "claude")
        asked = bash(ALICE_ID, (await agent_ids(url, ALICE_ID))["claude"], "make deploy")
        kept = await keep(url, asked, True, Span.HOUR)
        listed = await ask(s, "/agents")
        alices = listed.button("Forget allow make deploy").callback_data
        assert alices is not None
        bobs_chat = await ask(s, "/agents", who="bob")
        forwarded = await s.bob.press_data(bobs_chat, alices)
        assert forwarded.show_alert and forwarded.text == NOT_YOURS
        forged = await s.bob.press_data(
            bobs_chat, Button(Kind.AGENT, str(kept.id), 0, Action.FORGET, BOB_ID).pack()
        )
        assert forged.show_alert and forged.text == "Already forgotten."
        async with memory(url) as (other, _):
            assert await other.recall(asked, NOW) == kept


@pytest.mark.parametrize("quorum", [2, 1], ids=["two approvers", "one of two others"])
async def test_an_answer_a_rule_of_other_approvers_now_covers_is_listed_as_not_used(
    tmp_path: Path, quorum: int
) -> None:
    """Kept before `Bash(rm *)` got a rule in the config (a quorum of 2; or 1 of two approvers who are not Alice,
    so the prompt goes to them): still listed (and forgettable), saying that it is not used; an answer no rule
    covers says nothing of the kind."""
    rule = {"hooks": ["Bash(rm *)"], "approvers": [2001, 2002], "quorum": quorum}
    async with gateway_scene(tmp_path, approvals=[rule]) as (s, _, url):
        await make(s, "claude")
        claude = (await agent_ids(url, ALICE_ID))["claude"]
        await keep(url, bash(ALICE_ID, claude, "make && rm -rf build"), True, Span.HOUR)
        await keep(url, bash(ALICE_ID, claude, "ls -la"), True, Span.HOUR)
        listed = await ask(s, "/agents")
        (rm,) = [line for line in listed.text.splitlines() if "rm -rf build" in line]
        (ls,) = [line for line in listed.text.splitlines() if "ls -la" in line]
        assert rm.endswith("not used: an approval rule asks for this now")
        assert "not used" not in ls
        assert len(listed.buttons) == 3

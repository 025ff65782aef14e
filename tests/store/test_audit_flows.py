"""The audit log written by the real bot (PTB against the fake Bot API, the demo server), read back by the
`toolnexus-bot audit` command (`bot.cli.main` in process: the process is not the point) and by /audit in chat;
on SQLite and PostgreSQL alike."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import update

from bot.config import AuditContent, Secret, StorageConfig
from bot.core import Origin, Outcome, Prompt
from bot.store import open_store
from bot.store.tables import audit
from bot.telegram.handlers.audit import NOT_ADMIN
from mapping import Answer, Request, RequestKind
from tests.fakes.telegram import Msg
from tests.inprocess import toolnexus
from tests.telegram.harness import ALICE_ID, BOB_ID, bot_scene

pytestmark = pytest.mark.anyio


def has_buttons(msg: Msg) -> bool:
    return bool(msg.reply_markup)


def audit_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return toolnexus("audit", "--config", str(config), *args)


async def test_a_deploy_is_audited_in_order_and_the_chain_verifies_until_a_row_is_edited(
    store_url: str, tmp_path: Path
) -> None:
    """Call started, question shown, answered (with content), ..., call ended: one row each, in order,
    shown by /audit to an admin only; `audit --verify` holds, then names the row edited by hand."""
    async with bot_scene(storage=store_url, admins=[ALICE_ID]) as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        await s.alice.press(card, "Staging (safe to try)")
        card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        confirm = await s.fake.wait_for(lambda m: "Deploy web to staging?" in m.text and has_buttons(m))
        await s.alice.press(confirm, "Decline")
        await s.fake.wait_for(lambda m: "Deployment declined" in m.text)
        await s.alice.send("/audit")
        shown = await s.fake.next_message(s.alice, containing="Audit log")
        await s.bob.send("/audit")
        refused = await s.fake.next_message(s.bob, containing="admins")
    assert "call_ended" in shown.text and "answered" in shown.text and "deploy" in shown.text
    assert refused.text == NOT_ADMIN

    config = tmp_path / "bot.toml"
    config.write_text(f'[storage]\nurl = "{store_url}"\n[servers.demo]\ncommand = "python"\n')
    listed = audit_cli(config, "--user", str(ALICE_ID))
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["event"], r["tool"]) for r in rows] == [
        ("call_started", "deploy"),
        ("question_shown", "deploy"),
        ("answered", "deploy"),
        ("question_shown", "deploy"),
        ("answered", "deploy"),
        ("call_ended", "deploy"),
    ]
    assert rows[2]["detail"]["action"] == "accept" and rows[2]["detail"]["content"] == {
        "environment": "staging"
    }
    assert rows[4]["detail"]["action"] == "decline"
    assert rows[1]["request_id"].startswith("elc-") and rows[1]["request_id"] == rows[2]["request_id"]
    assert len(rows[1]["detail"]["schema_sha256"]) == 64
    assert all(r["user_id"] == ALICE_ID and r["server"] == "demo" for r in rows)
    assert audit_cli(config, "--user", str(BOB_ID)).stdout == ""

    verified = audit_cli(config, "--verify")
    assert verified.returncode == 0 and f"{len(rows)} rows" in verified.stdout, verified.stdout
    async with open_store(StorageConfig(url=Secret(store_url))) as store, store.engine.begin() as conn:
        await conn.execute(update(audit).where(audit.c.seq == 3).values(detail='{"action":"decline"}'))
    broken = audit_cli(config, "--verify")
    assert broken.returncode == 1 and "row 3 (" in broken.stdout and "altered" in broken.stdout, broken.stdout


async def test_a_cancelled_question_is_audited_as_the_persons_cancel(store_url: str) -> None:
    """The Cancel button: `answered` with action cancel, then the call's outcome."""
    async with bot_scene(storage=store_url) as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        await s.alice.press(card, "Cancel")
        await s.fake.wait_for(lambda m: "Deployment cancelled" in m.text)
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        rows = await store.audit.rows()
        assert await store.audit.verify() == (4, None)
    assert [r.event for r in rows] == ["call_started", "question_shown", "answered", "call_ended"]
    assert json.loads(rows[2].detail) == {"action": "cancel", "outcome": "cancelled"}


@pytest.mark.parametrize(
    ("content", "answer_kept", "arguments_kept"),
    [
        (AuditContent.FULL, {"content": {"size": 4}}, {"content": {"tool_arg": "x"}}),
        (AuditContent.KEYS, {"keys": ["size"]}, {"keys": ["tool_arg"]}),
        (AuditContent.NONE, {}, {}),
    ],
)
async def test_audit_content_decides_what_of_answers_and_arguments_is_kept(
    store_url: str, content: AuditContent, answer_kept: dict[str, object], arguments_kept: dict[str, object]
) -> None:
    """`[audit] content`: full keeps values, keys keeps field names, none keeps neither."""
    async with open_store(StorageConfig(url=Secret(store_url)), content) as store:
        origin = Origin(chat_id=5, user_id=5)
        await store.observer.call_started(origin, "demo", "t", {"tool_arg": "x"})
        prompt = Prompt(Request(id="elc-1-1", kind=RequestKind.INPUT, prompt="How many?"), origin, "demo")
        await store.observer.prompt_ended(
            prompt, Outcome.ANSWERED, Answer(id="elc-1-1", ok=True, data={"size": 4})
        )
        rows = await store.audit.rows()
    assert json.loads(rows[0].detail) == {"arguments": arguments_kept}
    assert json.loads(rows[1].detail) == {"action": "accept", "outcome": "answered", **answer_kept}
    assert rows[1].tool == "t"


@pytest.mark.parametrize(
    ("outcome", "event"),
    [
        (Outcome.EXPIRED, "expired"),
        (Outcome.SHUTDOWN, "cancelled"),
        (Outcome.UNDELIVERABLE, "cancelled"),
        (Outcome.SERVER_CANCELLED, "withdrawn"),
        (Outcome.SERVER_GONE, "withdrawn"),
        (Outcome.DECLINED, "answered"),
    ],
)
async def test_each_way_a_question_ends_has_its_event(store_url: str, outcome: Outcome, event: str) -> None:
    """Expired, cancelled by the bot, withdrawn by the server, or answered by the person: one row each."""
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        prompt = Prompt(Request(id="elc-1-2", kind=RequestKind.INPUT, prompt="Sure?"), Origin(5, 5), "demo")
        answer = None if event == "withdrawn" else Answer(id="elc-1-2", ok=False, reason=outcome.value)
        await store.observer.prompt_ended(prompt, outcome, answer)
        (row,) = await store.audit.rows()
    assert (row.event, row.request_id, json.loads(row.detail)["outcome"]) == (event, "elc-1-2", outcome.value)


async def test_a_question_nobody_answers_is_audited_as_expired(store_url: str) -> None:
    """The prompt's timeout ends it: `expired`, and the chain still verifies."""
    async with bot_scene(storage=store_url, timeout_s=0.5) as s:
        await s.alice.send("/call demo deploy")
        await s.fake.wait_for(lambda m: "Expired" in m.text)
        await s.fake.wait_for(lambda m: "Deployment cancelled" in m.text)
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        rows = await store.audit.rows()
        assert await store.audit.verify() == (4, None)
    assert [r.event for r in rows] == ["call_started", "question_shown", "expired", "call_ended"]

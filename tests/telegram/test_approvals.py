"""Approvals end to end: the real bot (PTB against the fake Bot API) with a real MCP server whose calls are
written down, several people in an approval group, and a SQLite store."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.servers.elicit import build_server as build_elicit
from tests.fakes.servers.ledger import Ledger
from tests.fakes.telegram import FakeUser, Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat, bot_scene, is_result, result_body

pytestmark = pytest.mark.anyio

CAROL_ID, DAVE_ID = 3003, 3004
OPS = -7001
DEPLOY = "/call prod deploy service=web version=1.2.3"


@dataclass
class Ops:
    """The scene, with the approvers Carol and Dave (not allowed to use the bot) and the approval group."""

    s: Chat
    carol: FakeUser
    dave: FakeUser
    ops: int
    ledger: Ledger

    def card(self, m: Msg) -> bool:
        return m.chat_id == self.ops and "Approval" in m.text


@asynccontextmanager
async def ops_scene(tmp_path: Path, storage: str | None = None, **rule: Any) -> AsyncIterator[Ops]:
    """Alice may call tools; Bob, Carol and Dave approve `deploy` on `prod` in the group OPS (2 of 3 unless
    `rule` says otherwise), where everyone has said hello (so the bot knows their names). The store is
    `storage`, by default a SQLite file in `tmp_path`."""
    ledger = Ledger()
    approval = {
        "servers": ["prod"],
        "tools": ["deploy*"],
        "approvers": [BOB_ID, CAROL_ID, DAVE_ID],
        "quorum": 2,
        "chat": OPS,
        **rule,
    }
    async with bot_scene(
        in_process={"prod": ledger.build, "t": build_elicit},
        storage=storage or f"sqlite:///{tmp_path / 'bot.db'}",
        approvals=[approval],
    ) as s:
        carol = s.fake.user(id=CAROL_ID, first_name="Carol")
        dave = s.fake.user(id=DAVE_ID, first_name="Dave")
        ops = s.fake.group(OPS, title="On-call", members=[s.alice, s.bob, carol, dave, s.mallory])
        for person in (s.bob, carol, dave):
            await person.send("here", chat=ops)
        yield Ops(s, carol, dave, ops, ledger)


async def test_two_of_three_approvers_let_the_call_run_once_with_the_approved_arguments(
    tmp_path: Path,
) -> None:
    """Alice's deploy waits; the card shows exactly what will be sent and who must agree; Bob's approval is
    counted on the card (1 of 2) and nothing is sent; Carol's makes the quorum: the server receives the call
    exactly once with those arguments, the card settles naming both, and Alice sees who approved."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        asked = await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        assert "Alice" in card.text and "deploy" in card.text and "prod" in card.text
        assert "service: web" in card.text and "version: 1.2.3" in card.text
        assert "Needs 2 of: Bob, Carol, Dave" in card.text

        answer = await s.bob.press(card, "✅ Approve")
        assert not answer.show_alert
        card = await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        assert o.ledger.calls == []

        await o.carol.press(card, "✅ Approve")
        result = await s.fake.wait_for(
            lambda m: (
                m.chat_id == s.group and m.message_id > asked.message_id and "deployed web 1.2.3" in m.text
            )
        )
        card = await s.fake.wait_for(lambda m: m is card and not m.reply_markup)
        told = [m for m in s.fake.messages(s.group, from_bot=True) if "Approved by Bob and Carol:" in m.text]
    assert o.ledger.calls == [("deploy", {"service": "web", "version": "1.2.3"})]
    assert "Approved by Bob (" in card.text and "and Carol (" in card.text and "UTC" in card.text
    assert told and told[0].message_id < result.message_id


async def test_a_reject_by_one_approver_means_the_call_is_never_made(tmp_path: Path) -> None:
    """Bob approves, Dave rejects: the card says Dave rejected, Alice is told who rejected, the server never
    hears of the call."""
    async with ops_scene(tmp_path) as o:
        s = o.s
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        await o.dave.press(card, "❌ Reject")
        told = await s.fake.wait_for(lambda m: m.chat_id == s.group and "rejected by Dave" in m.text)
        card = await s.fake.wait_for(lambda m: m is card and not m.reply_markup)
    assert "Rejected" in card.text and "Dave" in card.text
    assert "not made" in told.text
    assert o.ledger.calls == []


async def test_strangers_non_approvers_own_double_and_late_taps_are_refused_with_alerts(
    tmp_path: Path,
) -> None:
    """Mallory (not allowed at all) and Bob (allowed, no approver) are refused; Alice, an approver asking
    herself, is not counted; Carol's second tap is not counted twice; once Dave made the quorum, Alice's tap
    names who decided. None of the refused taps changes the card."""
    async with ops_scene(tmp_path, approvers=[ALICE_ID, CAROL_ID, DAVE_ID], quorum=2) as o:
        s = o.s
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        before, reject = card.text, card.button("❌ Reject").callback_data
        assert reject is not None

        stranger = await s.mallory.press(card, "✅ Approve")
        bystander = await s.bob.press(card, "✅ Approve")
        own = await s.alice.press(card, "✅ Approve")
        assert stranger.show_alert and str(s.mallory.id) in (stranger.text or "")
        assert bystander.show_alert and "not an approver" in (bystander.text or "")
        assert own.show_alert and "own approval" in (own.text or "")
        assert card.text == before and o.ledger.calls == []

        await o.carol.press(card, "✅ Approve")
        twice = await o.carol.press(card, "✅ Approve")
        assert twice.show_alert and "already approved" in (twice.text or "")
        await o.dave.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and not m.reply_markup)
        late = await s.alice.press_data(card, reject)  # a client still showing the buttons
        await s.fake.wait_for(lambda m: "deployed web" in m.text)
    assert late.show_alert and "approved by Carol and Dave" in (late.text or "")
    assert o.ledger.calls == [("deploy", {"service": "web", "version": "1.2.3"})]


async def test_approvers_who_may_not_use_the_bot_can_approve_and_nothing_else(tmp_path: Path) -> None:
    """Carol is no allowed user: her /call is refused with her id, her approval tap counts."""
    async with ops_scene(tmp_path, quorum=1) as o:
        s = o.s
        await o.carol.send("/call prod deploy service=db version=9")
        refused = await s.fake.next_message(o.carol, containing="private")
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await o.carol.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: "deployed web 1.2.3" in m.text)
    assert str(CAROL_ID) in refused.text
    assert o.ledger.calls == [("deploy", {"service": "web", "version": "1.2.3"})]


async def test_an_undecided_request_expires_and_nothing_is_sent(tmp_path: Path) -> None:
    """Nobody decides within timeout_s: the card says it expired (no buttons), Alice is told, no call."""
    async with ops_scene(tmp_path, timeout_s=0.5) as o:
        s = o.s
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.fake.wait_for(lambda m: m is card and "Expired" in m.text and not m.reply_markup)
        told = await s.fake.wait_for(lambda m: m.chat_id == s.group and "not approved in time" in m.text)
    assert "not made" in told.text
    assert o.ledger.calls == []


async def test_without_a_rule_or_for_another_tool_the_call_runs_at_once(tmp_path: Path) -> None:
    """`status` matches no rule: it runs with no card."""
    async with ops_scene(tmp_path) as o:
        await o.s.alice.send("/call prod status", chat=o.s.group)
        await o.s.fake.wait_for(lambda m: "all green" in m.text)
        cards = [m for m in o.s.fake.messages(o.ops, from_bot=True) if "Approval" in m.text]
    assert cards == [] and o.ledger.calls == [("status", {})]


async def test_each_approver_gets_the_card_privately_without_an_approval_chat(tmp_path: Path) -> None:
    """No `chat`: Carol and Dave each get a card in their private chat; Carol's approval shows on Dave's."""
    async with ops_scene(tmp_path, chat=None, approvers=[CAROL_ID, DAVE_ID]) as o:
        s = o.s
        await s.alice.send(DEPLOY, chat=s.group)
        carols = await s.fake.wait_for(lambda m: m.chat_id == CAROL_ID and "Approval" in m.text)
        daves = await s.fake.wait_for(lambda m: m.chat_id == DAVE_ID and "Approval" in m.text)
        await o.carol.press(carols, "✅ Approve")
        await s.fake.wait_for(lambda m: m is daves and "Approved by Carol, 1 of 2" in m.text)
        await o.dave.press(daves, "✅ Approve")
        await s.fake.wait_for(lambda m: "deployed web 1.2.3" in m.text)
    assert o.ledger.calls == [("deploy", {"service": "web", "version": "1.2.3"})]


OWNER = json.dumps(
    {
        "type": "object",
        "properties": {"owner": {"type": "string", "title": "New owner"}},
        "required": ["owner"],
    }
)
ROTATE = f"/call t ask_form message=Rotate the prod key? schema_json={OWNER}"
ANSWERS: dict[str, Any] = {"servers": ["t"], "tools": ["ask_*"], "gate": "answers"}


async def answer_owner(o: Ops, owner: str) -> Msg:
    """Alice answers the server's question with `owner` and submits; the call's /call message."""
    s = o.s
    call = await s.alice.send(ROTATE, chat=s.group)
    question = await s.fake.wait_for(lambda m: "Rotate the prod key?" in m.text and bool(m.reply_markup))
    await s.alice.send(owner, reply_to=question)
    review = await s.fake.wait_for(lambda m: "Please review" in m.text and bool(m.reply_markup))
    await s.alice.press(review, "✅ Submit")
    return call


async def test_an_accepted_answer_reaches_the_server_only_once_approved(tmp_path: Path) -> None:
    """Gate "answers": the call runs, Alice answers; the approval card shows the question and exactly the
    content; after Bob's approval the server still waits; after Carol's it receives that content."""
    async with ops_scene(tmp_path, **ANSWERS) as o:
        s = o.s
        call = await answer_owner(o, "zoe")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        assert "Rotate the prod key?" in card.text and "owner: zoe" in card.text
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "1 of 2" in m.text)
        assert not [m for m in s.fake.messages(s.group, from_bot=True) if is_result(m, call)]
        await o.carol.press(card, "✅ Approve")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
    assert json.loads(result_body(result)) == {"action": "accept", "content": {"owner": "zoe"}}


async def test_a_rejected_answer_reaches_the_server_as_decline(tmp_path: Path) -> None:
    """Gate "answers": Dave rejects; the server gets `decline` (no content), Alice is told who rejected."""
    async with ops_scene(tmp_path, **ANSWERS) as o:
        s = o.s
        call = await answer_owner(o, "mallory")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await o.dave.press(card, "❌ Reject")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
        told = await s.fake.wait_for(lambda m: m.chat_id == s.group and "rejected by Dave" in m.text)
    assert json.loads(result_body(result)) == {"action": "decline", "content": None}
    assert "decline" in told.text


async def test_a_changed_answer_resets_the_approvals_given_so_far(tmp_path: Path) -> None:
    """Bob approved "zoe"; Alice changes her answer to "yan": while she changes it nobody can vote, the card
    then shows "yan" with no approval counted, a tap on the old buttons is refused, and only two approvals of
    "yan" send it. Only Alice may change her answer."""
    async with ops_scene(tmp_path, **ANSWERS) as o:
        s = o.s
        call = await answer_owner(o, "zoe")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        old_approve = card.button("✅ Approve").callback_data
        assert old_approve is not None
        first = await s.bob.press(card, "✅ Approve")
        assert not first.show_alert, first.text
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        notice = await s.fake.wait_for(lambda m: m.chat_id == s.group and "waits for" in m.text)
        other = await s.bob.press(notice, "✏️ Change answer")
        assert other.show_alert and "Only Alice" in (other.text or "")

        await s.alice.press(notice, "✏️ Change answer")
        await s.fake.wait_for(lambda m: m is card and "changing the answer" in m.text and not m.reply_markup)
        meanwhile = await o.carol.press_data(card, old_approve)
        assert meanwhile.show_alert and "being changed" in (meanwhile.text or "")
        question = await s.fake.wait_for(
            lambda m: (
                "Rotate the prod key?" in m.text and bool(m.reply_markup) and "Please review" not in m.text
            )
        )
        await s.alice.send("yan", reply_to=question)
        review = await s.fake.wait_for(
            lambda m: "Please review" in m.text and "yan" in m.text and bool(m.reply_markup)
        )
        await s.alice.press(review, "✅ Submit")
        card = await s.fake.wait_for(lambda m: m is card and "owner: yan" in m.text and bool(m.reply_markup))
        assert "Approved by" not in card.text

        stale = await s.bob.press_data(card, old_approve)
        assert stale.show_alert and "content changed" in (stale.text or "")
        await s.bob.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
        await o.carol.press(card, "✅ Approve")
        result = await s.fake.wait_for(lambda m: is_result(m, call))
    assert json.loads(result_body(result)) == {"action": "accept", "content": {"owner": "yan"}}


async def test_an_answer_waiting_for_approval_is_not_kept_as_answered(tmp_path: Path) -> None:
    """Gate "answers" on a 2026-07-28 round: while approvers decide, the kept question has no answer, so a
    restart then could never send an answer nobody approved; once approved, the round goes back and is closed."""
    db = tmp_path / "bot.db"
    async with ops_scene(tmp_path, **ANSWERS) as o:
        s = o.s
        call = await answer_owner(o, "zoe")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        with sqlite3.connect(db) as conn:
            kept = conn.execute("SELECT era, answer FROM rounds").fetchall()
        assert kept == [("2026-07-28", None)]
        await s.bob.press(card, "✅ Approve")
        await o.carol.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: is_result(m, call))
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM rounds").fetchone() == (0,)

"""/cancel of a call still waiting for approvers, end to end: the real bot against the fake Bot API, a real MCP
server that writes down its calls, each approver's card in their private chat, and a SQLite store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.telegram.test_approvals import ANSWERS, CAROL_ID, DAVE_ID, DEPLOY, answer_owner, ops_scene

pytestmark = pytest.mark.anyio


async def test_cancel_of_a_call_waiting_for_approvers_ends_the_request_for_everyone(tmp_path: Path) -> None:
    """Alice's deploy waits for Carol and Dave; her /cancel ends it: she is told one call was cancelled, her
    call's result says the request was cancelled, both approvers' cards settle as cancelled without buttons,
    the store and the audit log say cancelled, and nothing is ever sent to the server."""
    async with ops_scene(tmp_path, chat=None, approvers=[CAROL_ID, DAVE_ID]) as o:
        s = o.s
        call = await s.alice.send(DEPLOY, chat=s.group)
        carols = await s.fake.wait_for(lambda m: m.chat_id == CAROL_ID and bool(m.reply_markup))
        daves = await s.fake.wait_for(lambda m: m.chat_id == DAVE_ID and bool(m.reply_markup))
        await s.alice.send("/cancel", chat=s.group)
        said = await s.fake.wait_for(lambda m: m.chat_id == s.group and "Cancelled 1 " in m.text)
        result = await s.fake.wait_for(
            lambda m: m.chat_id == s.group and m.message_id > call.message_id and "deploy" in m.text
        )
        await s.fake.wait_for(
            lambda m: all("Cancelled" in c.text and not c.reply_markup for c in (carols, daves))
        )
    assert said.text.startswith("Cancelled 1 pending")
    assert (
        result.text.startswith("🚫")
        and "refused: cancelled by its requester; the call was not made" in result.text
    )
    assert o.ledger.calls == []
    with sqlite3.connect(tmp_path / "bot.db") as db:
        (status,) = db.execute("SELECT status FROM approvals").fetchone()
        events = [
            e for (e,) in db.execute("SELECT event FROM audit ORDER BY seq") if e.startswith("approval")
        ]
    assert status == "cancelled" and events == ["approval_requested", "approval_cancelled"]


async def test_cancel_while_an_answer_waits_for_approval_ends_its_request_too_and_counts_one_call(
    tmp_path: Path,
) -> None:
    """Gate "answers": Alice's answer waits for approval inside her running call; /cancel cancels the call
    (counted once) and the request ends for everyone: the card settles as cancelled and the store says so."""
    async with ops_scene(tmp_path, **ANSWERS) as o:
        s = o.s
        await answer_owner(o, "zoe")
        card = await s.fake.wait_for(lambda m: o.card(m) and bool(m.reply_markup))
        await s.alice.send("/cancel", chat=s.group)
        said = await s.fake.wait_for(lambda m: m.chat_id == s.group and "Cancelled" in m.text)
        await s.fake.wait_for(lambda m: m is card and "Cancelled" in m.text and not m.reply_markup)
    assert said.text.startswith("Cancelled 1 pending")
    with sqlite3.connect(tmp_path / "bot.db") as db:
        assert db.execute("SELECT status FROM approvals").fetchall() == [("cancelled",)]

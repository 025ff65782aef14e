"""A second factor for approvals end to end: the real bot (PTB against the fake Bot API), a SQLite store with a
key, a rule with `second_factor = "totp"`, and a real MCP server that checks the approval receipt. Approvers
enrol with /2fa (a QR code, the secret, a confirming code) and approve with their authenticator's code."""

from __future__ import annotations

import base64
import io
import json
import re
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pyotp
import pytest
import segno

from bot.core.totp import MAX_FAILURES, RECOVERY_CODES, STEP_S, provisioning_uri
from bot.store.audit_keys import AuditKeys
from bot.telegram.second_factor import ISSUER
from tests.fakes.servers.elicit import build_server as build_elicit
from tests.fakes.servers.receipts import Guarded
from tests.fakes.telegram import FakeUser, Msg
from tests.telegram.harness import BOB_ID, Chat, bot_scene

pytestmark = pytest.mark.anyio

CAROL_ID, DAVE_ID = 3003, 3004
OPS = -7001
SECRET = base64.urlsafe_b64encode(bytes(range(32))).decode()
DEPLOY = "/call prod deploy service=web version=1.2.3"
PIN = json.dumps(
    {"type": "object", "properties": {"pin": {"type": "string", "title": "PIN"}}, "required": ["pin"]}
)
ASK_PIN = f"/call t ask_form message=Your door PIN? schema_json={PIN}"


@dataclass
class Scene:
    s: Chat
    carol: FakeUser
    dave: FakeUser
    server: Guarded
    db: Path

    def card(self, m: Msg) -> bool:
        return m.chat_id == OPS and "Approval" in m.text


@asynccontextmanager
async def totp_scene(tmp_path: Path, world: Scene | None = None) -> AsyncIterator[Scene]:
    """Alice and Bob may call tools (`t` asks questions); Bob, Carol and Dave approve `deploy` on `prod` (2 of 3) in OPS, each approval
    with a code. With `world`, a new bot process on the same database and fake (a restart)."""
    server = world.server if world is not None else Guarded(public_key=AuditKeys(SECRET).public_key)
    rule = {
        "servers": ["prod"],
        "tools": ["deploy"],
        "approvers": [BOB_ID, CAROL_ID, DAVE_ID],
        "quorum": 2,
        "chat": OPS,
        "second_factor": "totp",
    }
    db = tmp_path / "bot.db"
    async with bot_scene(
        in_process={"prod": server.build, "t": build_elicit},
        storage=f"sqlite:///{db}",
        secret_key=SECRET,
        approvals=[rule],
        world=None if world is None else world.s,
    ) as s:
        if world is None:
            carol = s.fake.user(id=CAROL_ID, first_name="Carol")
            dave = s.fake.user(id=DAVE_ID, first_name="Dave")
            s.fake.group(OPS, title="On-call", members=[s.alice, s.bob, carol, dave])
        else:
            carol, dave = world.carol, world.dave
        for person in (s.bob, carol, dave):
            await person.send("here", chat=OPS)
        yield Scene(s, carol, dave, server, db)


async def said(s: Chat, person: FakeUser, needle: str, after: int = 0) -> Msg:
    """The bot's next message in `person`'s private chat containing `needle`."""
    return await s.fake.wait_for(
        lambda m: m.chat_id == person.id and m.message_id > after and needle in m.text
    )


async def enrol(s: Chat, person: FakeUser) -> tuple[pyotp.TOTP, list[str]]:
    """/2fa, the secret read from the chat, a code from it: the app and the recovery codes."""
    asked = await person.send("/2fa")
    told = await said(s, person, "Or type this secret", asked.message_id)
    secret = re.search(r"\b[A-Z2-7]{32}\b", told.text)
    assert secret is not None
    totp = pyotp.TOTP(secret.group())
    sent = await person.send(totp.now())
    done = await said(s, person, "set up", sent.message_id)
    return totp, re.findall(r"\b[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}\b", done.text)


def next_code(totp: pyotp.TOTP) -> str:
    """The app's code of the next time step (accepted: clocks drift); the step of now was used to enrol."""
    return totp.at(time.time() + STEP_S)


def wrong(totp: pyotp.TOTP) -> str:
    return next(c for c in ("123456", "654321", "111111") if not totp.verify(c, valid_window=1))


async def test_an_approver_enrols_with_a_qr_code_and_a_code_from_the_app(tmp_path: Path) -> None:
    """/2fa in a private chat sends a QR code of the `otpauth://` address and the secret; a wrong code does
    not finish the enrolment (tries left are said); the app's code does, with ten recovery codes, once."""
    async with totp_scene(tmp_path) as g:
        s = g.s
        await s.bob.send("/2fa")
        qr = await s.fake.wait_for(lambda m: m.chat_id == s.bob.id and m.photo is not None)
        told = await said(s, s.bob, "Or type this secret")
        match = re.search(r"\b[A-Z2-7]{32}\b", told.text)
        assert match is not None
        totp = pyotp.TOTP(match.group())
        expected = io.BytesIO()
        uri = provisioning_uri(match.group(), f"Bob ({s.bob.id})", ISSUER)
        segno.make(uri, error="m").save(expected, kind="png", scale=6, border=4)
        assert qr.photo == expected.getvalue() and "authenticator" in qr.text

        sent = await s.bob.send(wrong(totp))
        refused = await said(s, s.bob, "not right", sent.message_id)
        sent = await s.bob.send(totp.now())
        done = await said(s, s.bob, "set up", sent.message_id)
    assert f"{MAX_FAILURES - 1} of {MAX_FAILURES} tries left" in refused.text
    codes = re.findall(r"\b[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{4}\b", done.text)
    assert len(set(codes)) == RECOVERY_CODES
    with sqlite3.connect(g.db) as conn:
        stored = " ".join(str(v) for v in conn.execute("SELECT * FROM second_factors").fetchone())
    assert match.group() not in stored and not any(c in stored for c in codes)


async def test_taps_alone_never_approve_a_rule_with_a_second_factor_and_the_right_codes_do(
    tmp_path: Path,
) -> None:
    """Bob's Approve counts nothing by itself: he is asked for a code privately; a wrong one is refused, the
    right one counts (1 of 2). Dave, not enrolled, is told how to enrol, and his tap counts nothing either.
    Carol's code makes the quorum: the server runs the call with a receipt saying both used their app, and the
    audit rows say "totp". The code Bob used, sent again for the next request, is refused as used."""
    async with totp_scene(tmp_path) as g:
        s = g.s
        bob_app, _ = await enrol(s, s.bob)
        carol_app, _ = await enrol(s, g.carol)
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: g.card(m) and bool(m.reply_markup))
        before = card.text

        tapped = await s.bob.press(card, "✅ Approve")
        asked = await said(s, s.bob, "send me the 6-digit code")
        dave = await g.dave.press(card, "✅ Approve")
        assert tapped.show_alert and dave.show_alert and "/2fa" in (dave.text or "")
        assert card.text == before and g.server.ran == []
        assert "deploy" in asked.text and "prod" in asked.text

        sent = await s.bob.send(wrong(bob_app))
        await said(s, s.bob, "not right", sent.message_id)
        code = next_code(bob_app)
        sent = await s.bob.send(code)
        await said(s, s.bob, "Approved (1 of 2)", sent.message_id)
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)

        await g.carol.press(card, "✅ Approve")
        await said(s, g.carol, "send me the 6-digit code")
        await g.carol.send(next_code(carol_app))
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "deployed web 1.2.3" in m.text)

        await s.alice.send(DEPLOY, chat=s.group)
        second = await s.fake.wait_for(lambda m: g.card(m) and bool(m.reply_markup) and m is not card)
        await s.bob.press(second, "✅ Approve")
        await said(s, s.bob, "send me the 6-digit code", asked.message_id)
        sent = await s.bob.send(code)
        replayed = await said(s, s.bob, "used already", sent.message_id)
    assert "tries left" in replayed.text
    [(_, _, receipt)] = g.server.ran
    assert receipt.factor == "totp" and [a.factor for a in receipt.approvers] == ["totp", "totp"]
    with sqlite3.connect(g.db) as conn:
        rows = conn.execute("SELECT detail FROM audit WHERE event = 'approved'").fetchall()
    assert [json.loads(d)["factor"] for (d,) in rows] == ["totp", "totp"]


async def test_an_enrolment_survives_a_restart_and_a_recovery_code_works_once(tmp_path: Path) -> None:
    """Bob and Carol enrol, the bot stops and a new process starts on the same database: Bob's code still
    approves, without enrolling again; Carol, who lost her phone, approves with a recovery code, which then
    no longer works."""
    async with totp_scene(tmp_path) as first:
        bob_app, _ = await enrol(first.s, first.s.bob)
        _, carol_codes = await enrol(first.s, first.carol)
        first.s.stop.set()
        with anyio.fail_after(10):
            await first.s.stopped.wait()

        async with totp_scene(tmp_path, world=first) as g:
            s = g.s
            await s.alice.send(DEPLOY, chat=s.group)
            card = await s.fake.wait_for(lambda m: g.card(m) and bool(m.reply_markup))
            start = s.fake.messages(s.bob.id)[-1].message_id
            await s.bob.press(card, "✅ Approve")
            await said(s, s.bob, "send me the 6-digit code", start)
            await s.bob.send(next_code(bob_app))
            await said(s, s.bob, "Approved (1 of 2)", start)
            start = s.fake.messages(g.carol.id)[-1].message_id
            await g.carol.press(card, "✅ Approve")
            await said(s, g.carol, "send me the 6-digit code", start)
            await g.carol.send(carol_codes[0])
            used = await said(s, g.carol, "Approved (2 of 2)", start)
            await s.fake.wait_for(lambda m: m.chat_id == s.group and "deployed web 1.2.3" in m.text)

            await s.alice.send(DEPLOY, chat=s.group)
            second = await s.fake.wait_for(lambda m: g.card(m) and bool(m.reply_markup) and m is not card)
            start = s.fake.messages(g.carol.id)[-1].message_id
            await g.carol.press(second, "✅ Approve")
            await said(s, g.carol, "send me the 6-digit code", start)
            await g.carol.send(carol_codes[0])
            again = await said(s, g.carol, "not right", start)
    assert f"{RECOVERY_CODES - 1} recovery codes left" in used.text
    assert "tries left" in again.text
    [(_, _, receipt)] = g.server.ran
    assert [a.factor for a in receipt.approvers] == ["totp", "recovery_code"]


async def test_a_six_digit_answer_to_a_form_goes_to_the_form_and_a_reply_to_the_code_prompt_is_the_code(
    tmp_path: Path,
) -> None:
    """Bob tapped Approve (the code prompt asks for a reply, ForceReply) and a tool asks him for a PIN in the
    same private chat: six digits sent plainly answer the PIN question (they are not checked as a code, the
    prompt still waits), and his reply to the code prompt approves."""
    async with totp_scene(tmp_path) as g:
        s = g.s
        bob_app, _ = await enrol(s, s.bob)
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: g.card(m) and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        prompt = await said(s, s.bob, "send me the 6-digit code")
        await s.bob.send(ASK_PIN)
        await said(s, s.bob, "Your door PIN?", prompt.message_id)

        pin = wrong(bob_app)
        sent = await s.bob.send(pin)
        review = await s.fake.wait_for(lambda m: m.chat_id == s.bob.id and "Please review" in m.text)
        reviewed = review.text
        said_after = [
            m.text for m in s.fake.messages(s.bob.id, from_bot=True) if m.message_id > sent.message_id
        ]
        sent = await s.bob.send(next_code(bob_app), reply_to=prompt)
        await said(s, s.bob, "Approved (1 of 2)", sent.message_id)
        await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
    assert prompt.force_reply
    assert pin in reviewed
    assert not [t for t in said_after if "not right" in t or "tries left" in t]


async def test_a_code_sent_after_a_restart_answers_the_prompt_sent_before_it(tmp_path: Path) -> None:
    """Bob taps Approve and is asked for a code; the bot stops and a new process starts on the same database
    before he answers: his reply to the prompt still approves that request (no second tap), and the card
    says so."""
    async with totp_scene(tmp_path) as first:
        bob_app, _ = await enrol(first.s, first.s.bob)
        await first.s.alice.send(DEPLOY, chat=first.s.group)
        card = await first.s.fake.wait_for(lambda m: first.card(m) and bool(m.reply_markup))
        await first.s.bob.press(card, "✅ Approve")
        prompt = await said(first.s, first.s.bob, "send me the 6-digit code")
        first.s.stop.set()
        with anyio.fail_after(10):
            await first.s.stopped.wait()

        async with totp_scene(tmp_path, world=first) as g:
            s = g.s
            sent = await s.bob.send(next_code(bob_app), reply_to=prompt)
            done = await said(s, s.bob, "Approved (1 of 2)", sent.message_id)
            await s.fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text)
    assert done.text.startswith("✅")


async def test_2fa_is_in_the_command_menu_and_the_help_only_when_a_rule_asks_for_a_code(
    tmp_path: Path,
) -> None:
    """With a `second_factor = "totp"` rule the menu (setMyCommands) and /help name /2fa; without one, neither
    does."""
    async with totp_scene(tmp_path) as g:
        menu = {command for command, _ in g.s.fake.commands}
        asked = await g.s.alice.send("/help")
        told = await said(g.s, g.s.alice, "/tools", asked.message_id)
        assert "2fa" in menu and "/2fa" in told.text
    async with bot_scene() as s:
        plain = {command for command, _ in s.fake.commands}
        asked = await s.alice.send("/help")
        told = await said(s, s.alice, "/tools", asked.message_id)
        assert plain >= {"tools", "help"} and "2fa" not in plain and "/2fa" not in told.text

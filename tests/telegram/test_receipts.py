"""Signed approval receipts end to end: the real bot (PTB against the fake Bot API) asks two approvers in a group,
then sends the approved call to a real MCP server that runs nothing without a valid receipt
(`tests.fakes.servers.receipts`). Then someone who captured that receipt tries it again: replayed, with other
arguments, edited, or signed with another key; the server refuses each."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from mcp import Client

from bot.core.approvals import content_hash
from bot.receipts import META_KEY, sign
from bot.store.audit_keys import AuditKeys
from tests.fakes.servers.receipts import Guarded
from tests.fakes.telegram import FakeUser
from tests.telegram.harness import BOB_ID, Chat, bot_scene

pytestmark = pytest.mark.anyio

CAROL_ID, DAVE_ID = 3003, 3004
OPS = -7001
SECRET = base64.urlsafe_b64encode(bytes(range(32))).decode()
DEPLOY = "/call prod deploy service=web version=1.2.3"


@dataclass
class Scene:
    s: Chat
    carol: FakeUser
    ops: int
    server: Guarded


@asynccontextmanager
async def guarded_scene(tmp_path: Path, world: Scene | None = None) -> AsyncIterator[Scene]:
    """Alice may call tools; Bob, Carol and Dave (2 of 3) approve `deploy` on `prod`, a server that checks receipts
    against the audit key's public half (what `toolnexus-bot audit public-key` prints). With `world`, a new
    bot process on the same database, fake Telegram and server (a restart)."""
    server = world.server if world is not None else Guarded(public_key=AuditKeys(SECRET).public_key)
    rule = {
        "servers": ["prod"],
        "tools": ["deploy"],
        "approvers": [BOB_ID, CAROL_ID, DAVE_ID],
        "quorum": 2,
        "chat": OPS,
    }
    async with bot_scene(
        in_process={"prod": server.build},
        storage=f"sqlite:///{tmp_path / 'bot.db'}",
        secret_key=SECRET,
        approvals=[rule],
        world=None if world is None else world.s,
    ) as s:
        if world is None:
            carol = s.fake.user(id=CAROL_ID, first_name="Carol")
            ops = s.fake.group(OPS, title="On-call", members=[s.alice, s.bob, carol])
        else:
            carol, ops = world.carol, world.ops
        for person in (s.bob, carol):
            await person.send("here", chat=ops)
        yield Scene(s, carol, ops, server)


async def _call(server: Guarded, arguments: dict[str, Any], meta: dict[str, Any] | None) -> str:
    """Call `deploy` directly (not through the bot), with `meta` as the request's `_meta`: its text."""
    async with Client(server.build()) as client:
        result = await client.call_tool("deploy", arguments, meta=meta)  # type: ignore[arg-type]
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_an_approved_call_carries_a_receipt_the_server_checks_and_a_captured_one_is_refused(
    tmp_path: Path,
) -> None:
    """Bob and Carol approve Alice's deploy: the server runs it, having checked with the public key alone that
    Bob and Carol approved exactly these arguments (the hash the approval was bound to). The captured
    receipt, sent again, is refused as used before; with other arguments, as differing; edited to name
    Mallory, or re-signed with another key, as forged; and a call without one is refused."""
    async with guarded_scene(tmp_path) as g:
        s = g.s
        await s.alice.send(DEPLOY, chat=s.group)
        card = await s.fake.wait_for(lambda m: m.chat_id == g.ops and bool(m.reply_markup))
        await s.bob.press(card, "✅ Approve")
        await g.carol.press(card, "✅ Approve")
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "deployed web 1.2.3" in m.text)

    arguments = {"service": "web", "version": "1.2.3"}
    assert g.server.refused == []
    [(tool, sent, receipt)] = g.server.ran
    assert (tool, sent) == ("deploy", arguments)
    assert receipt.hash == content_hash("prod", "deploy", arguments)
    assert [(a.id, a.name, a.factor) for a in receipt.approvers] == [
        (BOB_ID, "Bob", "tap"),
        (CAROL_ID, "Carol", "tap"),
    ]
    assert receipt.factor == "tap" and receipt.requester == s.alice.id

    captured = g.server.metas[0]
    replayed = await _call(g.server, arguments, captured)
    other = await _call(g.server, {"service": "db", "version": "1.2.3"}, captured)
    edited = {**captured[META_KEY], "approvers": [{"id": 9, "name": "Mallory", "at": "x", "factor": "tap"}]}
    forged = await _call(g.server, arguments, {META_KEY: edited})
    body = {k: v for k, v in captured[META_KEY].items() if k not in ("sig", "nonce")} | {"nonce": "fresh"}
    resigned = await _call(g.server, arguments, {META_KEY: sign(body, Ed25519PrivateKey.generate().sign)})
    bare = await _call(g.server, arguments, None)
    assert "used before" in replayed
    assert "arguments differ" in other
    assert "signature does not hold" in forged and "signature does not hold" in resigned
    assert "no approval receipt" in bare
    assert len(g.server.ran) == 1


async def test_a_call_approved_after_a_restart_runs_with_a_receipt_too(tmp_path: Path) -> None:
    """Alice's deploy waits; the bot stops; the new process gets Bob's and Carol's approvals and runs the call
    itself (its first process is gone): the server gets a valid receipt naming them."""
    async with guarded_scene(tmp_path) as first:
        await first.s.alice.send(DEPLOY, chat=first.s.group)
        await first.s.fake.wait_for(lambda m: m.chat_id == first.ops and bool(m.reply_markup))
        first.s.stop.set()
        with anyio.fail_after(10):
            await first.s.stopped.wait()
        async with guarded_scene(tmp_path, world=first) as g:
            s = g.s
            card = await s.fake.wait_for(lambda m: m.chat_id == g.ops and bool(m.reply_markup))
            await s.bob.press(card, "✅ Approve")
            await g.carol.press(card, "✅ Approve")
            await s.fake.wait_for(lambda m: m.chat_id == s.group and "deployed web 1.2.3" in m.text)
    [(_, sent, receipt)] = g.server.ran
    assert sent == {"service": "web", "version": "1.2.3"} and g.server.refused == []
    assert [a.name for a in receipt.approvers] == ["Bob", "Carol"]

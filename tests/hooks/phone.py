"""The phone's side of the hook tests: the token and hook settings `/agents new` prints, the permission cards
in Alice's chat, and the audit rows they leave."""

from __future__ import annotations

import json
import re
from typing import Any

from bot.config import Secret, StorageConfig
from bot.core.agents import TOKEN_PREFIX
from bot.store import open_store
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, Chat
from tests.web.agents import PUBLIC_URL

TOKEN = re.compile(re.escape(TOKEN_PREFIX) + r"[A-Za-z0-9_-]+")
ASKS = "asks to:"
"""On every permission card."""


def entities(m: Msg, kind: str) -> list[str]:
    """The text of a message's entities of one kind (Telegram's offsets count UTF-16 units)."""
    units = m.text.encode("utf-16-le")
    return [
        units[2 * e["offset"] : 2 * (e["offset"] + e["length"])].decode("utf-16-le")
        for e in m.entities
        if e["type"] == kind
    ]


async def printed(s: Chat, port: int, name: str) -> tuple[str, dict[str, Any], str]:
    """`/agents new <name>` in Alice's chat: the token, Claude Code's hook settings and Codex's hook as printed,
    their URLs pointed at the local endpoint (as the public URL's proxy forwards it)."""
    await s.alice.send(f"/agents new {name}")
    shown = await s.fake.next_message(ALICE_ID, timeout=15)
    (token,) = set(TOKEN.findall(shown.text))
    local = f"http://127.0.0.1:{port}"
    (claude,) = [code for code in entities(shown, "code") if code.startswith('{"hooks"')]
    (codex,) = [block for block in entities(shown, "pre") if block.startswith("[[hooks.PermissionRequest]]")]
    return token, json.loads(claude.replace(PUBLIC_URL, local)), codex.replace(PUBLIC_URL, local)


def cards(s: Chat) -> list[Msg]:
    """The permission cards in Alice's chat, in order."""
    return [m for m in s.fake.messages(ALICE_ID, from_bot=True) if ASKS in m.text]


async def card(s: Chat, seen: int) -> Msg:
    """The next permission card with its buttons, after the `seen` ones before it."""
    return await s.fake.wait_for(
        lambda m: ASKS in m.text and bool(m.buttons) and m not in cards(s)[:seen], 60
    )


async def audit(url: str) -> list[dict[str, Any]]:
    """The `permission_*` audit rows, in order."""
    async with open_store(StorageConfig(url=Secret(url))) as store:
        return [r.as_dict() for r in await store.audit.rows() if r.event.startswith("permission_")]

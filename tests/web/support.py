"""Shared by the Mini App tests: a form of every field kind, launch data signed as Telegram signs it, and a
scene whose bot has a public URL (the page is reached on 127.0.0.1 instead)."""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx

from bot.web.miniapp import sign_init_data
from tests.fakes.telegram import FakeUser, Msg
from tests.ports import free_port
from tests.telegram.harness import Chat, bot_scene, is_result

PUBLIC_URL = "https://forms.example.com"
OPEN_FORM = "📝 Open form"

EVERY_KIND: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "site": {"type": "string", "format": "uri", "title": "Website"},
        "day": {"type": "string", "format": "date", "title": "Day"},
        "starts": {"type": "string", "format": "date-time", "title": "Starts at"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "budget": {"type": "number", "title": "Budget", "minimum": 0, "default": 50.5},
        "vegan": {"type": "boolean", "title": "Vegan menu"},
        "room": {
            "type": "string",
            "title": "Room",
            "oneOf": [{"const": "g", "title": "Garden"}, {"const": "h", "title": "Hall"}],
        },
        "extras": {
            "type": "array",
            "title": "Extras",
            "maxItems": 2,
            "items": {
                "anyOf": [
                    {"const": "wifi", "title": "Wi-Fi"},
                    {"const": "tea", "title": "Tea"},
                    {"const": "cake", "title": "Cake"},
                ]
            },
        },
        "note": {"type": "string", "title": "Note"},
    },
    "required": ["name", "email", "day", "starts", "guests", "vegan", "room"],
}
"""Every field kind the chat flow supports: text (free, email, uri, date, date-time), integer and number with
bounds and a default, yes/no, single choice with titles, multi-select with a maximum; one optional skipped."""

SIX_FIELDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name"},
        "email": {"type": "string", "format": "email", "title": "Email"},
        "day": {"type": "string", "format": "date", "title": "Day"},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "vegan": {"type": "boolean", "title": "Vegan menu"},
        "room": {"type": "string", "title": "Room", "enum": ["garden", "hall"]},
    },
    "required": ["name", "email", "day", "guests", "vegan", "room"],
}

SIX_ANSWERS: dict[str, object] = {
    "name": "Ada",
    "email": "ada@example.com",
    "day": "2026-12-24",
    "guests": "4",
    "vegan": True,
    "room": "hall",
}


def launch_data(user: FakeUser | int, bot_token: str, *, age_s: float = 0, **extra: str) -> str:
    """`initData` as Telegram makes it for `user`, signed with `bot_token`, `age_s` seconds old."""
    user_id = user if isinstance(user, int) else user.id
    fields = {
        "query_id": secrets.token_urlsafe(12),  # Telegram gives each launch its own
        "user": json.dumps({"id": user_id, "first_name": "Someone"}, separators=(",", ":")),
        "auth_date": str(int(time.time() - age_s)),
        **extra,
    }
    return sign_init_data(fields, bot_token)


@asynccontextmanager
async def mini_scene(**kwargs: Any) -> AsyncIterator[tuple[Chat, int]]:
    """A bot with `[web] public_url` (so long forms get the Mini App) on a free local port."""
    port = free_port()
    web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL}
    async with bot_scene(web=web, **kwargs) as s:
        yield s, port


async def ask_form(user: FakeUser, schema: dict[str, Any], message: str = "Please fill in the form") -> Msg:
    """Run the test server's ask_form tool; the /call message."""
    args = {"schema_json": json.dumps(schema), "message": message}
    return await user.send("/call t ask_form " + json.dumps(args))


def local_path(card: Msg) -> str:
    """The Open form button's page (on the card now or as it was: a settled card has no buttons), as a path on
    the local endpoint (the public URL's proxy forwards it)."""
    urls = {b.web_app for v in card.history for row in v.reply_markup for b in row if b.text == OPEN_FORM}
    assert len(urls) == 1, urls
    url = urls.pop()
    assert url is not None and url.startswith(PUBLIC_URL + "/app/")
    return urlsplit(url).path


async def api(port: int, card: Msg, what: str, body: dict[str, Any]) -> httpx.Response:
    """POST to the page's endpoint `what` (form, check, answer) as the page does."""
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        return await client.post(f"http://127.0.0.1:{port}{local_path(card)}/{what}", json=body)


async def received(s: Chat, call: Msg) -> dict[str, Any]:
    """What the test server received (its ask_form result: the action and the content, as JSON)."""
    result = await s.fake.wait_for(lambda m: is_result(m, call))
    text = result.text
    return dict(json.loads(text[text.index("{") : text.rindex("}") + 1]))

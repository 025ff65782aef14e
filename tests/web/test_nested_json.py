"""Deeply nested JSON posted to the web endpoint (the webhook, the Mini App) is refused with 400 and one log
line, never a 500 with a traceback; the bot carries on."""

from __future__ import annotations

import logging

import httpx
import pytest

from tests.ports import free_port
from tests.telegram.harness import bot_scene
from tests.web.support import SIX_FIELDS, ask_form, launch_data, local_path, mini_scene
from tests.web.test_miniapp import has_open_form
from tests.web.test_webhook import an_update, post, webhook_mode

pytestmark = pytest.mark.anyio

DEEP = b"[" * 200_000
"""200 KB of `[[[...`: Python's parser runs out of stack long before the end."""
DEEP_BUT_PARSEABLE = b'{"update_id": 5, "message": ' + b"[" * 500 + b"]" * 500 + b"}"
"""Shallow enough for the parser, far deeper than anything Telegram or the page sends."""


def _lines_at_or_above_warning(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(("bot", "uvicorn"))
    ]


async def test_deeply_nested_json_to_the_webhook_gets_400_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both bodies get 400 (Telegram would not deliver them again), each logged in one WARNING line without
    a traceback; a good update afterwards is handled."""
    caplog.set_level(logging.INFO)
    port = free_port()
    async with bot_scene(**webhook_mode(port)) as s:
        statuses = [(await post(port, body)).status_code for body in (DEEP, DEEP_BUT_PARSEABLE)]
        assert statuses == [400, 400]
        logged = _lines_at_or_above_warning(caplog)
        assert (await post(port, json=an_update(text="/help"))).status_code == 200
        await s.fake.next_message(s.alice, containing="/tools")
    assert [(r.levelno, r.name) for r in logged] == [(logging.WARNING, "bot.web.webhook")] * 2
    assert all(r.exc_info is None and r.exc_text is None and "nested" in r.getMessage() for r in logged)


async def test_deeply_nested_json_to_the_mini_app_gets_400_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The page's endpoints answer 400 to both bodies, one WARNING line each; the form stays open and a
    well-formed request from the page still works."""
    caplog.set_level(logging.INFO)
    async with mini_scene() as (s, port):
        await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            url = f"http://127.0.0.1:{port}{local_path(card)}/answer"
            statuses = [
                (await client.post(url, content=body)).status_code for body in (DEEP, DEEP_BUT_PARSEABLE)
            ]
            form = await client.post(
                f"http://127.0.0.1:{port}{local_path(card)}/form",
                json={"initData": launch_data(s.alice, s.fake.token)},
            )
        assert statuses == [400, 400] and form.status_code == 200
        assert "Decline" in card.buttons
    logged = _lines_at_or_above_warning(caplog)
    assert [(r.levelno, r.name) for r in logged] == [(logging.WARNING, "bot.web.miniapp.app")] * 2
    assert all(r.exc_info is None and r.exc_text is None and "nested" in r.getMessage() for r in logged)

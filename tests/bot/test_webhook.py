"""Webhook mode end to end: the bot registers its webhook with the secret, the fake POSTs updates to it."""

from __future__ import annotations

import socket

import pytest

from tests.bot.telegram_harness import bot_scene
from tests.fake_telegram import Msg

pytestmark = pytest.mark.anyio

PUBLIC_URL = "https://bot.example.com/telegram"
SECRET = "s3cret_Token-42"


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        return listener.getsockname()[1]


def webhook_config(port: int) -> dict[str, object]:
    return {
        "mode": "webhook",
        "webhook": {
            "listen": "127.0.0.1",
            "port": port,
            "url": PUBLIC_URL,
            "path": "/telegram",
            "secret_token": SECRET,
        },
    }


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


async def test_webhook_mode_registers_the_hook_and_a_deploy_flow_completes() -> None:
    """setWebhook carries the public URL and the secret; updates POSTed to the local path drive a full flow."""
    port = free_port()
    async with bot_scene(**webhook_config(port)) as s:
        assert s.fake.webhook["url"] == PUBLIC_URL and s.fake.webhook["secret_token"] == SECRET
        assert s.fake.webhook["allowed_updates"] == ["message", "callback_query"]
        assert not any(method.lower() == "getupdates" for method, _ in s.fake.calls)
        s.fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET)
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        await s.alice.press(card, "Production (live)")
        card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        confirm = await s.fake.wait_for(lambda m: "Deploy web to production?" in m.text and has_buttons(m))
        await s.alice.press(confirm, "No")
        confirm = await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
        await s.alice.press(confirm, "✅ Submit")
        await s.fake.wait_for(lambda m: "Deployment declined" in m.text)
        assert "Answer sent" in card.text and not card.buttons


async def test_a_webhook_post_without_the_right_secret_is_refused_and_changes_nothing() -> None:
    """No secret or a wrong one: 403, and the update is never handled."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram"
    update = {
        "update_id": 999,
        "message": {
            "message_id": 1,
            "date": 0,
            "chat": {"id": 1001, "type": "private", "first_name": "Alice"},
            "from": {"id": 1001, "is_bot": False, "first_name": "Alice"},
            "text": "/help",
            "entities": [{"type": "bot_command", "offset": 0, "length": 5}],
        },
    }
    async with bot_scene(**webhook_config(port)) as s:
        assert await s.fake.post_update_to(url, update) == 403
        assert await s.fake.post_update_to(url, update, secret_token="wrong") == 403
        s.fake.deliver_via_webhook(url, secret_token=SECRET)
        await s.alice.send("/servers")  # a good delivery, handled after the refused ones would have been
        await s.fake.next_message(s.alice, containing="Servers")
        assert [m.text for m in s.fake.messages(s.alice, from_bot=True) if "/tools" in m.text] == []


async def test_polling_is_the_default() -> None:
    """Without `mode`, the bot long-polls getUpdates and sets no webhook."""
    async with bot_scene() as s:
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools")
        assert s.fake.webhook["url"] == ""
        assert any(method.lower() == "getupdates" for method, _ in s.fake.calls)

"""The bot behind an HTTP proxy from the environment, end to end: real PTB on the aiohttp client, a forwarding
proxy on loopback (`tests.forward_proxy`), the fake Bot API behind it, a real MCP server."""

from __future__ import annotations

import pytest

from tests.bot.telegram_harness import bot_scene
from tests.fake_telegram import Msg
from tests.forward_proxy import forward_proxy

pytestmark = pytest.mark.anyio


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


async def test_a_call_with_a_question_completes_through_the_proxy_named_by_http_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY (and HTTPS_PROXY) name the proxy, no NO_PROXY exempts 127.0.0.1: every Bot API call of a
    /call with a question (polls, the card, taps answered, edits, the result) goes through the proxy."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with forward_proxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        async with bot_scene() as s:
            await s.alice.send("/call demo deploy")
            card = await s.fake.wait_for(lambda m: "Where should" in m.text and has_buttons(m))
            await s.alice.press(card, "Staging (safe to try)")
            card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
            await s.alice.press(card, "✅ Submit")
            confirm = await s.fake.wait_for(lambda m: "Deploy web to staging?" in m.text and has_buttons(m))
            await s.alice.press(confirm, "Yes")
            confirm = await s.fake.wait_for(lambda m: m is confirm and "Please review" in m.text)
            await s.alice.press(confirm, "✅ Submit")
            await s.fake.wait_for(lambda m: "Deployed web to staging" in m.text)
        methods = {url.rsplit("/", 1)[1] for _, url in proxy.forwarded}
        assert {"getMe", "getUpdates", "sendMessage", "answerCallbackQuery", "editMessageText"} <= methods
        assert all(url.startswith(s.fake.base_url) for _, url in proxy.forwarded)
        assert len(proxy.forwarded) == len(s.fake.calls)  # nothing reached the fake around the proxy
        assert proxy.refused == []

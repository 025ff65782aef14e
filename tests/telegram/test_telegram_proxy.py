"""The bot behind an HTTP proxy from the environment, end to end: real PTB on the aiohttp client, a forwarding
proxy on loopback (`tests.fakes.forward_proxy`), the fake Bot API behind it, a real MCP server."""

from __future__ import annotations

import base64

import pytest

from bot.telegram.request import AiohttpRequest
from tests.fakes.forward_proxy import forward_proxy
from tests.fakes.telegram import FakeTelegram, Msg
from tests.telegram.harness import bot_scene

pytestmark = pytest.mark.anyio


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


def clear_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.mark.parametrize(
    ("no_proxy", "through_proxy"),
    [(None, True), ("127.0.0.1", False), ("example.org,127.0.0.1", False), ("example.org", True)],
)
async def test_no_proxy_names_the_hosts_reached_directly(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str | None, through_proxy: bool
) -> None:
    """HTTP_PROXY applies to the Bot API server unless NO_PROXY lists its host; the proxy URL's
    credentials go to the proxy as Proxy-Authorization."""
    clear_proxy_environment(monkeypatch)
    async with forward_proxy() as proxy, FakeTelegram() as fake:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.replace("http://", "http://ops:s3cret@"))
        if no_proxy is not None:
            monkeypatch.setenv("NO_PROXY", no_proxy)
        async with AiohttpRequest() as request:
            status, _ = await request.do_request(f"{fake.base_url}{fake.token}/getMe", "POST")
    assert status == 200 and len(fake.calls) == 1
    assert len(proxy.forwarded) == (1 if through_proxy else 0)
    if through_proxy:
        assert proxy.credentials == ["Basic " + base64.b64encode(b"ops:s3cret").decode()]


async def test_a_call_with_a_question_completes_through_the_proxy_named_by_http_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HTTP_PROXY (and HTTPS_PROXY) name the proxy, no NO_PROXY exempts 127.0.0.1: every Bot API call of a
    /call with a question (polls, the card, taps answered, edits, the result) goes through the proxy."""
    clear_proxy_environment(monkeypatch)
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

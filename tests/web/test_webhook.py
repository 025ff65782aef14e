"""The web endpoint end to end: real PTB and uvicorn on 127.0.0.1, the fake Bot API, the demo server.

Webhook mode registers `<public_url>/telegram` with the secret, and the fake POSTs updates there as Telegram
does; /healthz and /metrics answer in either mode when `[web]` is set. Raw sockets play the slow clients.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, TypedDict

import anyio
import httpx
import pytest
from anyio.abc import SocketStream
from prometheus_client.parser import text_string_to_metric_families

from bot.web import MAX_BODY, REQUEST_TIMEOUT_S
from tests.fakes.telegram import Msg
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID, Chat, bot_scene, is_result

pytestmark = pytest.mark.anyio

PUBLIC_URL = "https://bot.example.com"
SECRET = "s3cret_Token-42"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
SLOW_CLIENTS = 1000
CLOSED_WITHIN_S = REQUEST_TIMEOUT_S + 15  # the deadline plus room for a loaded machine


class WebhookMode(TypedDict):
    """The keyword arguments `webhook_mode` gives `bot_scene`."""

    mode: str
    webhook_secret: str
    web: dict[str, Any]


def webhook_mode(port: int) -> WebhookMode:
    """bot_scene arguments for webhook mode on a local port."""
    return {
        "mode": "webhook",
        "webhook_secret": SECRET,
        "web": {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL},
    }


def an_update(update_id: int = 999, text: str = "/help") -> dict[str, object]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": 1,
            "date": 0,
            "chat": {"id": ALICE_ID, "type": "private", "first_name": "Alice"},
            "from": {"id": ALICE_ID, "is_bot": False, "first_name": "Alice"},
            "text": text,
            "entities": [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}],
        },
    }


def has_buttons(msg: Msg) -> bool:
    return bool(msg.buttons)


async def post(
    port: int,
    content: bytes | AsyncIterator[bytes] | None = None,
    *,
    json: object = None,
    secret: str | bytes | None = SECRET,
) -> httpx.Response:
    """POST to the webhook as Telegram does (with the secret unless told otherwise)."""
    value = secret.encode("ascii") if isinstance(secret, str) else secret  # as httpx encodes a str header
    headers = {SECRET_HEADER.encode(): value} if value is not None else {}
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        url = f"http://127.0.0.1:{port}/telegram"
        return await client.post(url, content=content, json=json, headers=headers)


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
        return await client.get(f"http://127.0.0.1:{port}{path}")


async def slow_client(port: int, sent: bytes) -> SocketStream:
    """A connection that sends `sent` (part of a request) and then nothing."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(sent)
    return stream


async def until_closed(stream: SocketStream) -> bytes:
    """Everything the server sends until it closes the connection."""
    received = b""
    try:
        while True:
            received += await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        return received
    finally:
        await stream.aclose()


async def response_head(stream: SocketStream) -> bytes:
    """The status line and headers of the server's answer (read until the blank line)."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += await stream.receive()
    return received


@contextmanager
def errors_logged(name: str) -> Iterator[anyio.Event]:
    """An event set when logger `name` logs an error (the bot's error handler saw a failed update)."""
    seen = anyio.Event()

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.set()

    handler = Handler(logging.ERROR)
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)


@pytest.fixture
async def webhook_scene() -> AsyncIterator[tuple[Chat, int]]:
    port = free_port()
    async with bot_scene(**webhook_mode(port)) as s:
        yield s, port


# --- the webhook ------------------------------------------------------------------------------------------


async def test_webhook_mode_sets_the_hook_at_the_public_url_and_a_deploy_flow_completes() -> None:
    """setWebhook carries <public_url>/telegram and the secret; updates POSTed there drive a full flow."""
    port = free_port()
    async with bot_scene(**webhook_mode(port)) as s:
        assert s.fake.webhook["url"] == f"{PUBLIC_URL}/telegram"
        assert s.fake.webhook["secret_token"] == SECRET
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


async def test_a_webhook_post_without_the_right_secret_is_refused_and_changes_nothing(
    webhook_scene: tuple[Chat, int],
) -> None:
    """No secret, a wrong one or one of another length: 403, and the update is never handled."""
    s, port = webhook_scene
    for secret in (None, "wrong", SECRET + "x", SECRET[:-1], ("é" + SECRET[1:]).encode("latin-1")):
        response = await post(port, json=an_update(text="/tools"), secret=secret)
        assert response.status_code == 403, secret
    s.fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET)
    await s.alice.send("/servers")  # a good delivery, handled after the refused ones would have been
    await s.fake.next_message(s.alice, containing="Servers")
    assert [m.text for m in s.fake.messages(s.alice, from_bot=True) if "/tools" in m.text] == []


async def test_a_wrong_secret_is_answered_403_before_any_body_arrives(
    webhook_scene: tuple[Chat, int],
) -> None:
    """The secret is checked on the headers alone: a request whose promised body never comes gets 403 at once."""
    _, port = webhook_scene
    head = (
        b"POST /telegram HTTP/1.1\r\nHost: bot.example.com\r\nContent-Type: application/json\r\n"
        b"Content-Length: 500000\r\nX-Telegram-Bot-Api-Secret-Token: wrong\r\n\r\n"
    )
    stream = await slow_client(port, head)
    with anyio.fail_after(REQUEST_TIMEOUT_S / 2):  # well before the server would give up on the body
        answer = await response_head(stream)
    await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 403 ")


async def test_bodies_over_a_megabyte_are_refused_by_length_and_while_streaming(
    webhook_scene: tuple[Chat, int],
) -> None:
    """413 for a Content-Length over 1 MB (nothing read), and for a chunked body once it passes 1 MB."""
    s, port = webhook_scene
    too_big = b"x" * (MAX_BODY + 1)
    assert (await post(port, too_big)).status_code == 413

    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(4 * MAX_BODY // 65536):
            sent += 65536
            yield b" " * 65536

    assert (await post(port, chunks())).status_code == 413
    exactly = b"{" + b" " * (MAX_BODY - len(b'{"update_id":7}')) + b'"update_id":7}'
    assert len(exactly) == MAX_BODY
    assert (await post(port, exactly)).status_code == 200  # the limit itself is allowed
    assert not any(method == "sendMessage" for method, _ in s.fake.calls)


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"\xff\xfe", b"[]", b'"text"', b'{"message": {}}', b'{"update_id": 1, "message": "x"}',
     b'{"update_id": 1, "message": {"chat": 5}}', b'{"update_id": "1"}'],
    ids=["not json", "not utf-8", "a list", "a string", "no update_id", "a string message", "a broken message",
         "a string update_id"],
)  # fmt: skip
async def test_a_body_that_is_not_a_telegram_update_is_a_bad_request(
    webhook_scene: tuple[Chat, int], body: bytes
) -> None:
    """Invalid JSON or JSON that is not an update: 400 (never a 500), and the bot goes on serving."""
    s, port = webhook_scene
    assert (await post(port, body)).status_code == 400
    assert (await post(port, json=an_update())).status_code == 200
    await s.fake.next_message(s.alice, containing="/tools")


async def test_the_webhook_takes_only_posts(webhook_scene: tuple[Chat, int]) -> None:
    """GET /telegram is 405: the route serves Telegram's deliveries only."""
    _, port = webhook_scene
    assert (await get(port, "/telegram")).status_code == 405


# --- slow and half-open connections -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "sent",
    [b"", b"POST /telegram HTTP/1.1\r\nHost: x\r\n",
     b"POST /telegram HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
     b"X-Telegram-Bot-Api-Secret-Token: " + SECRET.encode() + b"\r\n\r\n{\"update_id\": "],
    ids=["nothing", "half the headers", "half the body"],
)  # fmt: skip
async def test_a_connection_that_does_not_finish_its_request_is_closed(
    webhook_scene: tuple[Chat, int], sent: bytes
) -> None:
    """A client that connects and stalls (before, inside the headers or inside the body) is disconnected."""
    _, port = webhook_scene
    stream = await slow_client(port, sent)
    with anyio.fail_after(CLOSED_WITHIN_S):
        await until_closed(stream)


async def test_the_bot_answers_a_webhook_update_while_a_thousand_slow_connections_are_open(
    webhook_scene: tuple[Chat, int],
) -> None:
    """1,000 stalled connections neither stop a webhook update from being answered nor stay open for good."""
    s, port = webhook_scene
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = 2 * SLOW_CLIENTS + 512  # both ends live in this process, plus the bot's own files
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        partial = b"POST /telegram HTTP/1.1\r\nHost: x\r\n"
        slow = [await slow_client(port, partial) for _ in range(SLOW_CLIENTS)]
        s.fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET)
        await s.alice.send("/servers")
        await s.fake.next_message(s.alice, containing="Servers", timeout=10)
        with anyio.fail_after(CLOSED_WITHIN_S):
            async with anyio.create_task_group() as tg:
                for stream in slow:
                    tg.start_soon(until_closed, stream)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# --- /healthz and /metrics --------------------------------------------------------------------------------


async def test_healthz_is_200_while_telegram_answers_and_503_once_the_bot_api_is_down() -> None:
    """A failed Bot API call is checked again with getMe (200 if Telegram answers it); with the Bot API
    gone, 503."""
    port = free_port()
    async with bot_scene(**webhook_mode(port)) as s:
        s.fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET)
        ok = await get(port, "/healthz")
        assert (ok.status_code, ok.json()) == (200, {"bot": "running", "telegram": "reachable"})

        s.fake.fail_next("sendMessage", 502)  # a proxy in front of Telegram could not reach it, once
        probes = sum(method == "getMe" for method, _ in s.fake.calls)
        with errors_logged("bot.telegram.handlers.errors") as failed:
            await s.alice.send("/help")
            with anyio.fail_after(10):
                await failed.wait()
        assert (await get(port, "/healthz")).status_code == 200
        assert sum(method == "getMe" for method, _ in s.fake.calls) == probes + 1

        await s.fake.__aexit__(None, None, None)  # the Bot API goes away
        with errors_logged("bot.telegram.handlers.errors") as failed:
            await s.alice.send("/help")
            with anyio.fail_after(10):
                await failed.wait()
        down = await get(port, "/healthz")
        assert (down.status_code, down.json()) == (503, {"bot": "running", "telegram": "unreachable"})


async def test_metrics_show_prompts_answers_calls_bot_api_calls_and_sessions() -> None:
    """After a call with two elicitations (and a 429 on the way), /metrics has every family with its figures."""
    port = free_port()
    async with bot_scene(**webhook_mode(port)) as s:
        s.fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET)
        s.fake.fail_next("sendMessage", 429, retry_after=1)
        call = await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Where should web be deployed?" in m.text and has_buttons(m))
        during = await scrape(port)
        assert during[("toolnexus_prompts_pending", ())] == 1
        assert during[("toolnexus_mcp_sessions_open", ())] == 1
        await s.alice.press(card, "Production (live)")
        card = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(card, "✅ Submit")
        confirm = await s.fake.wait_for(lambda m: "Deploy web to production?" in m.text and has_buttons(m))
        await s.alice.press(confirm, "Cancel")
        await s.fake.wait_for(lambda m: is_result(m, after=call) and "cancelled" in m.text)
        after = await scrape(port)
    assert after[("toolnexus_prompts_pending", ())] == 0
    assert after[("toolnexus_answers_total", (("action", "accept"),))] == 1
    assert after[("toolnexus_answers_total", (("action", "cancel"),))] == 1
    assert after[("toolnexus_answers_total", (("action", "decline"),))] == 0
    assert sum(v for (name, _), v in after.items() if name == "toolnexus_tool_calls_total") == 1
    assert after[("toolnexus_mcp_sessions_open", ())] == 1
    sent = after[("toolnexus_bot_api_calls_total", (("method", "sendMessage"),))]
    assert sent == sum(method == "sendMessage" for method, _ in s.fake.calls)
    assert after[("toolnexus_bot_api_rate_limited_total", (("method", "sendMessage"),))] == 1


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """/metrics as {(sample name, labels): value}, parsed by prometheus_client's own parser."""
    response = await get(port, "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


async def test_polling_mode_with_web_serves_health_and_metrics_but_no_webhook() -> None:
    """In polling mode `[web]` turns on /healthz and /metrics; /telegram does not exist there."""
    port = free_port()
    async with bot_scene(web={"listen": "127.0.0.1", "port": port}) as s:
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools")
        assert (await get(port, "/healthz")).status_code == 200
        assert (await get(port, "/metrics")).status_code == 200
        assert (await post(port, json=an_update())).status_code == 404
        assert s.fake.webhook["url"] == ""


async def test_polling_is_the_default() -> None:
    """Without `mode` and `[web]`, the bot long-polls getUpdates and sets no webhook."""
    async with bot_scene() as s:
        await s.alice.send("/help")
        await s.fake.next_message(s.alice, containing="/tools")
        assert s.fake.webhook["url"] == ""
        assert any(method.lower() == "getupdates" for method, _ in s.fake.calls)

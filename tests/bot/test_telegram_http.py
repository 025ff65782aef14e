"""The Bot API HTTP client (`bot.telegram.http`) against real sockets on loopback: keep-alive, stale and hung
connections, timeouts with PTB's meanings, TLS, uploads, and the proxy fallback."""

from __future__ import annotations

import asyncio
import email.parser
import json
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from telegram import InputFile
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import HTTPXRequest, RequestData
from telegram.request._requestparameter import RequestParameter

from bot.telegram.bot import CardBot, build_bot
from bot.telegram.flood import FloodLimiter
from bot.telegram.http import BotApiRequest

pytestmark = pytest.mark.anyio

OK = b'{"ok":true,"result":true}'


@dataclass
class Seen:
    """One request as the server read it."""

    connection: int
    head: str
    body: bytes

    @property
    def headers(self) -> dict[str, str]:
        lines = self.head.split("\r\n")[1:]
        return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}


Handler = Callable[[Seen, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request; returns False to close the connection afterwards."""


@dataclass
class Server:
    port: int
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0

    def url(self, method: str = "getMe", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/bot123:SECRET/{method}"


async def answer(seen: Seen, writer: asyncio.StreamWriter, body: bytes = OK, extra: bytes = b"") -> bool:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body))
    await writer.drain()
    return True


@asynccontextmanager
async def serve(handler: Handler = answer, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(0)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        number = server.connections
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                seen = Seen(number, head, b"")
                seen.body = await reader.readexactly(int(seen.headers.get("content-length", "0")))
                server.seen.append(seen)
                if not await handler(seen, writer):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(connection, "127.0.0.1", 0, ssl=tls)
    server.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield server


def params(**values: object) -> RequestData:
    return RequestData([RequestParameter.from_input(k, v) for k, v in values.items()])


async def test_requests_share_one_keep_alive_connection_and_send_json() -> None:
    """Three calls, one connection; nested objects go as JSON objects (not JSON-in-form strings)."""
    async with serve() as server, BotApiRequest() as request:
        keyboard = {"inline_keyboard": [[{"text": "Yes", "callback_data": "p:t:1:y"}]]}
        for n in range(3):
            status, body = await request.do_request(
                server.url("sendMessage"), "POST", params(chat_id=5, text=f"hi {n}", reply_markup=keyboard)
            )
            assert (status, body) == (200, OK)
    assert [s.connection for s in server.seen] == [1, 1, 1]
    first = server.seen[0]
    assert first.head.startswith("POST /bot123:SECRET/sendMessage HTTP/1.1\r\n")
    assert first.headers["host"] == f"127.0.0.1:{server.port}"
    assert first.headers["content-type"] == "application/json"
    assert json.loads(first.body) == {"chat_id": 5, "text": "hi 0", "reply_markup": keyboard}


async def test_a_connection_the_server_closes_after_answering_is_not_reused() -> None:
    async def answer_then_close(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        await answer(seen, writer)
        return False

    async with serve(answer_then_close) as server, BotApiRequest() as request:
        for _ in range(3):
            assert await request.do_request(server.url(), "POST", params()) == (200, OK)
    assert [s.connection for s in server.seen] == [1, 2, 3]


async def test_connection_close_from_the_server_is_honoured() -> None:
    async def closing(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, extra=b"Connection: close\r\n")

    async with serve(closing) as server, BotApiRequest() as request:
        for _ in range(2):
            assert await request.do_request(server.url(), "POST", params()) == (200, OK)
    assert [s.connection for s in server.seen] == [1, 2]


async def test_a_reused_connection_dropped_before_any_answer_is_retried_once_on_a_new_one() -> None:
    """The keep-alive race: the server closed the idle connection just as the next request went out."""

    async def drop_second_request(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if len(server.seen) == 2:
            return False  # read it, never answer, close: it was not processed
        return await answer(seen, writer)

    async with serve(drop_second_request) as server, BotApiRequest() as request:
        assert await request.do_request(server.url(), "POST", params(n=1)) == (200, OK)
        assert await request.do_request(server.url(), "POST", params(n=2)) == (200, OK)
    assert [(s.connection, json.loads(s.body)) for s in server.seen] == [
        (1, {"n": 1}),
        (1, {"n": 2}),
        (2, {"n": 2}),
    ]


async def test_a_fresh_connection_dropped_without_an_answer_is_a_network_error_not_a_retry() -> None:
    async def drop(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return False

    async with serve(drop) as server, BotApiRequest() as request:
        with pytest.raises(NetworkError, match="closed the connection"):
            await request.do_request(server.url(), "POST", params())
    assert len(server.seen) == 1


async def test_a_response_cut_off_midway_is_a_network_error() -> None:
    async def half(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"ok":')
        await writer.drain()
        return False

    async with serve(half) as server, BotApiRequest() as request:
        with pytest.raises(NetworkError):
            await request.do_request(server.url(), "POST", params())
    assert len(server.seen) == 1


async def test_a_silent_server_times_out_and_its_connection_is_dropped() -> None:
    """read_timeout is PTB's: the longest silence; the hung connection is never handed out again."""
    hold = asyncio.Event()

    async def silent_first(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if len(server.seen) == 1:
            await hold.wait()
            return False
        return await answer(seen, writer)

    async with serve(silent_first) as server, BotApiRequest() as request:
        with pytest.raises(TimedOut):
            await request.do_request(server.url(), "POST", params(), read_timeout=0.2)
        assert await request.do_request(server.url(), "POST", params()) == (200, OK)
        hold.set()
    assert [s.connection for s in server.seen] == [1, 2]


async def test_a_slow_but_steady_answer_is_not_a_timeout() -> None:
    """Bytes keep arriving within the read timeout, so the whole answer may take longer than it."""
    body = b'{"ok":true,"result":"' + b"x" * 40 + b'"}'

    async def trickle(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for i in range(0, len(body), len(body) // 10 + 1):
            await asyncio.sleep(0.1)  # the server's pace is what is under test: gaps well inside the timeout
            writer.write(body[i : i + len(body) // 10 + 1])
            await writer.drain()
        return True

    async with serve(trickle) as server, BotApiRequest() as request:
        # gaps of 0.1 s: the whole answer takes longer than the 0.6 s timeout, no silence comes near it
        assert await request.do_request(server.url(), "POST", params(), read_timeout=0.6) == (200, body)


async def test_all_connections_busy_is_a_pool_timeout_and_the_request_is_not_sent() -> None:
    hold, arrived = asyncio.Event(), asyncio.Event()

    async def slow(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        arrived.set()
        await hold.wait()
        return await answer(seen, writer)

    async with serve(slow) as server, BotApiRequest(connections=1) as request:
        first = asyncio.ensure_future(request.do_request(server.url(), "POST", params(n=1)))
        await arrived.wait()
        with pytest.raises(TimedOut, match="Pool timeout"):
            await request.do_request(server.url(), "POST", params(n=2), pool_timeout=0.1)
        hold.set()
        assert await first == (200, OK)
    assert [json.loads(s.body) for s in server.seen] == [{"n": 1}]


async def test_an_unreachable_server_is_a_network_error_without_the_token() -> None:
    async with serve() as server:
        port = server.port
    async with BotApiRequest() as request:
        with pytest.raises(NetworkError) as caught:
            await request.do_request(f"http://127.0.0.1:{port}/bot123:SECRET/getMe", "POST", params())
    assert f"127.0.0.1:{port}" in caught.value.message and "SECRET" not in caught.value.message


async def test_uploads_go_as_multipart_form_data() -> None:
    async with serve() as server, BotApiRequest() as request:
        data = params(chat_id=5, document=InputFile(b"\x00report", filename="r.bin"))
        assert await request.do_request(server.url("sendDocument"), "POST", data) == (200, OK)
    seen = server.seen[0]
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + seen.headers["content-type"].encode() + b"\r\n\r\n" + seen.body
    )
    parts = {p.get_param("name", header="content-disposition"): p for p in message.get_payload()}
    assert parts["chat_id"].get_payload(decode=True) == b"5"
    files = [p for p in parts.values() if p.get_filename() == "r.bin"]
    assert [f.get_payload(decode=True) for f in files] == [b"\x00report"]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1, made by the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_server_certificate(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serve(tls=server_side) as server:
        async with BotApiRequest(ssl_context=trusting) as request:
            for _ in range(2):
                assert await request.do_request(server.url(scheme="https"), "POST", params()) == (200, OK)
        async with BotApiRequest() as request:  # the default trust store does not know this certificate
            with pytest.raises(NetworkError, match="CERTIFICATE_VERIFY_FAILED"):
                await request.do_request(server.url(scheme="https"), "POST", params())
    assert [s.connection for s in server.seen] == [1, 1]


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, BotApiRequest),
        ({"HTTPS_PROXY": "http://proxy.internal:3128"}, HTTPXRequest),
        ({"ALL_PROXY": "http://proxy.internal:3128"}, HTTPXRequest),
        ({"HTTPS_PROXY": "http://proxy.internal:3128", "NO_PROXY": "api.telegram.org"}, BotApiRequest),
    ],
)
def test_a_configured_proxy_hands_the_bot_to_ptbs_httpx_client(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected: type
) -> None:
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    bot = build_bot("123:SECRET", "https://api.telegram.org/bot", FloodLimiter())
    assert type(bot.request) is expected


async def test_post_json_sends_the_payload_as_json_and_returns_the_result() -> None:
    """The card path's call: plain JSON values in, the Bot API's `result` out, on the pooled connection."""
    result = b'{"ok":true,"result":{"message_id":7,"chat":{"id":5,"type":"private"},"date":0}}'

    async def answer_message(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, result)

    async with serve(answer_message) as server, BotApiRequest() as request:
        keyboard = {"inline_keyboard": [[{"text": "Yes", "callback_data": "p:t:1:y"}]]}
        for _ in range(2):
            got = await request.post_json(server.url("sendMessage"), {"chat_id": 5, "reply_markup": keyboard})
            assert got == {"message_id": 7, "chat": {"id": 5, "type": "private"}, "date": 0}
    assert [s.connection for s in server.seen] == [1, 1]
    assert server.seen[0].headers["content-type"] == "application/json"
    assert json.loads(server.seen[0].body) == {"chat_id": 5, "reply_markup": keyboard}


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"ok":false,"error_code":400,"description":"Bad Request: message is not modified"}'),
        (400, b'{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}'),
        (
            429,
            b'{"ok":false,"error_code":429,"description":"Too Many Requests","parameters":{"retry_after":3}}',
        ),
        (400, b'{"ok":false,"description":"group upgraded","parameters":{"migrate_to_chat_id":-1002}}'),
        (403, b'{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked by the user"}'),
        (401, b'{"ok":false,"error_code":401,"description":"Unauthorized"}'),
        (409, b'{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates"}'),
        (502, b"<html>Bad Gateway</html>"),
        (500, b'{"ok":false,"error_code":500,"description":"Internal Server Error"}'),
        (299, b"not json"),
    ],
)
async def test_post_json_fails_exactly_as_ptbs_post_does(
    status: int, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same exception type and message as PTB's own `post` for the same answer (PTB's code maps both)."""
    # Without PTB_TIMEDELTA, PTB 22.8 constructing RetryAfter emits a PTBDeprecationWarning (an error here).
    monkeypatch.setenv("PTB_TIMEDELTA", "true")

    async def answer_status(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()
        return True

    async with serve(answer_status) as server, BotApiRequest() as request:
        with pytest.raises(TelegramError) as ours:
            await request.post_json(server.url("sendMessage"), {"chat_id": 5})
        with pytest.raises(TelegramError) as ptbs:
            await request.post(server.url("sendMessage"), params(chat_id=5))
    assert type(ours.value) is type(ptbs.value)
    assert str(ours.value) == str(ptbs.value)
    assert "SECRET" not in str(ours.value)


SENT = b'{"ok":true,"result":{"message_id":7,"from":{"id":1,"is_bot":true,"first_name":"B"},"date":0}}'
SPACED = b'{"ok": true, "result": {"message_id": 8, "date": 0}}'
ME = b'{"ok":true,"result":{"id":1,"is_bot":true,"first_name":"B","username":"b_bot"}}'


@asynccontextmanager
async def bot_answered_with(body: bytes) -> AsyncIterator[CardBot]:
    """A started bot whose server answers getMe as Telegram would and every other call with `body`."""

    async def answer_body(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, ME if "/getMe " in seen.head else body)

    async with serve(answer_body) as server:
        bot = build_bot("123:SECRET", f"http://127.0.0.1:{server.port}/bot", FloodLimiter())
        async with bot:
            yield bot


@pytest.mark.parametrize(
    ("body", "expected"),
    [(SENT, 7), (SPACED, 8), (b'{"ok":true,"result":{"chat":{"id":5},"message_id":9,"date":0}}', 9)],
)
async def test_a_sent_message_id_is_read_from_the_answer_however_it_is_written(
    body: bytes, expected: int
) -> None:
    """Telegram's own layout is read without decoding the echoed message; any other is decoded in full."""
    async with bot_answered_with(body) as bot:
        assert await bot.send_html(5, "<b>hi</b>") == expected


async def test_a_success_is_handed_to_read_and_decoded_only_when_read_declines() -> None:
    """`read` takes the raw body of a success; None from it means: decode as PTB would."""
    truncated = b'{"ok":true,"result":{"message_id":7,"text":"cut of'  # proves read saw the raw bytes

    async def answer_cut(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, truncated if seen.body == b'{"cut":1}' else SENT)

    async with serve(answer_cut) as server, BotApiRequest() as request:
        url = server.url("sendMessage")
        assert await request.post_json(url, {"cut": 1}, read=lambda body: body[:11]) == b'{"ok":true,'
        declined = await request.post_json(url, {"cut": 0}, read=lambda body: None)
        assert declined["message_id"] == 7
        with pytest.raises(TelegramError, match="Invalid server response"):
            await request.post_json(url, {"cut": 1}, read=lambda body: None)


@pytest.mark.parametrize("body", [b"<html>captive portal</html>", b""])
async def test_a_success_that_is_not_the_bot_apis_is_refused_even_when_its_result_is_never_read(
    body: bytes,
) -> None:
    async with bot_answered_with(body) as bot:
        with pytest.raises(TelegramError, match="Invalid server response"):
            await bot.edit_html(5, 7, "<b>hi</b>")


TAP = {
    "update_id": 41,
    "callback_query": {
        "id": "4000000000000001",
        "from": {"id": 5, "is_bot": False, "first_name": "Ada"},
        "chat_instance": "-1",
        "data": "p:tok:1:0",
        "message": {"message_id": 7, "chat": {"id": 5, "type": "private"}, "date": 0, "text": "card"},
    },
}


async def test_a_long_poll_goes_as_json_with_its_own_read_timeout_and_arrives_as_updates() -> None:
    """Through this client a poll keeps PTB's meaning: the read timeout is the request's own plus the poll's
    `timeout` (else a poll the server holds open would time out), and the updates are PTB objects, without
    the echoed message of a tap."""
    polls = iter([0.6, 0.6])

    async def hold_then_answer(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if "/getMe " in seen.head:
            return await answer(seen, writer, ME)
        await asyncio.sleep(next(polls))  # the server holding a long poll open: the behaviour under test
        return await answer(seen, writer, json.dumps({"ok": True, "result": [TAP]}).encode())

    async with serve(hold_then_answer) as server:
        base = f"http://127.0.0.1:{server.port}/bot"
        bot = CardBot(
            "123:SECRET",
            base_url=base,
            request=BotApiRequest(),
            get_updates_request=BotApiRequest(connections=1, read_timeout=0.2),
            rate_limiter=FloodLimiter(),
        )
        async with bot:
            (update,) = await bot.get_updates(offset=40, timeout=1, allowed_updates=["callback_query"])
            with pytest.raises(TimedOut):
                await bot.get_updates(offset=41, timeout=0, read_timeout=0.0001)
    assert update.callback_query is not None and update.callback_query.data == "p:tok:1:0"
    assert update.callback_query.message is None
    poll = next(s for s in server.seen if "/getUpdates " in s.head)
    assert poll.headers["content-type"] == "application/json"
    assert json.loads(poll.body) == {"offset": 40, "timeout": 1, "allowed_updates": ["callback_query"]}

"""The Bot API HTTP client (`bot.telegram.request`, aiohttp under PTB) against real sockets on loopback:
keep-alive, dropped and hung connections, timeouts with PTB's meanings, bounded answers, TLS, uploads, and
errors that never carry the token."""

from __future__ import annotations

import asyncio
import email.message
import email.parser
import json
import shutil
import ssl
import subprocess
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import anyio
import pytest
from telegram import InputFile
from telegram.error import NetworkError, TelegramError, TimedOut
from telegram.request import RequestData
from telegram.request._requestparameter import RequestParameter

from bot.telegram.bot import CardBot, build_bot
from bot.telegram.flood import FloodLimiter
from bot.telegram.request import AiohttpRequest, on_written

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
    """A server on loopback that reads whole requests (head and Content-Length body) and lets `handler` act."""
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


def assert_no_token(error: BaseException) -> None:
    """No exception a logged traceback would print (the error, its cause or context) names the token."""
    chain: BaseException | None = error
    while chain is not None:
        printed = "".join(traceback.format_exception_only(chain)) + repr(chain)
        assert "SECRET" not in printed, printed
        chain = chain.__cause__ or (None if chain.__suppress_context__ else chain.__context__)


async def test_requests_share_one_keep_alive_connection_and_send_json() -> None:
    """Three calls, one connection; nested objects go as JSON objects (not JSON-in-form strings)."""
    async with serve() as server, AiohttpRequest() as request:
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
    assert first.headers["user-agent"].startswith("python-telegram-bot")
    assert json.loads(first.body) == {"chat_id": 5, "text": "hi 0", "reply_markup": keyboard}


async def test_a_request_made_in_an_on_written_block_reports_its_body_written_and_others_do_not() -> None:
    """The flood limiter counts a request from when its body was written (`on_written`): the client reports
    it for requests made inside the block, before their answer, and never for requests made outside it."""
    reports: list[int] = []
    async with serve() as server, AiohttpRequest() as request:
        await request.do_request(server.url("sendMessage"), "POST", params(chat_id=5, text="outside"))
        assert reports == []
        with on_written(lambda: reports.append(len(server.seen))):
            await request.do_request(server.url("sendMessage"), "POST", params(chat_id=5, text="inside"))
        await request.do_request(server.url("sendMessage"), "POST", params(chat_id=5, text="after"))
    assert reports and set(reports) == {1}  # while only the first request had been answered


async def test_connection_close_from_the_server_is_honoured() -> None:
    async def closing(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        await answer(seen, writer, extra=b"Connection: close\r\n")
        return False

    async with serve(closing) as server, AiohttpRequest() as request:
        for _ in range(2):
            assert await request.do_request(server.url(), "POST", params()) == (200, OK)
    assert [s.connection for s in server.seen] == [1, 2]


@pytest.mark.parametrize("earlier_calls", [0, 1], ids=["fresh connection", "kept-alive connection"])
async def test_a_sendmessage_read_whole_then_dropped_unanswered_is_a_network_error_and_never_sent_again(
    earlier_calls: int,
) -> None:
    """The server read the request and closed without a word: Telegram may have sent the message, so the
    request is not sent again (a duplicate message), on a fresh connection or on one kept alive (where a
    client may take the drop for a stale connection and re-send); the caller gets the NetworkError."""

    async def drop_last(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if json.loads(seen.body).get("text") == "last":
            return False  # read it whole, never answer, close
        return await answer(seen, writer)

    async with serve(drop_last) as server, AiohttpRequest() as request:
        for n in range(earlier_calls):
            await request.do_request(server.url("sendMessage"), "POST", params(chat_id=5, text=f"{n}"))
        with pytest.raises(NetworkError) as caught:
            await request.do_request(server.url("sendMessage"), "POST", params(chat_id=5, text="last"))
        with anyio.fail_after(5):  # anything re-sent would have arrived by the time the next call is answered
            assert await request.do_request(server.url(), "POST", params()) == (200, OK)
    bodies = [json.loads(s.body) for s in server.seen]
    assert bodies.count({"chat_id": 5, "text": "last"}) == 1
    assert len(bodies) == earlier_calls + 2
    assert_no_token(caught.value)


async def test_a_response_cut_off_midway_is_a_network_error() -> None:
    async def half(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"ok":')
        await writer.drain()
        return False

    async with serve(half) as server, AiohttpRequest() as request:
        with pytest.raises(NetworkError) as caught:
            await request.do_request(server.url(), "POST", params())
    assert len(server.seen) == 1
    assert_no_token(caught.value)


async def test_a_silent_server_times_out_and_its_connection_is_dropped() -> None:
    """read_timeout is PTB's: the longest silence; the hung connection is never handed out again."""
    hold = asyncio.Event()

    async def silent_first(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        if len(server.seen) == 1:
            await hold.wait()
            return False
        return await answer(seen, writer)

    async with serve(silent_first) as server, AiohttpRequest() as request:
        with pytest.raises(TimedOut) as caught:
            await request.do_request(server.url(), "POST", params(), read_timeout=0.2)
        assert await request.do_request(server.url(), "POST", params()) == (200, OK)
        hold.set()
    assert [s.connection for s in server.seen] == [1, 2]
    assert_no_token(caught.value)


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

    async with serve(trickle) as server, AiohttpRequest() as request:
        # gaps of 0.1 s: the whole answer takes longer than the 0.6 s timeout, no silence comes near it
        assert await request.do_request(server.url(), "POST", params(), read_timeout=0.6) == (200, body)


async def test_an_answer_dripped_past_the_whole_exchange_deadline_is_a_timeout() -> None:
    """A server that keeps each silence inside the read timeout but never finishes cannot hold a request: the
    exchange has a deadline (connect + pool + twice the read timeout)."""
    stop = asyncio.Event()

    async def drip(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        while not stop.is_set():
            await asyncio.sleep(0.05)  # the server's pace is what is under test: gaps well inside the timeout
            writer.write(b"x")
            await writer.drain()
        return False

    async with serve(drip) as server, AiohttpRequest() as request:
        with pytest.raises(TimedOut) as caught:
            async with asyncio.timeout(10):  # without the deadline the drip would last ~14 hours
                await request.do_request(
                    server.url(), "POST", params(), read_timeout=0.3, connect_timeout=0.1, pool_timeout=0.1
                )
        stop.set()
    assert_no_token(caught.value)


async def test_all_connections_busy_is_a_pool_timeout_and_the_request_is_not_sent() -> None:
    hold, arrived = asyncio.Event(), asyncio.Event()

    async def slow(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        arrived.set()
        await hold.wait()
        return await answer(seen, writer)

    async with serve(slow) as server, AiohttpRequest(connections=1) as request:
        first = asyncio.ensure_future(request.do_request(server.url(), "POST", params(n=1)))
        await arrived.wait()
        with pytest.raises(TimedOut, match="free connection") as caught:
            await request.do_request(server.url(), "POST", params(n=2), pool_timeout=0.1, connect_timeout=0.1)
        hold.set()
        assert await first == (200, OK)
    assert [json.loads(s.body) for s in server.seen] == [{"n": 1}]
    assert_no_token(caught.value)  # aiohttp's own message for this names the whole URL


async def test_an_unreachable_server_is_a_network_error_without_the_token() -> None:
    async with serve() as server:
        port = server.port
    async with AiohttpRequest() as request:
        with pytest.raises(NetworkError) as caught:
            await request.do_request(f"http://127.0.0.1:{port}/bot123:SECRET/getMe", "POST", params())
    assert f"127.0.0.1:{port}" in caught.value.message
    assert_no_token(caught.value)


async def test_an_answer_declared_larger_than_the_cap_is_refused() -> None:
    big = b'{"ok":true,"result":"' + b"x" * 5000 + b'"}'

    async def answer_big(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, big)

    async with serve(answer_big) as server, AiohttpRequest(max_response_bytes=4096) as request:
        with pytest.raises(NetworkError, match="too large") as caught:
            await request.do_request(server.url(), "POST", params())
    assert_no_token(caught.value)


async def test_an_answer_growing_past_the_cap_is_refused_while_it_arrives() -> None:
    """A chunked answer with no declared length is counted as it comes: refused once past the cap, without
    waiting for an end that never comes."""
    hold = asyncio.Event()

    async def endless(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(8):
            writer.write(b"400\r\n" + b"x" * 1024 + b"\r\n")
        await writer.drain()
        await hold.wait()  # never ends the body
        return False

    async with serve(endless) as server, AiohttpRequest(max_response_bytes=4096, read_timeout=60) as request:
        with anyio.fail_after(10), pytest.raises(NetworkError, match="too large"):
            await request.do_request(server.url(), "POST", params())
        hold.set()


async def test_uploads_go_as_multipart_form_data() -> None:
    async with serve() as server, AiohttpRequest() as request:
        data = params(chat_id=5, document=InputFile(b"\x00report", filename="r.bin"))
        assert await request.do_request(server.url("sendDocument"), "POST", data) == (200, OK)
    seen = server.seen[0]
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + seen.headers["content-type"].encode() + b"\r\n\r\n" + seen.body
    )
    payload = cast(list[email.message.Message], message.get_payload())  # multipart: the parts
    parts = {p.get_param("name", header="content-disposition"): p for p in payload}
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
        async with AiohttpRequest(ssl_context=trusting) as request:
            for _ in range(2):
                assert await request.do_request(server.url(scheme="https"), "POST", params()) == (200, OK)
        async with AiohttpRequest() as request:  # the default trust store does not know this certificate
            with pytest.raises(NetworkError, match="CERTIFICATE_VERIFY_FAILED") as caught:
                await request.do_request(server.url(scheme="https"), "POST", params())
    assert [s.connection for s in server.seen] == [1, 1]
    assert_no_token(caught.value)


def test_answers_are_decoded_as_json_objects_and_anything_else_is_an_invalid_response() -> None:
    """PTB's `parse_json_payload` hook: a JSON object comes back as a dict; anything else is refused."""
    assert AiohttpRequest.parse_json_payload(b'{"ok":true,"result":{"a":[1,"\xc3\xa9"]}}') == {
        "ok": True,
        "result": {"a": [1, "é"]},
    }
    for body in (b"<html>captive portal</html>", b"", b"[1]", b'{"ok":'):
        with pytest.raises(TelegramError, match="Invalid server response"):
            AiohttpRequest.parse_json_payload(body)


ME = b'{"ok":true,"result":{"id":1,"is_bot":true,"first_name":"B","username":"b_bot"}}'
SENT = b'{"ok":true,"result":{"message_id":7,"chat":{"id":5,"type":"private"},"date":0}}'


@asynccontextmanager
async def bot_answered_with(body: bytes) -> AsyncIterator[tuple[CardBot, Server]]:
    """A started bot whose server answers getMe as Telegram would and every other call with `body`."""

    async def answer_body(seen: Seen, writer: asyncio.StreamWriter) -> bool:
        return await answer(seen, writer, ME if "/getMe " in seen.head else body)

    async with serve(answer_body) as server:
        bot = build_bot("123:SECRET", f"http://127.0.0.1:{server.port}/bot", FloodLimiter())
        async with bot:
            yield bot, server


async def test_a_card_goes_out_as_html_without_a_link_preview_and_with_its_buttons() -> None:
    """The card calls put PTB's own methods on the wire: the keyboard as built, the sent message's id back."""
    keyboard: list[list[dict[str, object]]] = [
        [{"text": "Yes", "callback_data": "p:t:1:y"}],
        [{"text": "Open", "url": "https://x.org/"}],
    ]
    async with bot_answered_with(SENT) as (bot, server):
        assert await bot.send_html(5, "<b>hi</b>", keyboard, reply_to=3) == 7
    sent = json.loads(next(s for s in server.seen if "/sendMessage " in s.head).body)
    assert sent == {
        "chat_id": 5,
        "text": "<b>hi</b>",
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": True},
        "reply_markup": {"inline_keyboard": keyboard},
        "reply_parameters": {"message_id": 3, "allow_sending_without_reply": True},
    }


@pytest.mark.parametrize("body", [b"<html>captive portal</html>", b""])
async def test_a_success_that_is_not_the_bot_apis_is_refused(body: bytes) -> None:
    async with bot_answered_with(body) as (bot, _):
        with pytest.raises(TelegramError, match="Invalid server response"):
            await bot.edit_html(5, 7, "<b>hi</b>")


@pytest.mark.parametrize(
    ("base_url", "file_url"),
    [
        ("https://api.telegram.org/bot", "https://api.telegram.org/file/bot"),
        ("https://bot.example.com/bot", "https://bot.example.com/file/bot"),
        ("http://127.0.0.1:8081/botapi/bot", "http://127.0.0.1:8081/botapi/file/bot"),
    ],
)
def test_the_file_url_is_the_bot_api_base_with_file_before_its_last_bot(base_url: str, file_url: str) -> None:
    """A host or path that itself contains `/bot` is left alone."""
    bot = build_bot("123:SECRET", base_url, FloodLimiter())
    assert bot.base_file_url == file_url + "123:SECRET"


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


async def test_a_long_poll_goes_as_json_with_its_own_read_timeout_and_arrives_as_whole_updates() -> None:
    """A poll keeps PTB's meaning: the read timeout is the request's own plus the poll's `timeout` (else a
    poll the server holds open would time out), and the updates are PTB objects as Telegram sent them, a
    tap with the message it was on."""
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
            request=AiohttpRequest(),
            get_updates_request=AiohttpRequest(connections=1, read_timeout=0.2),
            rate_limiter=FloodLimiter(),
        )
        async with bot:
            (update,) = await bot.get_updates(offset=40, timeout=1, allowed_updates=["callback_query"])
            with pytest.raises(TimedOut):
                await bot.get_updates(offset=41, timeout=0, read_timeout=0.0001)
    query = update.callback_query
    assert query is not None and query.data == "p:tok:1:0"
    assert query.message is not None and query.message.message_id == 7
    poll = next(s for s in server.seen if "/getUpdates " in s.head)
    assert poll.headers["content-type"] == "application/json"
    assert json.loads(poll.body) == {"offset": 40, "timeout": 1, "allowed_updates": ["callback_query"]}

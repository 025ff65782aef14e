"""The sans-I/O HTTP/1.1 pieces under the Bot API client: request heads, multipart bodies, the response parser."""

from __future__ import annotations

import email.parser
import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.telegram._http11 import ProtocolError, Response, ResponseParser, multipart, request_head

BODY = b'{"ok":true,"result":{"message_id":7}}'


def _parse(raw: bytes, *, pieces: list[int] | None = None, eof: bool = False) -> Response:
    """Feed `raw` in pieces (cut at the given offsets), as a socket would deliver it."""
    parser = ResponseParser()
    cuts = sorted({c for c in pieces or [] if 0 < c < len(raw)})
    done = False
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        assert not done, "the parser finished before all bytes of the response"
        done = parser.feed(raw[start:end])
    if eof:
        return parser.eof()
    assert done, "the parser did not finish"
    return parser.response


def _chunked(body: bytes, size: int) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


LENGTH = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)
CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(BODY, 5)
CLOSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + BODY


@given(st.lists(st.integers(min_value=1, max_value=len(CHUNKED) - 1), max_size=12))
def test_a_response_parses_the_same_however_the_bytes_are_split(cuts: list[int]) -> None:
    """Content-Length, chunked and read-until-close bodies, cut anywhere (even inside CRLFs and sizes)."""
    assert _parse(LENGTH, pieces=cuts) == Response(200, BODY, keep_alive=True)
    assert _parse(CHUNKED, pieces=cuts) == Response(200, BODY, keep_alive=True)
    assert _parse(CLOSE, pieces=cuts, eof=True) == Response(200, BODY, keep_alive=False)


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\n", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\n", False),
        (b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Close\r\n", False),
        (b"HTTP/1.0 200 OK\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n", True),
    ],
)
def test_keep_alive_follows_the_version_and_connection_header(head: bytes, keep_alive: bool) -> None:
    raw = head + b"Content-Length: 2\r\n\r\n{}"
    assert _parse(raw).keep_alive is keep_alive


def test_error_statuses_keep_their_body() -> None:
    """A 400 from the Bot API carries the description PTB turns into BadRequest."""
    body = b'{"ok":false,"error_code":400,"description":"Bad Request: message is not modified"}'
    raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert _parse(raw) == Response(400, body, keep_alive=True)


def test_an_interim_100_continue_is_skipped() -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\n" + LENGTH
    assert _parse(raw, pieces=[10, 30]) == Response(200, BODY, keep_alive=True)


def test_no_body_statuses_and_head_requests_end_at_the_head() -> None:
    assert _parse(b"HTTP/1.1 204 No Content\r\n\r\n") == Response(204, b"", keep_alive=True)
    parser = ResponseParser(head_request=True)
    assert parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n")
    assert parser.response == Response(200, b"", keep_alive=True)


def test_chunk_extensions_and_trailers_are_read_past() -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;name=value\r\n{}\r\n0\r\nX-Trailer: 1\r\n\r\n"
    assert _parse(raw).body == b"{}"


@pytest.mark.parametrize(
    ("encoding", "packed"),
    [
        ("gzip", gzip.compress(BODY)),
        ("deflate", zlib.compress(BODY)),
        ("deflate", zlib.compress(BODY)[2:-4]),  # raw deflate, as some servers send it
        ("identity", BODY),
    ],
)
def test_compressed_bodies_are_decoded(encoding: str, packed: bytes) -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n" % (
        encoding.encode(),
        len(packed),
    )
    assert _parse(raw + packed).body == BODY


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"SMTP/1.0 220 hello\r\n\r\n", "status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "content-length"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", "content-length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "transfer-encoding"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX", "CRLF"),
        (b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\n{}", "content-encoding"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}extra", "after the end"),
    ],
)
def test_malformed_responses_are_protocol_errors(raw: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        ResponseParser().feed(raw)


def test_an_endless_head_is_refused() -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * 70_000 + b"\r\n"
    with pytest.raises(ProtocolError, match="too large"):
        ResponseParser().feed(head)


def test_a_connection_closed_mid_response_is_an_error_and_says_whether_anything_came() -> None:
    parser = ResponseParser()
    assert not parser.started
    with pytest.raises(ProtocolError):
        parser.eof()
    parser.feed(LENGTH[:-3])
    assert parser.started
    with pytest.raises(ProtocolError, match="before the response was complete"):
        parser.eof()


def test_request_heads_carry_host_length_and_type() -> None:
    head = request_head("POST", "/bot1:x/sendMessage", "api.telegram.org", "ua/1", "application/json", 12)
    assert head == (
        b"POST /bot1:x/sendMessage HTTP/1.1\r\nHost: api.telegram.org\r\nUser-Agent: ua/1\r\nAccept: */*\r\n"
        b"Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"
    )
    assert b"Content-Length" not in request_head("GET", "/file/bot1:x/a.jpg", "h", "ua", None, 0)


def test_multipart_bodies_parse_back_into_their_fields_and_files() -> None:
    content_type, body = multipart(
        {"chat_id": "42", "caption": 'say "hi"\nthere'},
        {"document": ('re"port.txt', b"\x00\x01 bytes", "text/plain")},
    )
    message = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body
    )
    parts = {part.get_param("name", header="content-disposition"): part for part in message.get_payload()}
    assert parts["chat_id"].get_payload(decode=True) == b"42"
    assert parts["caption"].get_payload(decode=True) == b'say "hi"\nthere'
    assert parts["document"].get_payload(decode=True) == b"\x00\x01 bytes"
    assert parts["document"].get_content_type() == "text/plain"

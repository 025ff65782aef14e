"""HTTP/1.1 for the Bot API client, sans I/O: request heads, multipart bodies, and an incremental response parser.

Pure: bytes in, values out. The only framing the Bot API (and the proxies in front of it) uses is here:
Content-Length, chunked, or read-until-close; gzip/deflate when a server compresses unasked.
"""

from __future__ import annotations

import secrets
import zlib
from dataclasses import dataclass
from typing import Final

MAX_HEAD_BYTES: Final = 64 * 1024
"""A response head larger than this is refused (a misbehaving server, not a Bot API answer)."""
_CRLF: Final = b"\r\n"
_HEAD_END: Final = b"\r\n\r\n"
_FRAMING_HEADERS: Final = frozenset({"connection", "content-encoding", "content-length", "transfer-encoding"})


class ProtocolError(Exception):
    """The peer spoke something that is not HTTP/1.1 as we can read it."""


@dataclass(frozen=True, slots=True)
class Response:
    """One parsed response."""

    status: int
    body: bytes
    keep_alive: bool
    """Whether the connection may carry another request."""


def request_head(
    method: str, target: str, host: str, user_agent: str, content_type: str | None, length: int
) -> bytes:
    """The request line and headers for one request with a body of `length` bytes."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"User-Agent: {user_agent}", "Accept: */*"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if length or method == "POST":
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes, str]]) -> tuple[str, bytes]:
    """A multipart/form-data body: (content type with its boundary, body)."""
    boundary = secrets.token_hex(16)
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quote(name)}"\r\n\r\n'.encode()
            + value.encode()
            + _CRLF
        )
    for name, (filename, content, mimetype) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_quote(name)}"; '
            f'filename="{_quote(filename)}"\r\nContent-Type: {mimetype}\r\n\r\n'
        )
        parts.append(head.encode() + content + _CRLF)
    parts.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", b"".join(parts)


def _quote(value: str) -> str:
    # RFC 7578 §4.2: names are quoted strings; a quote or line break inside would end the header early.
    return value.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


class ResponseParser:
    """Feed it the bytes of one response as they arrive; `feed` returns True once the response is complete.

    Raises `ProtocolError` for anything malformed. `eof()` says the peer closed: it completes a body read
    until close, and raises otherwise.
    """

    __slots__ = (
        "_body",
        "_buffer",
        "_chunk_left",
        "_done",
        "_encoding",
        "_framing",
        "_keep_alive",
        "_length",
        "_no_body",
        "_status",
        "started",
    )

    def __init__(self, *, head_request: bool = False) -> None:
        self._buffer = bytearray()
        self._body = bytearray()
        self._status = 0
        self._framing = ""  # "", "length", "chunked", "close"
        self._length = 0
        self._chunk_left = -1  # -1: a chunk-size line is next; -2: the trailer is next
        self._keep_alive = True
        self._encoding = ""
        self._done: Response | None = None
        self._no_body = head_request
        self.started = False
        """Whether any byte of the response has arrived (a connection closed before that carried nothing)."""

    @property
    def response(self) -> Response:
        assert self._done is not None, "the response is not complete yet"
        return self._done

    def feed(self, data: bytes) -> bool:
        if self._done is not None:
            raise ProtocolError("bytes after the end of the response")
        if data:
            self.started = True
        self._buffer += data
        if not self._framing and not self._head():
            return False
        if self._framing == "length":
            self._take_length()
        elif self._framing == "chunked":
            self._take_chunks()
        elif self._framing == "close":
            self._body += self._buffer
            self._buffer.clear()
        return self._done is not None

    def eof(self) -> Response:
        """The peer closed the connection; the complete response, or `ProtocolError`."""
        if self._done is not None:
            return self._done
        if self._framing == "close":
            self._finish(keep_alive=False)
            return self.response
        raise ProtocolError("the server closed the connection before the response was complete")

    # -- internals --------------------------------------------------------------------------------

    def _head(self) -> bool:
        end = self._buffer.find(_HEAD_END)
        if end < 0:
            if len(self._buffer) > MAX_HEAD_BYTES:
                raise ProtocolError("response head too large")
            return False
        head = bytes(self._buffer[:end]).decode("latin-1")
        del self._buffer[: end + 4]
        status_line, *header_lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
        status = int(code)
        headers: dict[str, str] = {}
        for line in header_lines:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise ProtocolError(f"malformed header line: {line[:80]!r}")
            key = name.lower()
            if key in _FRAMING_HEADERS:  # the rest (Date, Server, CORS, ...) are never read
                value = value.strip()
                headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if 100 <= status < 200:  # an interim response (100 Continue): the real one follows
            return self._head() if self._buffer else False
        self._status = status
        connection = headers.get("connection", "").lower()
        tokens = {t.strip() for t in connection.split(",")} if connection else set()
        self._keep_alive = "keep-alive" in tokens if version == "HTTP/1.0" else "close" not in tokens
        self._encoding = headers.get("content-encoding", "").strip().lower()
        transfer = headers.get("transfer-encoding", "").lower()
        if self._no_body or status in (204, 304):
            self._framing = "length"
        elif transfer:
            if transfer.rsplit(",", 1)[-1].strip() != "chunked":
                raise ProtocolError(f"unsupported transfer-encoding: {transfer[:40]!r}")
            self._framing = "chunked"
        elif "content-length" in headers:
            lengths = {v.strip() for v in headers["content-length"].split(",")}
            length = lengths.pop() if len(lengths) == 1 else ""
            if not length.isdigit():
                raise ProtocolError(f"bad content-length: {headers['content-length'][:40]!r}")
            self._framing, self._length = "length", int(length)
        else:
            self._framing, self._keep_alive = "close", False
        return True

    def _take_length(self) -> None:
        need = self._length - len(self._body)
        if need > 0:
            self._body += self._buffer[:need]
            del self._buffer[:need]
        if len(self._body) == self._length:
            self._trailing_bytes()
            self._finish(keep_alive=self._keep_alive)

    def _take_chunks(self) -> None:
        buffer = self._buffer
        while True:
            if self._chunk_left == -1:  # chunk-size [; extensions] CRLF
                end = buffer.find(_CRLF)
                if end < 0:
                    if len(buffer) > 1024:
                        raise ProtocolError("chunk size line too long")
                    return
                size = bytes(buffer[:end]).split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size: {size[:20]!r}") from None
                if self._chunk_left < 0:
                    raise ProtocolError("negative chunk size")
                del buffer[: end + 2]
                if self._chunk_left == 0:
                    self._chunk_left = -2
            elif self._chunk_left == -2:  # trailer fields, then an empty line
                end = buffer.find(_CRLF)
                if end < 0:
                    if len(buffer) > MAX_HEAD_BYTES:
                        raise ProtocolError("chunked trailer too large")
                    return
                del buffer[: end + 2]
                if end == 0:
                    self._trailing_bytes()
                    self._finish(keep_alive=self._keep_alive)
                    return
            else:  # chunk data, then CRLF
                if len(buffer) < self._chunk_left + 2:
                    return
                if buffer[self._chunk_left : self._chunk_left + 2] != _CRLF:
                    raise ProtocolError("chunk data not followed by CRLF")
                self._body += buffer[: self._chunk_left]
                del buffer[: self._chunk_left + 2]
                self._chunk_left = -1

    def _trailing_bytes(self) -> None:
        if self._buffer:  # we never pipeline, so nothing may follow a response
            raise ProtocolError("bytes after the end of the response")

    def _finish(self, *, keep_alive: bool) -> None:
        self._done = Response(self._status, _decoded(bytes(self._body), self._encoding), keep_alive)


def _decoded(body: bytes, encoding: str) -> bytes:
    if not encoding or encoding == "identity" or not body:
        return body
    try:
        if encoding in ("gzip", "x-gzip"):
            return zlib.decompress(body, wbits=zlib.MAX_WBITS | 16)
        if encoding == "deflate":
            try:
                return zlib.decompress(body)
            except zlib.error:  # some servers send raw deflate without the zlib wrapper
                return zlib.decompress(body, wbits=-zlib.MAX_WBITS)
    except zlib.error as exc:
        raise ProtocolError(f"bad {encoding} body: {exc}") from None
    raise ProtocolError(f"unsupported content-encoding: {encoding[:40]!r}")

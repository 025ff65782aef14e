"""Wrappers of a `Transport`'s streams: the SDK's public seam between a session and its transport. Async; the I/O is
the wrapped stream's.

A wrapper sees every message on its way and hands on everything else (closing, entering, the stream's other
attributes) to the stream it wraps. Subclasses override `receive` (a read stream) or `send` (a write stream).
"""

from __future__ import annotations

from typing import Any, Self

import anyio

__all__ = ["ReadProxy", "StreamProxy"]


class StreamProxy:
    """Hands closing, the context manager and every other attribute on to `inner`."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        suppressed: bool | None = await self._inner.__aexit__(*exc)
        return suppressed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class ReadProxy(StreamProxy):
    """A read stream: iterating it is calling `receive` (override that) until the stream ends."""

    async def receive(self) -> Any:
        return await self._inner.receive()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

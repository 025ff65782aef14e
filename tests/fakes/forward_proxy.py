"""A forwarding HTTP proxy for tests, on 127.0.0.1: aiohttp's server takes requests in absolute form
(`POST http://host/path HTTP/1.1`, what a client sends to a proxy) and aiohttp's client forwards them.

I/O: serves in the test's event loop; forwards only to loopback. Plain http only (no CONNECT tunnels).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from aiohttp import web

_HOP_BY_HOP: Final = frozenset(
    {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
     "transfer-encoding", "upgrade", "host", "content-length", "content-encoding"}
)  # fmt: skip


@dataclass
class ForwardProxy:
    """What the proxy forwarded: (method, absolute URL) per request, in order."""

    url: str = ""
    forwarded: list[tuple[str, str]] = field(default_factory=list)
    credentials: list[str | None] = field(default_factory=list)
    """The Proxy-Authorization header of each forwarded request."""
    refused: list[str] = field(default_factory=list)
    """Requests not in absolute form (sent to the proxy as if it were the server), or not for loopback."""


@asynccontextmanager
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    proxy = ForwardProxy()
    # The proxy's own client must not go through a proxy (the test points HTTP_PROXY at this one).
    async with aiohttp.ClientSession(trust_env=False, timeout=aiohttp.ClientTimeout(total=None)) as client:

        async def forward(request: web.BaseRequest) -> web.StreamResponse:
            target = request.url
            if not request.raw_path.startswith("http://") or target.host != "127.0.0.1":
                proxy.refused.append(request.raw_path)
                return web.Response(status=400, text="not an absolute-form request for 127.0.0.1")
            proxy.forwarded.append((request.method, str(target)))
            proxy.credentials.append(request.headers.get("Proxy-Authorization"))
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
            async with client.request(
                request.method, target, headers=headers, data=await request.read(), allow_redirects=False
            ) as answer:
                body = await answer.read()
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
                return web.Response(status=answer.status, body=body, headers=kept)

        # A client that gives up on a request (PTB abandoning a long poll) ends its forwarded request too, as a
        # real proxy closes the upstream connection: the server sees its client go, not a reader still waiting.
        runner = web.ServerRunner(web.Server(forward, handler_cancellation=True))
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        proxy.url = f"http://127.0.0.1:{port}"
        try:
            yield proxy
        finally:
            await runner.cleanup()

"""OAuth Client ID Metadata Documents: a client whose `client_id` is an https URL names itself and its redirect
URIs in the JSON document at that URL; the gateway's authorization server fetches it. Does I/O (HTTP, the store).

The fetch is the server reaching out to an address a stranger chose, so it is bounded and fenced:

* only `https://` URLs with a host and a path, no credentials, query or fragment (`is_document_url`);
* the host must resolve only to public addresses (no loopback, private, link-local, CGNAT, multicast or reserved
  ones), and the connection goes to the address that was checked (`PublicOnly`: pinned, so a second DNS answer
  cannot swap in an inside address; TLS still checks the certificate against the host name);
* no redirects followed, `DOCUMENT_MAX` bytes at most, `DOCUMENT_TIMEOUT_S` for the whole fetch, no proxy from
  the environment;
* the document must name itself (`client_id` equal to its URL), list its redirect URIs, and ask for no client
  secret (a public client, `token_endpoint_auth_method` "none").

A document is kept in the store for `DOCUMENT_TTL_S` (every instance of a fleet shares it), then fetched again.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import ValidationError

from bot.store.grants import GrantStore

__all__ = [
    "DOCUMENT_MAX",
    "DOCUMENT_TIMEOUT_S",
    "DOCUMENT_TTL_S",
    "ClientDocuments",
    "PublicOnly",
    "is_document_url",
    "public_address",
]

logger = logging.getLogger(__name__)

DOCUMENT_MAX: Final = 64 << 10
"""Bytes of a client's metadata document (they are a few hundred)."""
DOCUMENT_TIMEOUT_S: Final = 5.0
"""The whole fetch of a document: connecting, TLS, and reading it."""
DOCUMENT_TTL_S: Final = 600.0
"""How long a fetched document is used before it is fetched again."""


def is_document_url(client_id: str) -> bool:
    """Whether a `client_id` names a metadata document the gateway will fetch."""
    try:
        parts = urlsplit(client_id)
        port = parts.port  # raises for a bad port
    except ValueError:
        return False
    return (
        parts.scheme == "https"
        and bool(parts.hostname)
        and parts.path not in ("", "/")
        and not parts.query
        and not parts.fragment
        and parts.username is None
        and parts.password is None
        and (port is None or 0 < port < 65536)
    )


def public_address(text: str) -> bool:
    """Whether an IP address is one the public internet routes (IPv4 mapped into IPv6 judged as IPv4)."""
    address = ipaddress.ip_address(text.split("%", 1)[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


class PublicOnly(httpx2.AsyncBaseTransport):
    """A transport that connects only to public addresses: the host is resolved here, every address it has must
    be public, and the request goes to the first of them (the name still in `Host` and in TLS's SNI and
    certificate check)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx2.AsyncHTTPTransport(trust_env=False)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        host = request.url.host
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        try:
            found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpx2.ConnectError(f"cannot resolve {host}", request=request) from exc
        addresses = [str(info[4][0]) for info in found]
        if not addresses or not all(public_address(address) for address in addresses):
            raise httpx2.ConnectError(f"{host} is not a public address: not fetched", request=request)
        pinned = httpx2.Request(
            request.method,
            request.url.copy_with(host=addresses[0]),
            headers=request.headers,  # `Host` stays the name
            extensions={**request.extensions, "sni_hostname": host},
        )
        return await self.inner.handle_async_request(pinned)

    async def aclose(self) -> None:
        await self.inner.aclose()


class ClientDocuments:
    """Clients named by their metadata documents, fetched through `transport` (default `PublicOnly`) and kept in
    the store for `DOCUMENT_TTL_S`."""

    def __init__(
        self,
        grants: GrantStore,
        transport: Callable[[], httpx2.AsyncBaseTransport] = PublicOnly,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`transport` makes the transport of one fetch (tests give one that serves a document in process)."""
        self.grants = grants
        self.transport = transport
        self.clock = clock

    async def client(self, url: str) -> OAuthClientInformationFull | None:
        """The client the document at `url` describes; None when it cannot be fetched or is not a valid
        document for a public client named `url`.

        Raises:
            StoreUnavailable: the database cannot be used.
        """
        if not is_document_url(url):
            return None
        kept = await self.grants.client(url)
        if kept is not None and self.clock() - kept[1] < DOCUMENT_TTL_S:
            return OAuthClientInformationFull.model_validate(kept[0])
        document = await self._fetch(url)
        info = None if document is None else _client(url, document)
        if info is not None:
            await self.grants.put_client(url, info.model_dump(mode="json", exclude_none=True))
        return info

    async def _fetch(self, url: str) -> Any:
        """The JSON at `url`, or None (why is logged: the host only, a client's URL may be anyone's)."""
        host = urlsplit(url).hostname
        body = bytearray()
        async with httpx2.AsyncClient(
            transport=self.transport(), follow_redirects=False, trust_env=False, timeout=DOCUMENT_TIMEOUT_S
        ) as http:
            with anyio.move_on_after(DOCUMENT_TIMEOUT_S) as scope:
                try:
                    async with http.stream("GET", url, headers={"Accept": "application/json"}) as response:
                        if response.status_code != 200:
                            logger.info("client metadata document at %s: HTTP %d", host, response.status_code)
                            return None
                        async for chunk in response.aiter_bytes():
                            body += chunk
                            if len(body) > DOCUMENT_MAX:
                                logger.info(
                                    "client metadata document at %s: over %d bytes", host, DOCUMENT_MAX
                                )
                                return None
                except httpx2.HTTPError as exc:
                    logger.info("client metadata document at %s not fetched: %s", host, exc)
                    return None
        if scope.cancelled_caught:
            logger.info("client metadata document at %s: not fetched within %s s", host, DOCUMENT_TIMEOUT_S)
            return None
        try:
            return json.loads(body)
        except ValueError:
            logger.info("client metadata document at %s is not JSON", host)
            return None


def _client(url: str, document: Any) -> OAuthClientInformationFull | None:
    """The client a fetched document describes, when it is one the gateway takes."""
    if not isinstance(document, dict) or document.get("client_id") != url:
        return None
    if (
        document.get("client_secret") is not None
        or document.get("token_endpoint_auth_method", "none") != "none"
    ):
        return None
    try:
        metadata = OAuthClientMetadata.model_validate(document)
    except ValidationError:
        return None
    if "authorization_code" not in metadata.grant_types:
        return None
    fields = metadata.model_dump(exclude_none=True)
    return OAuthClientInformationFull.model_validate(
        {**fields, "client_id": url, "token_endpoint_auth_method": "none"}
    )

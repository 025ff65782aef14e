"""Client ID metadata documents: which URLs are fetched at all, where the fetch may connect (public addresses
only: a stranger's `client_id` must not make the bot reach inside its network), and what a document must say."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.store.grants import GrantStore
from bot.web.client_documents import (
    DOCUMENT_MAX,
    ClientDocuments,
    PublicOnly,
    is_document_url,
    public_address,
)

pytestmark = pytest.mark.anyio

URL = "https://client.example/oauth/client.json"
GOOD: dict[str, Any] = {"client_id": URL, "client_name": "C", "redirect_uris": ["https://client.example/cb"]}


@pytest.mark.parametrize(
    ("client_id", "fetched"),
    [
        (URL, True),
        ("https://client.example:8443/c.json", True),
        ("http://client.example/c.json", False),
        ("https://client.example/", False),
        ("https://client.example", False),
        ("https://user:pw@client.example/c.json", False),
        ("https://client.example/c.json#x", False),
        ("https://client.example/c.json?next=1", False),
        ("0b1c3a9e-5a4f-4a57-9d1b-6f1c5d9e2f11", False),
    ],
)
def test_only_https_urls_with_a_path_name_a_document(client_id: str, fetched: bool) -> None:
    assert is_document_url(client_id) is fetched


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.215.14", True),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.9", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # a cloud's metadata service
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("::1", False),
        ("fd00::1", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),
        ("224.0.0.1", False),
    ],
)
def test_only_public_addresses_are_connected_to(address: str, public: bool) -> None:
    assert public_address(address) is public


async def test_a_document_on_a_host_that_resolves_inside_is_never_connected_to() -> None:
    """`localhost` resolves to loopback: the fetch is refused before a connection is made (a listener there sees
    nobody)."""
    connected = anyio.Event()

    async def handle(stream: Any) -> None:
        connected.set()
        await stream.aclose()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        async with httpx2.AsyncClient(transport=PublicOnly(), trust_env=False) as http:
            with pytest.raises(httpx2.ConnectError, match="not a public address"):
                await http.get(f"https://localhost:{port}/c.json")
        tg.cancel_scope.cancel()
    assert not connected.is_set()


def serving(body: bytes, status: int = 200, seen: list[str] | None = None) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen.append(str(request.url))
        return httpx2.Response(status, content=body, headers={"Location": "https://inside.example/c.json"})

    return httpx2.MockTransport(handler)


@pytest.mark.parametrize(
    ("body", "status", "taken"),
    [
        (GOOD, 200, True),
        ({**GOOD, "client_id": "https://other.example/c.json"}, 200, False),
        ({**GOOD, "token_endpoint_auth_method": "client_secret_post"}, 200, False),
        ({**GOOD, "client_secret": "s"}, 200, False),
        ({k: v for k, v in GOOD.items() if k != "redirect_uris"}, 200, False),
        (GOOD, 302, False),
        ({**GOOD, "client_name": "x" * DOCUMENT_MAX}, 200, False),
        ("not json", 200, False),
    ],
)
async def test_a_document_is_taken_only_when_it_names_itself_as_a_public_client(
    tmp_path: Path, body: Any, status: int, taken: bool
) -> None:
    """It must be its own `client_id`, ask for no secret, list redirect URIs, come with 200 (a redirect is not
    followed), fit `DOCUMENT_MAX`, and be JSON."""
    raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    seen: list[str] = []
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp_path / 'b.db'}"))) as store:
        documents = ClientDocuments(store.grants, lambda: serving(raw, status, seen))
        client = await documents.client(URL)
    assert (client is not None) is taken
    assert seen == [URL]
    if client is not None:
        assert client.client_id == URL and client.token_endpoint_auth_method == "none"


async def test_a_fetched_document_is_kept_for_a_while_then_fetched_again(tmp_path: Path) -> None:
    now = [1000.0]
    seen: list[str] = []
    async with open_store(StorageConfig(url=Secret(f"sqlite:///{tmp_path / 'b.db'}"))) as store:
        grants = GrantStore(store.engine, store.agents, None, clock=lambda: now[0])
        documents = ClientDocuments(
            grants, lambda: serving(json.dumps(GOOD).encode(), seen=seen), lambda: now[0]
        )
        assert await documents.client(URL) is not None
        assert await documents.client(URL) is not None
        assert len(seen) == 1
        now[0] += 601
        assert await documents.client(URL) is not None
        assert len(seen) == 2

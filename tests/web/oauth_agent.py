"""Shared by the gateway's OAuth tests: the browser and the hosted agent, reaching the bot's public URL on its local
port, and the person's taps on the fake phone between them."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from tests.fakes.telegram import FakeUser, Msg
from tests.telegram.harness import Chat
from tests.web.agents import PUBLIC_URL

REDIRECT = "http://127.0.0.1:33418/callback"
"""The hosted agent's redirect URI (nothing listens there: the browser's last step is read, not followed)."""
START = re.compile(r"https://t\.me/[^\"?]+\?start=([A-Za-z0-9_-]+)")
WAIT = re.compile(r'data-wait="([^"]+)"')
PUBLIC_HOST = urlsplit(PUBLIC_URL).hostname
_TLS = httpx2.create_ssl_context()
"""What httpx trusts by default, read once: each transport would read the bundle again (about 30 ms of CPU)."""


class ToLocal(httpx2.AsyncBaseTransport):
    """The public URL's requests, sent to the bot's local port (as the proxy in front of it would)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.inner = httpx2.AsyncHTTPTransport(trust_env=False, verify=_TLS)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host == PUBLIC_HOST:
            url = request.url.copy_with(scheme="http", host="127.0.0.1", port=self.port)
            request = httpx2.Request(
                request.method,
                url,
                headers=request.headers,
                stream=request.stream,
                extensions=request.extensions,
            )
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def http(port: int, **kwargs: Any) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=ToLocal(port), trust_env=False, timeout=30.0, **kwargs)


@dataclass(frozen=True, slots=True)
class Page:
    """The consent page as a browser got it."""

    html: str
    start: str
    """The `t.me/<bot>?start=` code of its button."""
    wait: str
    """The address its script polls."""


async def open_page(port: int, authorize_url: str) -> Page:
    """What a browser shows after following `authorize_url` (the SDK's redirect to the consent page)."""
    async with http(port, follow_redirects=True) as browser:
        response = await browser.get(authorize_url)
    assert response.status_code == 200, response.text
    start, wait = START.search(response.text), WAIT.search(response.text)
    assert start is not None and wait is not None, response.text
    return Page(response.text, start.group(1), wait.group(1))


async def card_for(s: Chat, person: FakeUser, page: Page) -> Msg:
    """`person` taps the page's button (Telegram sends `/start <code>`): the bot's answer in their chat."""
    await person.send(f"/start {page.start}")
    return await s.fake.next_message(person.id, timeout=15)


async def follow(port: int, page: Page) -> dict[str, Any]:
    """The page's script's next poll once the person's tap was answered (the bot writes the decision before it
    answers the tap): what it got (`redirect` when it goes on)."""
    async with http(port) as browser:
        answer: dict[str, Any] = (await browser.get(PUBLIC_URL + page.wait)).json()
    assert answer["status"] != "waiting", "the tap was answered, but the page still waits"
    return answer


def redirect_params(redirect: str) -> dict[str, str]:
    """The query of the client's redirect URI, as the client's callback reads it."""
    return {key: values[0] for key, values in parse_qs(urlsplit(redirect).query).items()}


@dataclass(slots=True)
class Memory:
    """The SDK's `TokenStorage`, in memory."""

    tokens: OAuthToken | None = None
    client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@asynccontextmanager
async def hosted_agent(
    s: Chat,
    port: int,
    person: FakeUser,
    *,
    name: str = "Hosted Agent",
    document_url: str | None = None,
    on_card: Callable[[Msg], None] = lambda _: None,
) -> AsyncIterator[tuple[OAuthClientProvider, Memory]]:
    """The SDK's `OAuthClientProvider` as a hosted agent whose person (`person`) allows it on the phone: the
    browser follows the authorize URL to the consent page, the person taps its button and Allow (`on_card` sees
    the card first), the page's poll goes on to the redirect, whose code and state the agent's callback gets."""
    authorize: list[str] = []

    async def redirect_handler(url: str) -> None:
        authorize.append(url)

    async def callback_handler() -> AuthorizationCodeResult:
        page = await open_page(port, authorize[-1])
        card = await card_for(s, person, page)
        on_card(card)
        await person.press(card, "Allow")
        answer = await follow(port, page)
        params = redirect_params(answer["redirect"])
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"), iss=params.get("iss"))

    memory = Memory()
    provider = OAuthClientProvider(
        server_url=PUBLIC_URL + "/mcp",
        client_metadata=OAuthClientMetadata(
            client_name=name,
            redirect_uris=[AnyUrl(REDIRECT)],
            grant_types=["authorization_code", "refresh_token"],
        ),
        storage=memory,
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=document_url,
    )
    yield provider, memory


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


async def register(port: int, name: str = "Hand Client") -> dict[str, Any]:
    """A client registered at `/register` (RFC 7591), public (no secret)."""
    body = {"client_name": name, "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"}
    async with http(port) as client:
        response = await client.post(PUBLIC_URL + "/register", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def authorize_url(client_id: str, challenge: str, state: str, **more: str) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": state,
        "resource": PUBLIC_URL + "/mcp",
        **more,
    }
    return f"{PUBLIC_URL}/authorize?{urlencode(query)}"


async def token(port: int, form: dict[str, str]) -> httpx2.Response:
    async with http(port) as client:
        return await client.post(PUBLIC_URL + "/token", data=form)


async def code_for(s: Chat, port: int, person: FakeUser, client_id: str, challenge: str, state: str) -> str:
    """By hand: authorize, the page, `person`'s Allow, the page's poll; the code its redirect carries."""
    page = await open_page(port, authorize_url(client_id, challenge, state))
    card = await card_for(s, person, page)
    await person.press(card, "Allow")
    answer = await follow(port, page)
    params = redirect_params(answer["redirect"])
    assert params["state"] == state
    return params["code"]

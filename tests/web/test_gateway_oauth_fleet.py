"""The gateway's OAuth in a fleet: every step of a sign-in on whichever instance it lands, two instances in one
test sharing one database (SQLite and a real PostgreSQL; two engines, nothing shared in memory). Each instance's
OAuth routes are their real Starlette routes (httpx's ASGI transport); the person's tap is the store's, as the
consent card's handler makes it (`claim` for the `/start`, `decide` for Allow)."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from starlette.applications import Starlette

from bot.config import Secret, StorageConfig
from bot.store import open_store
from bot.web.client_documents import ClientDocuments
from bot.web.gateway import AgentVerifier
from bot.web.gateway_oauth import GatewayAuthority, oauth_routes

pytestmark = pytest.mark.anyio

ISSUER = "https://bot.example.com"
RESOURCE = ISSUER + "/mcp"
REDIRECT = "http://127.0.0.1:33418/callback"
ALICE = 1001


@asynccontextmanager
async def instances(
    url: str,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient, list[AgentVerifier]]]:
    """Two instances' OAuth routes (and their gateways' verifiers), each on its own store over the database."""
    async with AsyncExitStack() as stack:
        clients, verifiers = [], []
        for _ in range(2):
            store = await stack.enter_async_context(open_store(StorageConfig(url=Secret(url))))
            authority = GatewayAuthority(store.grants, ClientDocuments(store.grants), ISSUER, RESOURCE)
            app = Starlette(routes=oauth_routes(authority, lambda: "tnxbot"))
            client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=ISSUER)
            clients.append(await stack.enter_async_context(client))
            verifiers.append(AgentVerifier(store.agents, RESOURCE, store.grants))
        yield clients[0], clients[1], verifiers


async def test_each_step_of_a_sign_in_may_land_on_another_instance(store_url: str) -> None:
    """Register on A, authorize on A, the page on B, the tap on A's store, the poll on B, the code at A's token
    endpoint, the refresh at B's, and B's gateway takes the access token."""
    async with instances(store_url) as (a, b, verifiers):
        registered = await a.post(
            "/register",
            json={"client_name": "Fleet", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        )
        client_id = registered.json()["client_id"]
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        query = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "st",
            "resource": RESOURCE,
        }
        authorize = await a.get("/authorize?" + urlencode(query))
        assert authorize.status_code == 302
        page_path = urlsplit(authorize.headers["location"]).path
        page = await b.get(page_path)
        start = re.search(r"\?start=([A-Za-z0-9_-]+)", page.text)
        wait = re.search(r'data-wait="([^"]+)"', page.text)
        assert start is not None and wait is not None
        assert (await b.get(wait.group(1))).json()["status"] == "waiting"

        async with open_store(StorageConfig(url=Secret(store_url))) as phone:  # where the tap was handled
            consent = await phone.grants.claim(start.group(1), ALICE)
            assert consent is not None
            assert await phone.grants.decide(consent.id, ALICE, True) is not None

        answer = (await b.get(wait.group(1))).json()
        params = {k: v[0] for k, v in parse_qs(urlsplit(answer["redirect"]).query).items()}
        assert params["state"] == "st"
        form = {
            "grant_type": "authorization_code",
            "code": params["code"],
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        }
        issued = (await a.post("/token", data=form)).json()
        refresh = {
            "grant_type": "refresh_token",
            "client_id": client_id,
            "refresh_token": issued["refresh_token"],
        }
        renewed = (await b.post("/token", data=refresh)).json()
        access = await verifiers[1].verify_token(renewed["access_token"])
        assert access is not None and access.subject == str(ALICE) and access.resource == RESOURCE
        assert await verifiers[0].verify_token(issued["access_token"]) is not None  # not yet expired

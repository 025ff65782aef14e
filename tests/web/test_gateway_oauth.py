"""OAuth on `/mcp` end to end: the real bot (PTB against the fake Bot API, SQLite, the gateway on a local port),
the SDK's own `OAuthClientProvider` as a hosted agent (discovery, registration or a client ID metadata document,
PKCE), the consent card tapped on the fake phone, and the consent page's poll going on to the agent's redirect."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client

from bot.config import Secret, StorageConfig
from bot.store import AuditEvent, open_store
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat
from tests.web.agents import PUBLIC_URL, gateway_scene
from tests.web.oauth_agent import (
    REDIRECT,
    ToLocal,
    authorize_url,
    card_for,
    code_for,
    follow,
    hosted_agent,
    open_page,
    pkce,
    redirect_params,
    register,
    token,
)

pytestmark = pytest.mark.anyio

DOCUMENT_URL = "https://client.example/oauth/client.json"


def serve_document(document: dict[str, Any], fetched: list[str]) -> httpx2.MockTransport:
    """The client's host on the internet: its metadata document at `DOCUMENT_URL` (each fetch noted)."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        fetched.append(str(request.url))
        if str(request.url) == DOCUMENT_URL:
            return httpx2.Response(200, json=document)
        return httpx2.Response(404)

    return httpx2.MockTransport(handler)


@asynccontextmanager
async def connected(port: int, provider: OAuthClientProvider) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(auth=provider, transport=ToLocal(port), trust_env=False, timeout=30.0) as http,
        Client(
            streamable_http_client(PUBLIC_URL + "/mcp", http_client=http), read_timeout_seconds=None
        ) as client,
    ):
        yield client


async def audit_events(url: str) -> list[tuple[str, int | None, dict[str, Any]]]:
    async with open_store(StorageConfig(url=Secret(url))) as store:
        rows = await store.audit.rows()
    return [(row.event, row.user_id, row.as_dict()["detail"]) for row in rows]


async def bearer_status(port: int, access: str) -> int:
    """The gateway's answer to an MCP request carrying `access`."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    headers = {"Authorization": f"Bearer {access}", "Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as http:
        response = await http.post(PUBLIC_URL + "/mcp", json=body, headers=headers)
    return response.status_code


async def test_a_hosted_agent_registers_its_person_allows_it_on_the_phone_and_it_calls_tools_as_them(
    tmp_path: Path,
) -> None:
    """The SDK's OAuth client finds the server's metadata from the 401, registers, and sends its person's browser
    to the consent page; the card names the client (its own words escaped); after Allow the page goes on to the
    redirect by itself; the agent lists and calls tools as the person; `/agents` lists the grant under the
    client's name with its use; consent and grant are audited."""
    cards: list[Msg] = []
    async with gateway_scene(tmp_path) as (s, port, url):
        async with (
            hosted_agent(s, port, s.alice, name="Hosted <b>Agent</b>", on_card=cards.append) as (
                provider,
                memory,
            ),
            connected(port, provider) as client,
        ):
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"notify_person", "demo__deploy"} <= names
            result = await client.call_tool("notify_person", {"message": "hello from the hosted agent"})
            assert not result.is_error
            await s.fake.next_message(ALICE_ID, containing="hello from the hosted agent", timeout=15)
        (card,) = (c.history[0] for c in cards)  # as shown, before Allow edited it
        assert "Hosted <b>Agent</b> wants to act as you (all your servers)" in card.text  # shown as text
        assert "&lt;b&gt;Agent&lt;/b&gt;" in card.html
        assert "registered itself" in card.text
        assert memory.tokens is not None and memory.tokens.refresh_token is not None
        listed = await card_for_agents(s)
        assert "Hosted-b-Agent-b" in listed.text and "last used" in listed.text and "1 call" in listed.text
        assert "Revoke Hosted-b-Agent-b" in listed.buttons
        events = await audit_events(url)
        consented = [e for e in events if e[0] == AuditEvent.OAUTH_CONSENTED]
        assert [(e[1], e[2]["client"]) for e in consented] == [(ALICE_ID, "Hosted <b>Agent</b>")]
        created = [e for e in events if e[0] == AuditEvent.AGENT_TOKEN_CREATED]
        assert [e[2]["oauth_client"] for e in created] == ["Hosted <b>Agent</b>"]
        assert memory.tokens.access_token not in json.dumps([e[2] for e in events])


async def card_for_agents(s: Chat) -> Msg:
    await s.alice.send("/agents")
    return await s.fake.next_message(ALICE_ID, timeout=15)


async def test_a_client_named_by_its_metadata_document_is_fetched_and_shown_as_identified_by_its_host(
    tmp_path: Path,
) -> None:
    """With a client ID metadata document (the server's metadata says it takes them), the agent registers
    nothing: the bot fetches the document at its `client_id`, the card names the client and the document's host,
    and the agent's tools work."""
    document = {
        "client_id": DOCUMENT_URL,
        "client_name": "Doc Client",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    fetched: list[str] = []
    cards: list[Msg] = []
    async with gateway_scene(tmp_path, documents=lambda: serve_document(document, fetched)) as (s, port, _):
        async with (
            hosted_agent(s, port, s.alice, document_url=DOCUMENT_URL, on_card=cards.append) as (
                provider,
                memory,
            ),
            connected(port, provider) as client,
        ):
            assert "demo__deploy" in {tool.name for tool in (await client.list_tools()).tools}
        assert fetched and set(fetched) == {DOCUMENT_URL}
        assert memory.client is not None and memory.client.client_id == DOCUMENT_URL
        (card,) = (c.history[0] for c in cards)
        assert "Doc Client wants to act as you" in card.text
        assert "identified by its document at client.example" in card.text


async def test_a_document_that_does_not_name_itself_is_refused(tmp_path: Path) -> None:
    """A document whose `client_id` is not its own URL (someone else's name on it) gives no client: the
    authorize request is refused before any page or card."""
    document = {
        "client_id": "https://other.example/c.json",
        "client_name": "Other",
        "redirect_uris": [REDIRECT],
    }
    fetched: list[str] = []
    async with gateway_scene(tmp_path, documents=lambda: serve_document(document, fetched)) as (_, port, _):
        _, challenge = pkce()
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as browser:
            response = await browser.get(authorize_url(DOCUMENT_URL, challenge, "st"))
        assert response.status_code == 400 and "not found" in response.text
        assert fetched == [DOCUMENT_URL]


async def test_refresh_rotates_the_tokens_and_a_rotated_refresh_token_presented_again_revokes_the_grant(
    tmp_path: Path,
) -> None:
    """Refresh gives new tokens (audited) and the old refresh token stops working; presented again (a copy is
    loose), it revokes the whole grant: the new access token is refused too."""
    async with gateway_scene(tmp_path) as (s, port, url):
        client = await register(port)
        verifier, challenge = pkce()
        code = await code_for(s, port, s.alice, client["client_id"], challenge, "st-1")
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT}
        first = (
            await token(port, {**form, "client_id": client["client_id"], "code_verifier": verifier})
        ).json()
        refresh = {"grant_type": "refresh_token", "client_id": client["client_id"]}
        second = await token(port, {**refresh, "refresh_token": first["refresh_token"]})
        assert second.status_code == 200, second.text
        renewed = second.json()
        assert renewed["access_token"] != first["access_token"]
        assert renewed["refresh_token"] != first["refresh_token"]
        assert await bearer_status(port, renewed["access_token"]) == 200
        again = await token(port, {**refresh, "refresh_token": first["refresh_token"]})
        assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
        assert await bearer_status(port, renewed["access_token"]) == 401
        events = [e[0] for e in await audit_events(url)]
        assert AuditEvent.OAUTH_REFRESHED in events
        assert events.count(AuditEvent.AGENT_TOKEN_REVOKED) == 1


async def test_revoke_in_agents_ends_the_grant_and_its_tokens_at_once(tmp_path: Path) -> None:
    """The grant's Revoke button in `/agents` (as for a pasted token): its access token is refused and its
    refresh token gives nothing."""
    async with gateway_scene(tmp_path) as (s, port, _):
        client = await register(port, "Revocable")
        verifier, challenge = pkce()
        code = await code_for(s, port, s.alice, client["client_id"], challenge, "st")
        issued = (
            await token(
                port,
                {
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": REDIRECT,
                    "client_id": client["client_id"],
                    "code_verifier": verifier,
                },
            )
        ).json()
        assert await bearer_status(port, issued["access_token"]) == 200
        listed = await card_for_agents(s)
        answer = await s.alice.press(listed, "Revoke Revocable")
        assert answer.text == "Revoked Revocable."
        assert await bearer_status(port, issued["access_token"]) == 401
        refreshed = await token(
            port,
            {
                "grant_type": "refresh_token",
                "client_id": client["client_id"],
                "refresh_token": issued["refresh_token"],
            },
        )
        assert refreshed.status_code == 400


async def test_the_client_revokes_its_own_grant_at_the_revocation_endpoint(tmp_path: Path) -> None:
    """RFC 7009: the client revokes its token; the grant goes (audited as the client's doing). (A public client
    sends an empty `client_secret`: the SDK's revocation handler requires the field.)"""
    async with gateway_scene(tmp_path) as (s, port, url):
        client = await register(port)
        verifier, challenge = pkce()
        code = await code_for(s, port, s.alice, client["client_id"], challenge, "st")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client["client_id"],
            "code_verifier": verifier,
        }
        issued = (await token(port, form)).json()
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as http:
            response = await http.post(
                PUBLIC_URL + "/revoke",
                data={"token": issued["access_token"], "client_id": client["client_id"], "client_secret": ""},
            )
        assert response.status_code == 200
        assert await bearer_status(port, issued["access_token"]) == 401
        revoked = [e for e in await audit_events(url) if e[0] == AuditEvent.AGENT_TOKEN_REVOKED]
        assert [e[2]["by"] for e in revoked] == ["client"]


async def test_a_wrong_pkce_verifier_or_redirect_uri_gets_no_token(tmp_path: Path) -> None:
    """PKCE: the code with another verifier is refused; the redirect URI must be the registered one, at
    `/authorize` (no page, no redirect to it) and at `/token`."""
    async with gateway_scene(tmp_path) as (s, port, _):
        client = await register(port)
        verifier, challenge = pkce()
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as browser:
            stray = authorize_url(
                client["client_id"], challenge, "st", redirect_uri="https://evil.example/cb"
            )
            response = await browser.get(stray)
        assert response.status_code == 400 and "evil.example" not in response.headers.get("location", "")
        code = await code_for(s, port, s.alice, client["client_id"], challenge, "st")
        base = {"grant_type": "authorization_code", "code": code, "client_id": client["client_id"]}
        wrong = await token(port, {**base, "redirect_uri": REDIRECT, "code_verifier": pkce()[0]})
        assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant"
        moved = await token(
            port, {**base, "redirect_uri": "http://127.0.0.1:1/cb", "code_verifier": verifier}
        )
        assert moved.status_code == 400
        right = await token(port, {**base, "redirect_uri": REDIRECT, "code_verifier": verifier})
        assert right.status_code == 200, right.text


async def test_a_code_is_given_once_and_a_code_presented_again_revokes_what_it_gave(tmp_path: Path) -> None:
    """The page's poll hands the code over once (polled again: nothing); the code exchanged twice: the second
    time is refused and the grant the first made is revoked (RFC 6749 §4.1.2)."""
    async with gateway_scene(tmp_path) as (s, port, _):
        client = await register(port)
        verifier, challenge = pkce()
        page = await open_page(port, authorize_url(client["client_id"], challenge, "st"))
        card = await card_for(s, s.alice, page)
        await s.alice.press(card, "Allow")
        answer = await follow(port, page)
        params = redirect_params(answer["redirect"])
        assert params["state"] == "st" and params["iss"] == PUBLIC_URL
        assert (await follow(port, page))["status"] == "ended"
        form = {
            "grant_type": "authorization_code",
            "code": params["code"],
            "redirect_uri": REDIRECT,
            "client_id": client["client_id"],
            "code_verifier": verifier,
        }
        issued = (await token(port, form)).json()
        replay = await token(port, form)
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        assert await bearer_status(port, issued["access_token"]) == 401


async def test_deny_sends_the_browser_back_with_access_denied(tmp_path: Path) -> None:
    async with gateway_scene(tmp_path) as (s, port, url):
        client = await register(port)
        _, challenge = pkce()
        page = await open_page(port, authorize_url(client["client_id"], challenge, "st"))
        card = await card_for(s, s.alice, page)
        await s.alice.press(card, "Deny")
        params = redirect_params((await follow(port, page))["redirect"])
        assert params == {
            "error": "access_denied",
            "error_description": "the person denied it",
            "state": "st",
        }
        assert AuditEvent.OAUTH_DENIED in [e[0] for e in await audit_events(url)]


async def test_a_forwarded_consent_link_asks_and_grants_for_whoever_taps_it_never_the_pages_opener(
    tmp_path: Path,
) -> None:
    """Alice's page's link, tapped by someone not configured, is refused and stays usable; tapped by Bob, the
    card is Bob's, only Bob's tap decides it (Alice's forged tap is refused), and the agent then acts as Bob;
    tapped again, the link finds nothing."""
    async with gateway_scene(tmp_path) as (s, port, _):
        client = await register(port)
        verifier, challenge = pkce()
        page = await open_page(port, authorize_url(client["client_id"], challenge, "st"))
        refused = await card_for(s, s.mallory, page)
        assert "this bot is private" in refused.text and not refused.buttons  # the access gate's refusal
        card = await card_for(s, s.bob, page)
        assert card.chat_id == BOB_ID and "Allow" in card.buttons
        mine = await card_for_agents(s)  # a message of Alice's own to send the forged tap from
        forged = await s.alice.press_data(mine, card.button("Allow").callback_data)
        assert "belongs to the person it was shown to" in (forged.text or "")
        await s.bob.press(card, "Allow")
        code = redirect_params((await follow(port, page))["redirect"])["code"]
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client["client_id"],
            "code_verifier": verifier,
        }
        issued = (await token(port, form)).json()
        async with (
            httpx2.AsyncClient(
                transport=ToLocal(port),
                headers={"Authorization": f"Bearer {issued['access_token']}"},
                trust_env=False,
                timeout=30.0,
            ) as http,
            Client(streamable_http_client(PUBLIC_URL + "/mcp", http_client=http)) as agent,
        ):
            await agent.call_tool("notify_person", {"message": "acting for Bob"})
        await s.fake.next_message(BOB_ID, containing="acting for Bob", timeout=15)
        again = await card_for(s, s.alice, page)
        assert "unknown, was already used, or has expired" in again.text


async def test_a_token_for_another_resource_is_refused(tmp_path: Path) -> None:
    """A request for another resource is refused at `/authorize` (`invalid_target`, back to the client); a token
    issued for another resource (as another server of the same issuer would hold) is refused at `/mcp`."""
    async with gateway_scene(tmp_path) as (s, port, url):
        client = await register(port)
        _, challenge = pkce()
        elsewhere = authorize_url(client["client_id"], challenge, "st", resource="https://other.example/mcp")
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as browser:
            response = await browser.get(elsewhere)
        assert response.status_code == 302
        assert redirect_params(response.headers["location"])["error"] == "invalid_target"
        code = await code_for(s, port, s.alice, client["client_id"], challenge, "st")
        async with open_store(StorageConfig(url=Secret(url))) as store:
            issued = await store.grants.exchange(code, "https://other.example/mcp")
        assert issued is not None
        assert await bearer_status(port, issued.access) == 401


async def test_the_metadata_names_the_gateway_and_its_authorization_server(tmp_path: Path) -> None:
    """RFC 9728 and RFC 8414 as clients discover them; a request without a token is told where to look."""
    async with gateway_scene(tmp_path) as (_, port, _):
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as http:
            resource = (await http.get(PUBLIC_URL + "/.well-known/oauth-protected-resource/mcp")).json()
            at_root = (await http.get(PUBLIC_URL + "/.well-known/oauth-protected-resource")).json()
            server = (await http.get(PUBLIC_URL + "/.well-known/oauth-authorization-server")).json()
            refused = await http.post(PUBLIC_URL + "/mcp", json={})
        assert resource["resource"] == PUBLIC_URL + "/mcp" and at_root == resource
        assert resource["authorization_servers"] == [PUBLIC_URL] and server["issuer"] == PUBLIC_URL
        assert server["client_id_metadata_document_supported"] is True
        assert server["code_challenge_methods_supported"] == ["S256"]
        assert {"authorization_code", "refresh_token"} <= set(server["grant_types_supported"])
        assert server["registration_endpoint"] == PUBLIC_URL + "/register"
        assert refused.status_code == 401
        assert "/.well-known/oauth-protected-resource/mcp" in refused.headers["www-authenticate"]


async def test_with_oauth_off_there_is_no_metadata_and_no_consent_link(tmp_path: Path) -> None:
    """`[gateway] oauth = false`: pasted tokens only; a 401 names no metadata, and `/start <anything>` is the
    help it always was."""
    async with gateway_scene(tmp_path, {"oauth": False}) as (s, port, _):
        async with httpx2.AsyncClient(transport=ToLocal(port), trust_env=False) as http:
            server = await http.get(PUBLIC_URL + "/.well-known/oauth-authorization-server")
            refused = await http.post(PUBLIC_URL + "/mcp", json={})
        assert server.status_code == 404
        assert refused.status_code == 401 and "resource_metadata" not in refused.headers["www-authenticate"]
        await s.alice.send("/start abcdef")
        shown = await s.fake.next_message(ALICE_ID, timeout=15)
        assert "/agents" in shown.text and "wants to act as you" not in shown.text

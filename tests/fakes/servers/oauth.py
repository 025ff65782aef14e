"""A protected MCP server on the SDK's own server-side auth, and a scripted browser that signs in to it.

The server is an `MCPServer` with an in-memory `OAuthAuthorizationServerProvider` (dynamic registration,
authorize with a consent page, code and refresh grants, revocation) over streamable HTTP on a loopback port;
its `whoami` tool reports the subject of the token it was called with. The browser (`sign_in`) is an httpx
client that opens the authorization URL, approves consent as a named person and follows the redirect back.

Variants for the client's side of OAuth: `preregister` a confidential client (the SDK's token endpoint then
takes its secret only the way it was registered, e.g. only HTTP Basic); `metadata` replaces keys of the
authorization server's metadata (`client_id_metadata_document_supported`, `token_endpoint_auth_methods_supported`),
and `oidc_only` serves it by OpenID Connect discovery alone;
with `documents_at`, an https client id is a Client ID Metadata Document, fetched from that local base (the
reverse proxy in front of the bot) when the client shows up.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    OAuthAuthorizationServerProvider,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import AnyHttpUrl, AnyUrl
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

SCOPE = "tools"
_TLS = httpx.create_ssl_context()
"""What httpx trusts by default, read once: each client would read the bundle again (about 30 ms of CPU)."""


@dataclass
class AuthServer(OAuthAuthorizationServerProvider[AuthorizationCode, RefreshToken, AccessToken]):
    """The provider's state, readable by tests: who signed in, which grants were used, what was revoked.

    Subclassing the SDK's provider Protocol gives it the SDK's default for the grants it leaves out (the
    identity-assertion grant: `unsupported_grant_type`)."""

    issuer: str
    access_ttl_s: int = 3600
    """Lifetime given to new access tokens (`expires_in`)."""
    clients: dict[str, OAuthClientInformationFull] = field(default_factory=dict)
    consents: dict[str, tuple[str, AuthorizationParams]] = field(default_factory=dict)
    codes: dict[str, AuthorizationCode] = field(default_factory=dict)
    access: dict[str, AccessToken] = field(default_factory=dict)
    refresh: dict[str, RefreshToken] = field(default_factory=dict)
    grants: Counter[str] = field(default_factory=Counter)
    """Token requests by grant type ("authorization_code", "refresh_token")."""
    subjects_seen: list[str] = field(default_factory=list)
    """The subject of every `whoami` call, in order."""
    revocations: int = 0
    issued: list[str] = field(default_factory=list)
    """Every access and refresh token handed out (tests grep logs and the database for them)."""
    metadata: dict[str, object] = field(default_factory=dict)
    """Keys replaced in the authorization server's metadata document."""
    oidc_only: bool = False
    """The metadata document is served only by OpenID Connect discovery (`/.well-known/openid-configuration`),
    not at RFC 8414's address."""
    documents_at: str | None = None
    """Where https client ids (Client ID Metadata Documents) are fetched from: `<this><path of the id>`."""
    documents: list[dict[str, object]] = field(default_factory=list)
    """Every client metadata document fetched."""
    registrations: int = 0
    """Dynamic registrations."""
    authorized_clients: list[str] = field(default_factory=list)
    """The client id of every authorization request that reached consent."""
    client_auth: list[tuple[str, str]] = field(default_factory=list)
    """(path, how the client authenticated: "basic", "post" or "none") of every /token and /revoke request."""
    on_refresh: Callable[[], Awaitable[None]] | None = None
    """Awaited when a refresh token (found valid) is about to be exchanged: a test holds a refresh in flight."""
    on_session_end: Callable[[], Awaitable[None]] | None = None
    """Awaited when a client ends its (2025-era) MCP session with a DELETE, before the server ends it: a test
    holds a session's close in flight."""

    # -- OAuthAuthorizationServerProvider ---------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id.startswith("https://") and self.documents_at is not None:
            return await self._document(client_id)
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.registrations += 1
        self.clients[client_info.client_id] = client_info

    async def _document(self, client_id: str) -> OAuthClientInformationFull | None:
        """A client id that is a URL: its document, fetched, and taken only when it names itself."""
        assert self.documents_at is not None
        async with httpx.AsyncClient(timeout=10, verify=_TLS) as http:
            response = await http.get(self.documents_at + urlsplit(client_id).path)
        if response.status_code != 200:
            return None
        document = response.json()
        self.documents.append(document)
        if document.get("client_id") != client_id or document.get("token_endpoint_auth_method") != "none":
            return None
        return OAuthClientInformationFull.model_validate({**document, "scope": SCOPE})

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        request = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.authorized_clients.append(client.client_id)
        self.consents[request] = (client.client_id, params)
        return f"{self.issuer}/consent?request={request}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        code = self.codes.get(authorization_code)
        return code if code is not None and code.client_id == client.client_id else None

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self.grants["authorization_code"] += 1
        return self._issue(
            authorization_code.client_id,
            authorization_code.scopes,
            authorization_code.resource,
            authorization_code.subject,
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.on_refresh is not None:
            await self.on_refresh()
        if self.refresh.pop(refresh_token.token, None) is None:  # rotated: a refresh token works once
            raise TokenError("invalid_grant", "the refresh token was already used")
        self.grants["refresh_token"] += 1
        return self._issue(
            refresh_token.client_id,
            scopes or refresh_token.scopes,
            refresh_token.resource,
            refresh_token.subject,
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.revocations += 1
        self.revoke_subject(token.subject)

    # -- what tests do ----------------------------------------------------------------------------------

    def preregister(self, client_id: str, secret: str | None, method: str, redirect_uri: str) -> None:
        """A client registered by hand; the token endpoint takes its secret only as `method` says."""
        self.clients[client_id] = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method=method,
            redirect_uris=[AnyUrl(redirect_uri)],
            grant_types=["authorization_code", "refresh_token"],
            scope=SCOPE,
        )

    def expire_access_tokens(self) -> None:
        """Every access token handed out stops working (as if its lifetime had passed)."""
        self.access.clear()

    def revoke_subject(self, subject: str | None) -> None:
        """Every token of `subject` stops working, refresh tokens too."""
        self.access = {k: v for k, v in self.access.items() if v.subject != subject}
        self.refresh = {k: v for k, v in self.refresh.items() if v.subject != subject}

    def consent(self, request: str, subject: str) -> str:
        """The person `subject` approves: the redirect back to the client, with code, state and iss."""
        client_id, params = self.consents.pop(request)
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [SCOPE],
            expires_at=time.time() + 300,
            client_id=client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
            subject=subject,
        )
        return construct_redirect_uri(
            str(params.redirect_uri), code=code, state=params.state, iss=self.issuer
        )

    def _issue(
        self, client_id: str, scopes: list[str], resource: str | None, subject: str | None
    ) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=int(time.time()) + self.access_ttl_s,
            resource=resource,
            subject=subject,
        )
        self.refresh[refresh] = RefreshToken(
            token=refresh, client_id=client_id, scopes=scopes, resource=resource, subject=subject
        )
        self.issued += [access, refresh]
        return OAuthToken(
            access_token=access, expires_in=self.access_ttl_s, refresh_token=refresh, scope=" ".join(scopes)
        )


def build(auth: AuthServer, port: int) -> MCPServer:
    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "protected",
        auth_server_provider=auth,
        auth=AuthSettings(
            # The str as pydantic validates it: an `AnyHttpUrl(base)` would gain a "/" and change the issuer.
            issuer_url=cast(AnyHttpUrl, base),
            resource_server_url=cast(AnyHttpUrl, f"{base}/mcp"),
            validate_token_resource=True,
            client_registration_options=ClientRegistrationOptions(enabled=True, valid_scopes=[SCOPE]),
            revocation_options=RevocationOptions(enabled=True),
            required_scopes=[SCOPE],
        ),
        log_level="WARNING",
    )

    @server.tool()
    async def whoami() -> str:
        """Who the server thinks is calling (the token's subject)."""
        token = get_access_token()
        subject = token.subject if token is not None and token.subject else "nobody"
        auth.subjects_seen.append(subject)
        return f"you are {subject}"

    @server.custom_route("/consent", methods=["GET", "POST"])  # type: ignore[untyped-decorator]  # the SDK leaves it unannotated
    async def consent(request: Request) -> Response:
        wanted = request.query_params.get("request", "")
        if wanted not in auth.consents:
            return HTMLResponse("unknown request", status_code=400)
        if request.method == "GET":
            return HTMLResponse(
                f'<form method="post"><input name="subject"><button>Approve</button></form>{wanted}'
            )
        form = await request.form()
        return RedirectResponse(auth.consent(wanted, str(form["subject"])), status_code=302)

    return server


@asynccontextmanager
async def serve_protected(access_ttl_s: int = 3600) -> AsyncIterator[tuple[AuthServer, str]]:
    """Run the protected server on a loopback port; yield its provider state and its /mcp URL."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        auth = AuthServer(issuer=f"http://127.0.0.1:{port}", access_ttl_s=access_ttl_s)
        app = _Metadata(build(auth, port).streamable_http_app(), auth)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                yield auth, f"http://127.0.0.1:{port}/mcp"
            finally:
                server.should_exit = True


class _Metadata:
    """ASGI: the authorization server's metadata document with the test's overrides applied (read at each
    request); notes how each token and revocation request authenticated its client; holds a session's DELETE
    on `on_session_end`."""

    def __init__(self, app: ASGIApp, auth: AuthServer) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "DELETE" and self.auth.on_session_end is not None:
            await self.auth.on_session_end()
        if scope["type"] == "http" and scope["path"] in ("/token", "/revoke"):
            await self.app(scope, await self._noted(scope, receive), send)
            return
        if scope["type"] == "http" and self.auth.oidc_only:
            if scope["path"].startswith("/.well-known/oauth-authorization-server"):
                await Response(status_code=404)(scope, receive, send)
                return
            if scope["path"] == "/.well-known/openid-configuration":
                scope = {**scope, "path": "/.well-known/oauth-authorization-server"}
        if scope["type"] != "http" or not scope["path"].startswith("/.well-known/oauth-authorization-server"):
            await self.app(scope, receive, send)
            return
        parts: list[Any] = []

        async def keep(message: Any) -> None:
            parts.append(message)

        await self.app(scope, receive, keep)
        start, body = parts[0], b"".join(p.get("body", b"") for p in parts[1:])
        if start["status"] == 200:
            body = json.dumps({**json.loads(body), **self.auth.metadata}).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _noted(self, scope: Scope, receive: Receive) -> Receive:
        """Read the request's body, note the client authentication; the app gets the body replayed."""
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        headers = dict(scope["headers"])
        how = "basic" if headers.get(b"authorization", b"").startswith(b"Basic ") else "none"
        if how == "none" and "client_secret" in parse_qs(body.decode()):
            how = "post"
        self.auth.client_auth.append((scope["path"], how))
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return replay


async def sign_in(authorization_url: str, subject: str) -> str:
    """The scripted browser: open the link, approve consent as `subject`; return where it is sent back to
    (the bot's redirect URI with code, state and iss), without opening that."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10, verify=_TLS) as browser:
        page = await browser.get(authorization_url)
        assert page.status_code == 302, page.text
        consent_url = page.headers["location"]
        form = await browser.get(consent_url)
        assert form.status_code == 200, form.text
        approved = await browser.post(consent_url, data={"subject": subject})
        assert approved.status_code == 302, approved.text
        return str(approved.headers["location"])


async def follow(callback_url: str, local_base: str) -> httpx.Response:
    """The browser opens the redirect; the public host is the reverse proxy in front of `local_base`."""
    parts = urlsplit(callback_url)
    async with httpx.AsyncClient(follow_redirects=False, timeout=10, verify=_TLS) as browser:
        return await browser.get(f"{local_base}{parts.path}?{parts.query}")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}

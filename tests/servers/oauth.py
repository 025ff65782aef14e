"""A protected MCP server on the SDK's own server-side auth, and a scripted browser that signs in to it.

The server is an `MCPServer` with an in-memory `OAuthAuthorizationServerProvider` (dynamic registration,
authorize with a consent page, code and refresh grants, revocation) over streamable HTTP on a loopback port;
its `whoami` tool reports the subject of the token it was called with. The browser (`sign_in`) is an httpx
client that opens the authorization URL, approves consent as a named person and follows the redirect back.
"""

from __future__ import annotations

import secrets
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

SCOPE = "tools"


@dataclass
class AuthServer:
    """The provider's state, readable by tests: who signed in, which grants were used, what was revoked."""

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

    # -- OAuthAuthorizationServerProvider ---------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        request = secrets.token_urlsafe(16)
        assert client.client_id is not None
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
        return self._issue(authorization_code.client_id, authorization_code.scopes,
                           authorization_code.resource, authorization_code.subject)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        token = self.refresh.get(refresh_token)
        return token if token is not None and token.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]  # rotated: a refresh token works once
        self.grants["refresh_token"] += 1
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes,
                           refresh_token.resource, refresh_token.subject)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.revocations += 1
        self.revoke_subject(token.subject)

    # -- what tests do ----------------------------------------------------------------------------------

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
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state, iss=self.issuer)

    def _issue(self, client_id: str, scopes: list[str], resource: str | None, subject: str | None) -> OAuthToken:
        access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access, client_id=client_id, scopes=scopes, expires_at=int(time.time()) + self.access_ttl_s,
            resource=resource, subject=subject,
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
            issuer_url=base,
            resource_server_url=f"{base}/mcp",
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

    @server.custom_route("/consent", methods=["GET", "POST"])
    async def consent(request: Request) -> Response:
        wanted = request.query_params.get("request", "")
        if wanted not in auth.consents:
            return HTMLResponse("unknown request", status_code=400)
        if request.method == "GET":
            return HTMLResponse(f'<form method="post"><input name="subject"><button>Approve</button></form>{wanted}')
        form = await request.form()
        return RedirectResponse(auth.consent(wanted, str(form["subject"])), status_code=302)

    return server


@asynccontextmanager
async def serve_protected(access_ttl_s: int = 3600) -> AsyncIterator[tuple[AuthServer, str]]:
    """Run the protected server on a loopback port; yield its provider state and its /mcp URL."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        auth = AuthServer(issuer=f"http://127.0.0.1:{port}", access_ttl_s=access_ttl_s)
        server = uvicorn.Server(uvicorn.Config(build(auth, port).streamable_http_app(), log_level="warning"))
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                yield auth, f"http://127.0.0.1:{port}/mcp"
            finally:
                server.should_exit = True


async def sign_in(authorization_url: str, subject: str) -> str:
    """The scripted browser: open the link, approve consent as `subject`; return where it is sent back to
    (the bot's redirect URI with code, state and iss), without opening that."""
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
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
    async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
        return await browser.get(f"{local_base}{parts.path}?{parts.query}")


def query_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}

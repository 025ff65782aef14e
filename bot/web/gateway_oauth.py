"""OAuth on `/mcp`: the gateway as the authorization server of its own tokens, for hosted agents (claude.ai,
ChatGPT) that take a server URL and sign in rather than paste a token. Does I/O (HTTP, the store).

The SDK's server side does the protocol (`mcp.server.auth`): protected-resource metadata (RFC 9728) for
`<public_url>/mcp`, authorization-server metadata (RFC 8414), `/authorize` (code, PKCE S256 only, redirect URIs
matched exactly), `/token` (the code with its verifier, and refresh), `/register` (RFC 7591) and `/revoke`
(RFC 7009). `GatewayAuthority` is its provider, over the store (`bot.store.grants`), so any instance of a fleet
serves any step. Clients register, or are named by an https `client_id` whose metadata document is fetched
(`bot.web.client_documents`; the metadata says `client_id_metadata_document_supported`).

The person consents on the phone. `/authorize` sends the browser to `/oauth/consent/<page secret>`: a page naming
the client, a short match code, and a button to `t.me/<bot>?start=<one-time code>`; whoever taps it (and may use
the bot) gets the card in their private chat, and the grant, when they allow it, is theirs
(`bot.telegram.handlers.consent`). The page polls `/oauth/consent/<page secret>/wait` and, once the card is
answered, goes on to the client's redirect URI by itself (with a code bound to that request, given once).

Tokens are bound to the resource (`<public_url>/mcp`: a request naming another is refused with `invalid_target`)
and to the grant's person; the gateway's verifier checks both on every request.

Where the SDK falls short: `create_auth_routes` builds metadata without client ID metadata documents, the `none`
auth method public clients use, or RFC 9207's `iss`, and (like `create_protected_resource_routes`) spells a
path-less issuer with a trailing "/" that clients compare as a string: both metadata routes are the SDK's handlers
over metadata built here. Its token endpoint ignores a `resource` sent to `/token` (the resource is fixed at
`/authorize`, and every token issued is for the gateway alone), and its revocation endpoint wants a
`client_secret` field even from a public client (an empty one does).
"""

from __future__ import annotations

import html
import logging
import secrets
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.server.auth.routes import (
    build_metadata,
    build_resource_metadata_url,
    cors_middleware,
    create_auth_routes,
)
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, OAuthToken, ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.errors import StoreUnavailable
from bot.store.grants import GrantStore, Issued, start_code
from bot.web.client_documents import ClientDocuments, is_document_url

__all__ = ["CONSENT_PATH", "ConsentPages", "GatewayAuthority", "client_name", "oauth_routes", "same_resource"]

logger = logging.getLogger(__name__)

CONSENT_PATH: Final = "/oauth/consent"
POLL_MS: Final = 1500
"""How often the consent page asks whether its person answered."""
_METADATA_PATH: Final = "/.well-known/oauth-authorization-server"
_RESOURCE_ROOT: Final = "/.well-known/oauth-protected-resource"


def same_resource(one: str, other: str) -> bool:
    """Two resource URLs name the same resource (a trailing slash and the host's case aside)."""
    a, b = urlsplit(one), urlsplit(other)
    return (a.scheme, a.netloc.lower(), a.path.rstrip("/")) == (
        b.scheme,
        b.netloc.lower(),
        b.path.rstrip("/"),
    )


def client_name(client: OAuthClientInformationFull) -> str:
    """What the page and the card call a client: its own name, else its redirect URI's host."""
    if client.client_name and client.client_name.strip():
        return " ".join(client.client_name.split())[:64]
    uris = client.redirect_uris or []
    return (urlsplit(str(uris[0])).hostname if uris else None) or "an unnamed client"


class _Access(AccessToken):
    grant_id: int


class _Refresh(RefreshToken):
    grant_id: int


class GatewayAuthority:
    """The SDK's `OAuthAuthorizationServerProvider` over the store: consent on the phone, grants as agent tokens."""

    def __init__(self, grants: GrantStore, documents: ClientDocuments, issuer: str, resource: str) -> None:
        """`issuer`: the public URL; `resource`: `<public_url>/mcp`, the only resource tokens are issued for."""
        self.grants = grants
        self.documents = documents
        self.issuer = issuer
        self.resource = resource

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if is_document_url(client_id):
            return await self.documents.client(client_id)
        kept = await self.grants.client(client_id)
        return None if kept is None else OAuthClientInformationFull.model_validate(kept[0])

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        if client_info.client_id is None or is_document_url(client_info.client_id):
            raise RegistrationError("invalid_client_metadata", "no client id")  # the SDK gives a uuid
        try:
            await self.grants.put_client(
                client_info.client_id, client_info.model_dump(mode="json", exclude_none=True)
            )
        except StoreUnavailable as exc:
            raise RegistrationError(
                "invalid_client_metadata", "the database is unavailable; try again"
            ) from exc

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        """The consent page's address (the request waits in the store for its person's tap).

        Raises:
            AuthorizeError: the request names another resource (`invalid_target`), or the store is unavailable.
        """
        if params.resource is not None and not same_resource(params.resource, self.resource):
            raise AuthorizeError("invalid_target", f"this server issues tokens only for {self.resource}")
        assert client.client_id is not None  # a stored client has one
        request = {
            "redirect_uri": str(params.redirect_uri),
            "explicit": params.redirect_uri_provided_explicitly,
            "state": params.state,
            "challenge": params.code_challenge,
            "scopes": params.scopes or [],
            "document": is_document_url(client.client_id),
        }
        try:
            opened = await self.grants.open(client.client_id, client_name(client), request)
        except StoreUnavailable as exc:
            raise AuthorizeError("temporarily_unavailable", "the database is unavailable") from exc
        return f"{self.issuer.rstrip('/')}{CONSENT_PATH}/{opened.page}"

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        consent = await self.grants.code(authorization_code)
        if consent is None or consent.client_id != client.client_id or consent.user_id is None:
            return None
        request = consent.request
        return AuthorizationCode(
            code=authorization_code,
            scopes=list(request["scopes"]),
            expires_at=consent.expires,
            client_id=consent.client_id,
            code_challenge=request["challenge"],
            redirect_uri=request["redirect_uri"],
            redirect_uri_provided_explicitly=request["explicit"],
            resource=self.resource,
            subject=str(consent.user_id),
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        issued = await self.grants.exchange(authorization_code.code, self.resource)
        if issued is None:
            raise TokenError("invalid_grant", "authorization code already used or expired")
        return _token(issued)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> _Refresh | None:
        found = await self.grants.token(refresh_token, "refresh")
        if found is None or found.client_id != client.client_id:
            return None
        return _Refresh(
            token=refresh_token,
            client_id=found.client_id,
            scopes=[],
            resource=found.resource,
            subject=str(found.grant.user_id),
            grant_id=found.grant.id,
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: _Refresh, scopes: list[str]
    ) -> OAuthToken:
        assert client.client_id is not None
        issued = await self.grants.rotate(refresh_token.token, client.client_id)
        if issued is None:
            raise TokenError("invalid_grant", "refresh token already used, or its grant revoked")
        return _token(issued)

    async def load_access_token(self, token: str) -> _Access | None:
        """For `/revoke` (the gateway's own verifier reads tokens itself: `bot.web.gateway.AgentVerifier`)."""
        found = await self.grants.token(token, "access")
        if found is None:
            return None
        return _Access(
            token=token,
            client_id=found.client_id,
            scopes=[],
            expires_at=None if found.expires is None else int(found.expires),
            resource=found.resource,
            subject=str(found.grant.user_id),
            grant_id=found.grant.id,
        )

    async def revoke_token(self, token: _Access | _Refresh) -> None:
        await self.grants.revoke(token.grant_id)

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        """Not offered (the metadata does not list the grant): a grant here is a person's tap, never an assertion."""
        raise TokenError("unsupported_grant_type", "this server issues tokens only on its person's consent")


def _token(issued: Issued) -> OAuthToken:
    return OAuthToken(
        access_token=issued.access,
        token_type="Bearer",
        expires_in=issued.expires_in,
        refresh_token=issued.refresh,
    )


# -- the consent page --------------------------------------------------------------------------------------

_PAGE: Final = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>Allow {name}?</title></head>
<body style="font-family: sans-serif; max-width: 30em; margin: 3em auto; padding: 0 1em" data-wait="{wait}">
<h1>{name} wants to act as you</h1>
<p><b>{name}</b> asks to call your tools through this bot. It will return to <b>{host}</b>.</p>
<p>Confirm in Telegram: the bot shows a card with the code <b>{match}</b>. Allow it only if it shows this code
and you started this yourself, just now.</p>
<p><a href="{link}" style="display: inline-block; padding: .7em 1.2em; background: #2aabee; color: #fff;
border-radius: .4em; text-decoration: none">Open Telegram to confirm</a></p>
<p id="status">Waiting for your answer in Telegram…</p>
<script nonce="{nonce}">
(function () {{
  var wait = document.body.dataset.wait, status = document.getElementById("status");
  function poll() {{
    fetch(wait, {{cache: "no-store"}}).then(function (r) {{ return r.json(); }}).then(function (j) {{
      if (j.redirect) {{ status.textContent = j.message; location.replace(j.redirect); return; }}
      if (j.status !== "waiting") {{ status.textContent = j.message; return; }}
      setTimeout(poll, {poll_ms});
    }}, function () {{ setTimeout(poll, {poll_ms}); }});
  }}
  poll();
}})();
</script></body></html>
"""
_GONE: Final = (
    "This sign-in request is unknown, was already answered, or has expired. Start again in your app."
)


def _page_headers(nonce: str = "") -> dict[str, str]:
    script = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": f"default-src 'none'; script-src {script}; connect-src 'self'; "
        "style-src 'unsafe-inline'; frame-ancestors 'none'",
    }


class ConsentPages:
    """`/oauth/consent/<page>` and its poll: what the browser sees between `/authorize` and the client's redirect."""

    def __init__(self, grants: GrantStore, issuer: str, bot_username: Callable[[], str]) -> None:
        """`issuer`: as the metadata spells it (the `iss` of the redirect, RFC 9207: compared as a string)."""
        self.grants = grants
        self.issuer = issuer
        self.bot_username = bot_username

    async def page(self, request: Request) -> Response:
        secret = request.path_params["page"]
        try:
            consent = await self.grants.by_page(secret)
        except StoreUnavailable:
            return HTMLResponse("The database is unavailable just now; reload in a moment.", 503)
        if consent is None or consent.state not in ("waiting", "shown", "allowed", "denied"):
            return HTMLResponse(_GONE, 404, headers=_page_headers())
        nonce = secrets.token_urlsafe(16)
        link = f"https://t.me/{self.bot_username()}?start={start_code(secret)}"
        text = _PAGE.format(
            name=html.escape(consent.client_name),
            host=html.escape(urlsplit(consent.request["redirect_uri"]).netloc),
            match=consent.match,
            link=html.escape(link),
            wait=html.escape(f"{CONSENT_PATH}/{secret}/wait"),
            nonce=nonce,
            poll_ms=POLL_MS,
        )
        return HTMLResponse(text, headers=_page_headers(nonce))

    async def wait(self, request: Request) -> Response:
        """`{"status": "waiting"}` until the card is answered; then, once, where the browser goes next."""
        secret = request.path_params["page"]
        headers = {"Cache-Control": "no-store"}
        try:
            finished = await self.grants.finish(secret)
            consent = None if finished is not None else await self.grants.by_page(secret)
        except StoreUnavailable:
            return JSONResponse({"status": "waiting"}, headers=headers)
        if finished is None:
            if (
                consent is not None
                and consent.state in ("waiting", "shown")
                and consent.expires > self.grants.clock()
            ):
                return JSONResponse({"status": "waiting"}, headers=headers)
            return JSONResponse({"status": "ended", "message": _GONE}, headers=headers)
        consent, code = finished
        uri, state = consent.request["redirect_uri"], consent.request["state"]
        if code is None:
            target = construct_redirect_uri(
                uri, error="access_denied", error_description="the person denied it", state=state
            )
            return JSONResponse(
                {"status": "done", "redirect": target, "message": "Denied. Returning to the app…"},
                headers=headers,
            )
        target = construct_redirect_uri(uri, code=code, state=state, iss=self.issuer)
        return JSONResponse(
            {"status": "done", "redirect": target, "message": "Allowed. Returning to the app…"},
            headers=headers,
        )


def oauth_routes(
    authority: GatewayAuthority,
    bot_username: Callable[[], str],
    *,
    resource_name: str = "toolnexus-bot gateway",
) -> list[BaseRoute]:
    """The metadata, the SDK's OAuth endpoints, and the consent page with its poll (its `t.me` button names the
    bot `bot_username` gives)."""
    issuer = AnyHttpUrl(authority.issuer)
    registration, revocation = ClientRegistrationOptions(enabled=True), RevocationOptions(enabled=True)
    sdk_metadata = build_metadata(issuer, None, registration, revocation)
    methods = [*(sdk_metadata.token_endpoint_auth_methods_supported or []), "none"]
    # From strings: the metadata's own model keeps an issuer without a path as it is (RFC 8414 compares issuers
    # as strings; `AnyHttpUrl` alone would add a "/" the client's issuer would not have).
    metadata = OAuthMetadata.model_validate(
        {
            **sdk_metadata.model_dump(mode="json", exclude_none=True),
            "issuer": authority.issuer,
            "client_id_metadata_document_supported": True,
            "authorization_response_iss_parameter_supported": True,
            "token_endpoint_auth_methods_supported": methods,
        }
    )
    resource = ProtectedResourceMetadata.model_validate(
        {
            "resource": authority.resource,
            "authorization_servers": [authority.issuer],
            "resource_name": resource_name,
        }
    )
    pages = ConsentPages(authority.grants, str(metadata.issuer), bot_username)
    sdk = [
        route
        for route in create_auth_routes(
            authority, issuer, client_registration_options=registration, revocation_options=revocation
        )
        if route.path != _METADATA_PATH
    ]
    return [
        Route(
            _METADATA_PATH,
            endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
        *sdk,
        *(
            # RFC 9728's address for `/mcp`, and the host's root one, which some clients (the MCP Inspector) ask
            # first: the gateway is the host's only protected resource.
            Route(
                path,
                endpoint=cors_middleware(
                    ProtectedResourceMetadataHandler(resource).handle, ["GET", "OPTIONS"]
                ),
                methods=["GET", "OPTIONS"],
            )
            for path in dict.fromkeys(
                [
                    urlsplit(str(build_resource_metadata_url(AnyHttpUrl(authority.resource)))).path,
                    _RESOURCE_ROOT,
                ]
            )
        ),
        Route(CONSENT_PATH + "/{page}", endpoint=pages.page, methods=["GET"]),
        Route(CONSENT_PATH + "/{page}/wait", endpoint=pages.wait, methods=["GET"]),
    ]

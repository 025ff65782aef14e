"""Where the bot meets the SDK's OAuth client (`mcp.client.auth`) and the authorization server's HTTP. Async,
does I/O.

The provider is the SDK's `OAuthClientProvider`, built through its constructor and driven through its public
`httpx2.Auth` flow; the token storage it is given is `bot.servers.oauth.storage`. Metadata is discovered with
the SDK's public helpers (`mcp.client.auth.utils`), never from hand-built well-known URLs. What the bot still
reads of a provider (the metadata and issuer it discovered) and the one thing it sets (`refresh_first`) are in
this module only, each saying why the public API does not do it.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeAlias
from urllib.parse import parse_qs, quote

import httpx2
from mcp.client.auth import OAuthClientProvider, TokenStorage
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    handle_auth_metadata_response,
    handle_protected_resource_response,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
)
from pydantic import AnyUrl

from bot.servers.oauth.naming import CLIENT_NAME, GRANT_TYPES

__all__ = [
    "HTTP_TIMEOUT",
    "discover_metadata",
    "form_of",
    "held_issuer",
    "held_metadata",
    "new_provider",
    "refresh_first",
    "refusal",
    "revoke",
]

logger = logging.getLogger(__name__)

HTTP_TIMEOUT: Final = httpx2.Timeout(30.0)

RedirectHandler: TypeAlias = Callable[[str], Awaitable[None]]
"""Given the authorization URL (the provider's `redirect_handler`)."""
CallbackHandler: TypeAlias = Callable[[], Awaitable[AuthorizationCodeResult]]
"""Returns the browser's answer (the provider's `callback_handler`)."""


def new_provider(
    server_url: str,
    redirect_uri: str,
    scopes: tuple[str, ...] | list[str],
    storage: TokenStorage,
    redirect: RedirectHandler,
    callback: CallbackHandler,
    client_metadata_url: str | None,
) -> OAuthClientProvider:
    """One person's provider for one server (the SDK keeps one storage per provider, and no key in it)."""
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(redirect_uri)],
        client_name=CLIENT_NAME,
        grant_types=list(GRANT_TYPES),
        response_types=["code"],
        scope=" ".join(scopes) or None,
    )
    return OAuthClientProvider(
        server_url=server_url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=client_metadata_url,
    )


def held_metadata(provider: OAuthClientProvider) -> OAuthMetadata | None:
    """The authorization server's metadata the provider discovered (and checked: issuer, SEP-2468), if any.

    Why not the library: the provider offers no accessor; its public `context` attribute is the only way to the
    metadata it validated. Read only; discovering it again (`discover_metadata`) would cost requests on every
    callback and could disagree with what the provider is about to use."""
    return provider.context.oauth_metadata


def held_issuer(provider: OAuthClientProvider) -> str | None:
    """The issuer the provider signs in with: its metadata's, else the one its client registration is bound to."""
    metadata = held_metadata(provider)
    if metadata is not None:
        return str(metadata.issuer)
    client = provider.context.client_info
    return None if client is None else client.issuer


def refresh_first(provider: OAuthClientProvider) -> None:
    """The token the provider holds is due: it refreshes it before sending the next request.

    Why not the library: the SDK has one expiry, computed from `expires_in` when a token arrives, and no public
    way to say "refresh now" (nor a margin before the expiry). A token loaded from storage is withheld instead
    (`storage.AccountStorage.get_tokens`, public), but a provider holding a token has only this: a new provider
    would forget the metadata it discovered and refresh at the resource's origin + `/token` (wrong for any
    authorization server of its own). So the provider's expiry is set to the past (0 would read "never")."""
    provider.context.token_expiry_time = 1.0


async def discover_metadata(
    http: httpx2.AsyncClient, server_url: str, issuer: str | None = None
) -> OAuthMetadata | None:
    """The authorization server's metadata (RFC 8414, or OIDC discovery), found the SDK's way: at `issuer` when
    known, else through the resource's protected resource metadata (RFC 9728), else at the resource's origin.
    None when none is found or a server fails."""
    auth_server = issuer
    try:
        if auth_server is None:
            for url in build_protected_resource_metadata_discovery_urls(None, server_url):
                prm = await handle_protected_resource_response(
                    await http.send(create_oauth_metadata_request(url))
                )
                if prm is not None and prm.authorization_servers:
                    auth_server = str(prm.authorization_servers[0])
                    break
        for url in build_oauth_authorization_server_metadata_discovery_urls(auth_server, server_url):
            ok, metadata = await handle_auth_metadata_response(
                await http.send(create_oauth_metadata_request(url))
            )
            if not ok:
                return None
            if metadata is not None:
                return metadata
    except httpx2.HTTPError as exc:
        logger.warning(
            "could not discover the authorization server of %s: %s", server_url, type(exc).__name__
        )
    return None


async def revoke(
    server_url: str,
    client: OAuthClientInformationFull,
    metadata: OAuthMetadata | None,
    issuer: str | None,
    token: str,
    hint: str,
) -> bool:
    """RFC 7009 revocation of `token`, where the server's metadata (held, else discovered) offers it.

    Why not the library: the SDK's client has no revocation; the request follows its client authentication."""
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as http:
        if metadata is None:
            metadata = await discover_metadata(http, server_url, issuer)
        if metadata is None or metadata.revocation_endpoint is None:
            return False
        data = {"token": token, "client_id": client.client_id, "token_type_hint": hint}
        headers: dict[str, str] = {}
        if client.client_secret and client.token_endpoint_auth_method == "client_secret_basic":
            headers["Authorization"] = _basic(client.client_id, client.client_secret)
        elif client.client_secret:
            data["client_secret"] = client.client_secret
        try:
            response = await http.post(str(metadata.revocation_endpoint), data=data, headers=headers)
        except httpx2.HTTPError as exc:
            logger.warning("could not revoke a token at %s: %s", server_url, type(exc).__name__)
            return False
    return response.status_code == 200


def refusal(response: httpx2.Response) -> str:
    """The token endpoint's `error` code (printable, short), or its status."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, str) and error.isprintable() and 0 < len(error) <= 60:
        return f"{response.status_code} {error}"
    return str(response.status_code)


def form_of(request: httpx2.Request) -> dict[str, str]:
    """A form-encoded request's fields (a token request's `grant_type`), else nothing."""
    if request.headers.get("content-type", "").split(";")[0] != "application/x-www-form-urlencoded":
        return {}
    return {k: v[0] for k, v in parse_qs(request.content.decode("utf-8", "replace")).items()}


def _basic(client_id: str, secret: str) -> str:
    """RFC 6749 §2.3.1: both form-urlencoded, then joined and base64'd (as the SDK does at the token endpoint)."""
    pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()

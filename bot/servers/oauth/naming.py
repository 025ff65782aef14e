"""How the bot names itself to an authorization server: its redirect URI, its own client id document, a
pre-registered client as the SDK holds it. Pure (reads the config); no I/O.

In the order the MCP spec recommends: the pre-registered `client_id` (with its secret sent the way the server's
metadata asks, or as `token_endpoint_auth_method` says), else a Client ID Metadata Document where the server
accepts them (`client_metadata_url`, or the bot's own at `<public_url>/oauth/client-metadata.json` when the
public URL is https), else dynamic registration (the SDK's).
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata
from pydantic import AnyUrl, ValidationError

from bot.config import Config, OAuthClient, TokenEndpointAuth

__all__ = [
    "CALLBACK_PATH",
    "CLIENT_METADATA_PATH",
    "CLIENT_NAME",
    "GRANT_TYPES",
    "LOOPBACK_PORT",
    "client_info_of",
    "client_metadata_document",
    "client_metadata_url_of",
    "loopback_redirect_uri",
    "preregistered_client",
    "redirect_uri_of",
    "token_endpoint_auth_method",
]

CALLBACK_PATH: Final = "/oauth/callback"
CLIENT_METADATA_PATH: Final = "/oauth/client-metadata.json"
"""Where the bot serves its own Client ID Metadata Document (its URL is the client id)."""
CLIENT_NAME: Final = "toolnexus-bot"
GRANT_TYPES: Final = ("authorization_code", "refresh_token")
LOOPBACK_PORT: Final = 8080
"""The loopback redirect's port when there is no `[web]` table (the web endpoint's default port)."""


def client_metadata_url_of(config: Config) -> str | None:
    """`<public_url>/oauth/client-metadata.json`, the bot's own client id, when the public URL is https."""
    web = config.web
    if web is None or web.public_url is None or urlsplit(web.public_url).scheme != "https":
        return None
    return web.public_url.rstrip("/") + CLIENT_METADATA_PATH


def client_metadata_document(config: Config) -> dict[str, object] | None:
    """The bot's Client ID Metadata Document (served at its own URL), or None without an https public URL."""
    url = client_metadata_url_of(config)
    if url is None:
        return None
    return {
        "client_id": url,
        "client_name": CLIENT_NAME,
        "redirect_uris": [redirect_uri_of(config)],
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "application_type": "web",
    }


def redirect_uri_of(config: Config) -> str:
    """`<public_url>/oauth/callback`, or the loopback address on the web endpoint's port (native-app style)."""
    web = config.web
    if web is not None and web.public_url is not None:
        return web.public_url.rstrip("/") + CALLBACK_PATH
    return loopback_redirect_uri(config)


def loopback_redirect_uri(config: Config) -> str:
    """`http://127.0.0.1:<[web] port, or 8080>/oauth/callback` (the console's, and the bot's without a public URL)."""
    port = config.web.port if config.web is not None else LOOPBACK_PORT
    return f"http://127.0.0.1:{port}{CALLBACK_PATH}"


def token_endpoint_auth_method(oauth: OAuthClient, metadata: OAuthMetadata | None) -> str:
    """How a pre-registered client authenticates: as configured, else the best the server offers (Basic first,
    as RFC 6749 §2.3.1 asks; Basic when the metadata does not say, its RFC 8414 default)."""
    if oauth.token_endpoint_auth_method is not None:
        return oauth.token_endpoint_auth_method.value
    if oauth.client_secret is None:
        return TokenEndpointAuth.NONE.value
    offered = None if metadata is None else metadata.token_endpoint_auth_methods_supported
    for method in TokenEndpointAuth:
        if offered is None or method.value in offered:
            return method.value
    return TokenEndpointAuth.CLIENT_SECRET_BASIC.value


def preregistered_client(
    oauth: OAuthClient,
    redirect_uri: str,
    metadata: OAuthMetadata | None,
    stored: OAuthClientInformationFull | None,
) -> OAuthClientInformationFull:
    """The configured client as the SDK holds it; without the server's metadata, its method is the one chosen
    at the last sign-in (kept in the store), so a refresh after a restart authenticates the same way."""
    assert oauth.client_id is not None
    method = token_endpoint_auth_method(oauth, metadata)
    same = stored is not None and stored.client_id == oauth.client_id
    if metadata is None and oauth.token_endpoint_auth_method is None and same and stored is not None:
        method = stored.token_endpoint_auth_method or method
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=None if oauth.client_secret is None else oauth.client_secret.get(),
        redirect_uris=[AnyUrl(redirect_uri)],
        token_endpoint_auth_method=method,
        grant_types=list(GRANT_TYPES),
        response_types=["code"],
    )


def client_info_of(text: str | None) -> OAuthClientInformationFull | None:
    """A kept client registration (JSON), or None when there is none or it does not parse."""
    if text is None:
        return None
    try:
        return OAuthClientInformationFull.model_validate_json(text)
    except ValidationError:
        return None

"""`[servers.<name>]`: an MCP server, started as a subprocess or reached over streamable HTTP, and its OAuth
client (the server table's `auth = "oauth"` and client keys, which the model holds as `ServerConfig.oauth`).
No I/O.
"""

from __future__ import annotations

import enum
import re
import sys
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Annotated, Any, Final, cast
from urllib.parse import urlsplit

from pydantic import Field

from bot.config import read
from bot.config._table import (
    EXPAND,
    MASK,
    Boolean,
    Context,
    Found,
    OptionalText,
    Positive,
    Secret,
    Strings,
    Table,
    as_secret,
    checked,
    optional,
)

SERVER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""What a `[servers.<name>]` name must fullmatch (it appears in commands and callback data)."""


class ServerProtocol(enum.StrEnum):
    """Which MCP revision to speak; the values are the `mcp` SDK's `Client(mode=...)`.

    Not named `Protocol`, so that it never shadows `typing.Protocol` in a module importing both.
    """

    AUTO = "auto"
    """Probe for 2026-07-28, fall back to the 2025 handshake."""
    LEGACY = "legacy"
    """The `initialize` handshake (2025-06-18 / 2025-11-25)."""
    V2026_07_28 = "2026-07-28"
    """Skip the probe."""


class ServerAuth(enum.StrEnum):
    """How the bot authenticates to a `url` server."""

    NONE = "none"
    """No sign-in (static `headers` may still carry a key)."""
    OAUTH = "oauth"
    """MCP authorization: each person signs in with OAuth from the chat (README, "Signing in to remote servers")."""


class TokenEndpointAuth(enum.StrEnum):
    """How a pre-registered OAuth client proves itself at the token endpoint (RFC 8414 names)."""

    CLIENT_SECRET_BASIC = "client_secret_basic"
    """The id and secret in an HTTP Basic `Authorization` header (RFC 6749 §2.3.1)."""
    CLIENT_SECRET_POST = "client_secret_post"
    """The id and secret in the form body."""
    NONE = "none"
    """A public client: the id only, no secret."""


class Transport(enum.StrEnum):
    """How a server is reached."""

    STDIO = "stdio"
    HTTP = "http"


def _metadata_url(value: object) -> str:
    url = read.http_url(value)
    if urlsplit(url).scheme != "https" or urlsplit(url).path in ("", "/"):
        raise read.Invalid("must be an https:// URL with a path")
    return url


def _env(value: object) -> Mapping[str, str]:
    return MappingProxyType(read.str_table(value))


def _headers(value: object) -> Mapping[str, Secret]:
    if isinstance(value, Mapping):
        given = cast("Mapping[object, object]", value)
        value = {name: item.get() if isinstance(item, Secret) else item for name, item in given.items()}
    return MappingProxyType({name: Secret(item) for name, item in read.str_table(value).items()})


def _no_env() -> Mapping[str, str]:
    return MappingProxyType({})


def _no_headers() -> Mapping[str, Secret]:
    return MappingProxyType({})


class OAuthClient(Table):
    """How the bot presents itself to an OAuth server; all optional (dynamic registration without them).

    In the file these are keys of the server's table, beside `auth = "oauth"`.
    """

    client_id: OptionalText = None
    """A pre-registered client id."""
    client_secret: Annotated[Secret | None, checked(optional(as_secret(read.text))), EXPAND] = None
    """Its secret, for a confidential pre-registered client."""
    client_metadata_url: Annotated[str | None, checked(optional(_metadata_url)), EXPAND] = None
    """An https URL of a client ID metadata document (used as the client id where the server accepts it)."""
    scopes: Strings = ()
    """Scopes to ask for (default: what the server advertises)."""
    token_endpoint_auth_method: Annotated[
        TokenEndpointAuth | None, checked(optional(read.one_of(TokenEndpointAuth))), EXPAND
    ] = None
    """How the pre-registered client authenticates at the token endpoint (default: the best the
    authorization server's metadata offers)."""

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        found: Found = []
        if v.client_secret is not None and v.client_id is None:
            found.append((("client_secret",), "needs client_id"))
        method = v.token_endpoint_auth_method
        if method is not None and v.client_id is None:
            found.append(
                (
                    ("token_endpoint_auth_method",),
                    "needs client_id (it says how a pre-registered client authenticates)",
                )
            )
        elif method is not None and (method is TokenEndpointAuth.NONE) != (v.client_secret is None):
            wanted = (
                "sends no secret: remove client_secret"
                if v.client_secret is not None
                else "needs client_secret"
            )
            found.append((("token_endpoint_auth_method",), f"{method.value} {wanted}"))
        return found


_OAUTH_KEYS: Final = tuple(OAuthClient.model_fields)


class ServerConfig(Table):
    """`[servers.<name>]`: an MCP server, started as a subprocess (`command`) or reached over HTTP (`url`)."""

    _hidden = frozenset({"name", "oauth"})
    name: Annotated[
        str,
        checked(
            read.matching(SERVER_NAME, "a server name must be 1-32 characters of A-Z, a-z, 0-9, _ and -")
        ),
    ]
    """The table name: 1-32 of A-Z a-z 0-9 _ -."""
    command: OptionalText = None
    """Program to run (stdio). In a file, exactly `"python"` means `sys.executable`."""
    args: Strings = ()
    """Its arguments."""
    env: Annotated[Mapping[str, str], checked(_env), EXPAND] = Field(default_factory=_no_env)
    """Extra environment variables for it (added to the bot's own)."""
    cwd: OptionalText = None
    """Its working directory (default: the bot's)."""
    url: Annotated[str | None, checked(optional(read.http_url)), EXPAND] = None
    """Streamable HTTP endpoint."""
    headers: Annotated[Mapping[str, Secret], checked(_headers), EXPAND] = Field(default_factory=_no_headers)
    """HTTP headers sent with every request; values are `Secret`s (bearer tokens), see `reveal_headers`."""
    protocol: Annotated[ServerProtocol, checked(read.one_of(ServerProtocol)), EXPAND] = ServerProtocol.AUTO
    """Which MCP revision to speak."""
    shared: Boolean = False
    """One session for everyone instead of one per (chat, user)."""
    call_timeout_s: Positive = 300.0
    """Bounds a tool call's own rounds; time a person spends answering a prompt never counts."""
    title: OptionalText = None
    """Display name (surfaces fall back to `name`)."""
    oauth: OAuthClient | None = None
    """Set when `auth = "oauth"` (the file's `auth` and client keys): each person signs in (a `url` server,
    never `shared`)."""

    @classmethod
    def toml_keys(cls) -> tuple[str, ...]:
        return (*super().toml_keys(), "auth", *_OAUTH_KEYS)

    @property
    def transport(self) -> Transport:
        return Transport.STDIO if self.command is not None else Transport.HTTP

    @property
    def auth(self) -> ServerAuth:
        return ServerAuth.NONE if self.oauth is None else ServerAuth.OAUTH

    def reveal_headers(self) -> dict[str, str]:
        """The headers with their real values, for the HTTP client only."""
        return {name: value.get() for name, value in self.headers.items()}

    def __repr_args__(self) -> Iterable[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            # API keys and bearer tokens live in env and headers.
            yield name, {key: MASK for key in value} if name in ("env", "headers") else value

    @classmethod
    def _prepare(cls, data: dict[str, Any], context: Context) -> Found:
        """The file's `auth` and client keys become `oauth`; `command = "python"` this interpreter."""
        found: Found = []
        if data.get("command") == "python":
            # In a venv, "python" on PATH may be another interpreter; the bundled demo server needs ours.
            data["command"] = sys.executable or "python"
        auth = ServerAuth.NONE
        if data.get("auth") is not None:
            try:
                auth = read.one_of(ServerAuth)(read.expand_all(data["auth"], context["environ"]))
            except read.Invalid as exc:
                found.append((("auth",), exc.reason))
        data.pop("auth", None)
        client = {key: data.pop(key) for key in _OAUTH_KEYS if key in data}
        if auth is ServerAuth.OAUTH:
            data["oauth"] = client
        else:
            found += [((key,), 'only with auth = "oauth"') for key in client]
        return found

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        found: Found = []
        command, url = data.get("command") is not None, data.get("url") is not None
        if command and url:
            found.append(((), "give either command or url, not both"))
        elif url:
            found += [
                ((other,), "only for a server started with command")
                for other in ("args", "env", "cwd")
                if other in data
            ]
        elif "headers" in data:
            found.append((("headers",), "only for a server reached by url"))
        elif not command:
            found.append(((), "give either command (a program to run) or url (a streamable HTTP endpoint)"))
        if data.get("oauth") is not None:
            if command:
                found.append((("auth",), "OAuth sign-in is for a server reached by url"))
            if v.shared:
                found.append(
                    (
                        ("auth",),
                        'a shared session cannot hold several people\'s tokens: shared = true and auth = "oauth" '
                        "do not go together",
                    )
                )
        return found


def server_of(server: object) -> tuple[object, bool]:
    """(name, uses OAuth) of a server as given: a model or a (prepared) table."""
    if isinstance(server, ServerConfig):
        return server.name, server.oauth is not None
    if isinstance(server, Mapping):
        table = cast("Mapping[str, Any]", server)
        return table.get("name"), table.get("auth") == "oauth" or table.get("oauth") is not None
    return None, False

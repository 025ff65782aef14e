"""Tests for the OAuth keys of bot/config/ and `toolnexus-bot keygen`."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from bot.config import ConfigError, ServerAuth, TokenEndpointAuth, parse_config
from bot.store.crypto import Sealer, Unreadable, new_key

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
OAUTH = '[servers.gh]\nurl = "https://mcp.example.com/mcp"\nauth = "oauth"\n'
STORAGE = '[storage]\nurl = "sqlite:///x.db"\nsecret_key = "${K}"\n'


def problems(text: str, env: dict[str, str] | None = None) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads(text), env or {}, base_dir="/tmp")
    return caught.value.problems


def test_an_oauth_server_parses_with_its_client_keys_and_masks_the_secret() -> None:
    """auth = "oauth" with client_id, client_secret, client_metadata_url and scopes is read; repr hides the secret."""
    text = (
        OAUTH
        + 'client_id = "bot"\nclient_secret = "${CS}"\n'
        + 'client_metadata_url = "https://bot.example.com/client.json"\nscopes = ["read", "write"]\n'
        + STORAGE
    )
    config = parse_config(tomllib.loads(text), {"K": KEY, "CS": "s3cr3t-value"}, base_dir="/tmp")
    server = config.servers[0]
    assert server.auth is ServerAuth.OAUTH
    assert server.oauth is not None and server.oauth.client_id == "bot"
    assert server.oauth.client_secret is not None and server.oauth.client_secret.get() == "s3cr3t-value"
    assert server.oauth.scopes == ("read", "write")
    assert "s3cr3t-value" not in repr(server) and KEY not in repr(config)
    assert config.storage is not None and config.storage.secret_key is not None
    assert config.storage.secret_key.get() == KEY


def test_token_endpoint_auth_method_is_read_for_a_preregistered_client() -> None:
    """token_endpoint_auth_method overrides how the configured client authenticates (default: unset)."""
    text = (
        OAUTH + 'client_id = "bot"\nclient_secret = "pw"\ntoken_endpoint_auth_method = "client_secret_post"\n'
    )
    config = parse_config(tomllib.loads(text + STORAGE), {"K": KEY}, base_dir="/tmp")
    oauth = config.servers[0].oauth
    assert oauth is not None and oauth.token_endpoint_auth_method is TokenEndpointAuth.CLIENT_SECRET_POST
    plain = parse_config(tomllib.loads(OAUTH + STORAGE), {"K": KEY}, base_dir="/tmp").servers[0].oauth
    assert plain is not None and plain.token_endpoint_auth_method is None


def test_oauth_with_shared_is_a_config_error() -> None:
    """A shared session cannot hold several people's tokens."""
    found = problems(OAUTH + "shared = true\n" + STORAGE, {"K": KEY})
    assert any(p.startswith("servers.gh.auth: a shared session cannot hold") for p in found)


def test_oauth_without_a_secret_key_is_a_config_error_naming_it() -> None:
    """storage.secret_key is required once any server uses OAuth."""
    found = problems(OAUTH)
    assert any(p.startswith("storage.secret_key: required once a server uses auth") for p in found)


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            '[servers.s]\ncommand = "x"\nauth = "oauth"\n',
            "servers.s.auth: OAuth sign-in is for a server reached by url",
        ),
        (
            '[servers.s]\nurl = "https://h/m"\nclient_id = "x"\n',
            'servers.s.client_id: only with auth = "oauth"',
        ),
        (
            '[servers.s]\nurl = "https://h/m"\nauth = "magic"\n',
            "servers.s.auth: must be one of 'none', 'oauth'",
        ),
        (
            OAUTH.replace("gh", "s") + 'client_metadata_url = "http://h/c.json"\n',
            "servers.s.client_metadata_url: must be an https:// URL with a path",
        ),
        (
            OAUTH.replace("gh", "s")
            + 'client_id = "x"\nclient_secret = "y"\ntoken_endpoint_auth_method = "jwt"\n',
            "servers.s.token_endpoint_auth_method: must be one of 'client_secret_basic', 'client_secret_post', 'none'",
        ),
        (
            OAUTH.replace("gh", "s") + 'token_endpoint_auth_method = "none"\n',
            "servers.s.token_endpoint_auth_method: needs client_id (it says how a pre-registered client authenticates)",
        ),
        (
            OAUTH.replace("gh", "s")
            + 'client_id = "x"\ntoken_endpoint_auth_method = "client_secret_basic"\n',
            "servers.s.token_endpoint_auth_method: client_secret_basic needs client_secret",
        ),
        (
            OAUTH.replace("gh", "s")
            + 'client_id = "x"\nclient_secret = "y"\ntoken_endpoint_auth_method = "none"\n',
            "servers.s.token_endpoint_auth_method: none sends no secret: remove client_secret",
        ),
        (
            '[servers.s]\nurl = "https://h/m"\ntoken_endpoint_auth_method = "none"\n',
            'servers.s.token_endpoint_auth_method: only with auth = "oauth"',
        ),
    ],
)
def test_misplaced_oauth_keys_are_named(extra: str, line: str) -> None:
    """Each misuse of the OAuth keys is one problem line naming the key."""
    assert line in problems(extra + STORAGE, {"K": KEY})


def test_a_secret_key_that_is_not_a_key_is_refused() -> None:
    """A typo'd or truncated key is caught at start, not when the first token is stored."""
    found = problems(OAUTH + STORAGE, {"K": KEY[:-4]})
    assert any(p.startswith("storage.secret_key: not a key made by toolnexus-bot keygen") for p in found)


def test_keygen_prints_a_usable_key_as_the_last_word() -> None:
    """`toolnexus-bot keygen`: the key alone is the last word, and it encrypts and decrypts."""
    out = subprocess.run(
        [sys.executable, "-m", "bot", "keygen"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    key = out.split()[-1]
    parse_config(tomllib.loads(OAUTH + STORAGE), {"K": key}, base_dir="/tmp")
    sealer = Sealer(key)
    assert sealer.open(sealer.seal("token", "row"), "row") == "token"
    assert key != new_key()


def test_a_sealed_value_does_not_open_with_another_key_or_in_another_row() -> None:
    """Authenticated encryption: another key or another row's context fails, never yields text."""
    sealed = Sealer(KEY).seal("access-token", "1/gh")
    with pytest.raises(Unreadable):
        Sealer(new_key()).open(sealed, "1/gh")
    with pytest.raises(Unreadable):
        Sealer(KEY).open(sealed, "2/gh")

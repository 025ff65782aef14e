"""Tests for bot/config/'s `[storage]`, `[audit]` and `[telegram] admins`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.config import AuditContent, ConfigError, load_config, parse_config

SERVER = '[servers.demo]\ncommand = "python"\n'


def test_a_relative_sqlite_path_is_relative_to_the_config_folder(tmp_path: Path) -> None:
    """`sqlite:///data/bot.db` in /x/bot.toml is /x/data/bot.db, wherever the bot is started."""
    path = tmp_path / "bot.toml"
    path.write_text(SERVER + '[storage]\nurl = "sqlite:///data/bot.db"\n')
    storage = load_config(path, {}).storage
    assert storage is not None and storage.url.get() == f"sqlite:///{tmp_path / 'data' / 'bot.db'}"


def test_an_absolute_sqlite_path_is_kept() -> None:
    """Four slashes: an absolute path."""
    config = parse_config(tomllib.loads(SERVER + '[storage]\nurl = "sqlite:////var/lib/t.db"\n'), {})
    assert config.storage is not None and config.storage.url.get() == "sqlite:////var/lib/t.db"


def test_a_postgresql_url_takes_its_password_from_the_environment_and_hides_it() -> None:
    """`${PGPASSWORD}` is expanded; the URL is a Secret, so repr never shows it."""
    config = parse_config(
        tomllib.loads(SERVER + '[storage]\nurl = "postgresql://bot:${PGPASSWORD}@db/toolnexus"\n'),
        {"PGPASSWORD": "s3cret"},
    )
    assert config.storage is not None
    assert config.storage.url.get() == "postgresql://bot:s3cret@db/toolnexus"
    assert "s3cret" not in repr(config)


def test_no_storage_and_no_folder_means_no_database() -> None:
    """A config parsed from memory without [storage] (tests, the console's demo) opens no database."""
    assert parse_config(tomllib.loads(SERVER), {}).storage is None


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[storage]\nurl = "mysql://db/x"\n', "storage.url: must be a sqlite:///path or postgresql://"),
        ('[storage]\nurl = "sqlite://x.db"\n', "storage.url: a SQLite URL is sqlite:///relative/path"),
        ('[storage]\nfile = "x"\n', "storage.file: unknown key"),
        ('[audit]\ncontent = "some"\n', "audit.content: "),
        ("[telegram]\nadmins = [0]\n", "telegram.admins[0]: not a Telegram user id"),
    ],
)
def test_bad_storage_audit_and_admins_settings_name_their_key(toml: str, expected: str) -> None:
    """Each problem line names the key."""
    with pytest.raises(ConfigError) as caught:
        parse_config(tomllib.loads(SERVER + toml), {})
    assert any(problem.startswith(expected) for problem in caught.value.problems), caught.value.problems


def test_audit_content_and_admins_are_read() -> None:
    """`[audit] content = "keys"` and `[telegram] admins` reach the Config."""
    config = parse_config(
        tomllib.loads(SERVER + '[audit]\ncontent = "keys"\n[telegram]\nadmins = [5, 6]\n'), {}
    )
    assert config.audit.content is AuditContent.KEYS
    assert config.telegram.admins == frozenset({5, 6})

"""`[storage]` and `[audit]`: the database (SQLite by default, or PostgreSQL) with its key for secrets at
rest, and how much the audit log keeps; where the default database goes (`state_folder`). No I/O.
"""

from __future__ import annotations

import base64
import enum
import os
from collections.abc import Mapping
from typing import Annotated, Final, cast

from pydantic import AfterValidator, ValidationInfo

from bot.config import read
from bot.config._table import EXPAND, Context, Secret, Table, as_secret, checked, optional

STORAGE_FILE: Final = "toolnexus.db"
"""The SQLite database's name when there is no `[storage] url`: in the state folder (see `state_folder`), else
beside the config file."""
_STORAGE_SCHEMES: Final = ("sqlite", "postgresql", "postgres")


class AuditContent(enum.StrEnum):
    """How much of a person's answer (and a call's arguments) the audit log keeps."""

    FULL = "full"
    """The values."""
    KEYS = "keys"
    """Only the field names."""
    NONE = "none"
    """Neither."""


def _secret_key(value: object) -> str:
    key = read.string(value)
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(key) != 44 or len(raw) != 32:
        raise read.Invalid("not a key made by toolnexus-bot keygen (44 characters of URL-safe base64)")
    return key


def _storage_url(value: object) -> str:
    url = read.string(value)
    scheme = url.partition(":")[0].partition("+")[0]
    if scheme not in _STORAGE_SCHEMES:
        raise read.Invalid("must be a sqlite:///path or postgresql://user:password@host/db URL")
    if scheme == "sqlite" and (not url.startswith("sqlite:///") or len(url) == len("sqlite:///")):
        raise read.Invalid("a SQLite URL is sqlite:///relative/path or sqlite:////absolute/path")
    return url


def _beside_the_file(url: Secret, info: ValidationInfo) -> Secret:
    """A relative SQLite path is relative to the config file's folder."""
    context = cast("Context | None", info.context)
    path = url.get().removeprefix("sqlite:///")
    if context is None or not url.get().startswith("sqlite:///") or os.path.isabs(path):
        return url
    return Secret("sqlite:///" + os.path.join(context["base_dir"] or os.getcwd(), path))


class StorageConfig(Table):
    """`[storage]`: the database (audit log, open questions)."""

    url: Annotated[Secret, checked(as_secret(_storage_url)), EXPAND, AfterValidator(_beside_the_file)]
    """`sqlite:///<absolute path>` (a relative path in the file is resolved against the config's folder)
    or `postgresql://user:password@host/db`; a `Secret` because a PostgreSQL URL may carry a password.
    Without it, `parse_config` puts `toolnexus.db` in the state folder or beside the config file."""
    secret_key: Annotated[Secret | None, checked(optional(as_secret(_secret_key))), EXPAND] = None
    """Encrypts OAuth tokens at rest (a Fernet key, `toolnexus-bot keygen`); required once a server uses OAuth."""


class AuditConfig(Table):
    """`[audit]`."""

    content: Annotated[AuditContent, checked(read.one_of(AuditContent)), EXPAND] = AuditContent.FULL
    """How much of answers and arguments the log keeps."""


def state_folder(environ: Mapping[str, str]) -> str | None:
    """Where the process may keep its state, when something set one up for it: systemd's
    `$STATE_DIRECTORY` (the unit's `StateDirectory=`; the first of a colon-separated list), which the
    container image sets to its volume `/data`. None otherwise (the default database goes beside the config)."""
    first = environ.get("STATE_DIRECTORY", "").split(":")[0]
    return first if os.path.isabs(first) else None

"""Raw TOML values for `bot.config`: `${VAR}` expansion and the typed converters. Pure.

A converter takes one value (already expanded, see `expand_all`) and returns the typed value or raises
`Invalid`, whose reason becomes the problem line after the key; `bot.config._table` turns it into a
pydantic error. The reasons never quote the value, so no secret can reach a problem line.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import Final, TypeVar, cast
from urllib.parse import urlsplit

from bot.errors import ToolnexusError

T = TypeVar("T")
E = TypeVar("E", bound=enum.StrEnum)
Environ = Mapping[str, str]
Convert = Callable[[object], T]
"""Raw value → typed value, or `Invalid`."""


class Invalid(ToolnexusError):
    """A value's problem; `at` extends the key into the value (`[2]`, `.Authorization`)."""

    def __init__(self, reason: str, at: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


_REFERENCE: Final = re.compile(r"\$\$\{|\$\{(?:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\})?")


def expand(text: str, environ: Environ) -> str:
    """Replace `${VAR}` and `${VAR:-default}` (the default when VAR is unset or empty); `$${` gives `${`."""
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        if match[0] == "$${":
            return "${"
        name, default = match[1], match[2]
        if name is None:
            raise Invalid("write ${NAME} or ${NAME:-default} (or $${ for a literal ${)")
        value = environ.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(name)
            return ""
        return value

    result = _REFERENCE.sub(substitute, text)
    names = list(dict.fromkeys(missing))
    if len(names) == 1:
        raise Invalid(f"environment variable {names[0]} is not set")
    if names:
        raise Invalid(f"environment variables {', '.join(names)} are not set")
    return result


def string(value: object) -> str:
    if not isinstance(value, str):
        raise Invalid("must be a string")
    return value


def text(value: object) -> str:
    """A non-empty string."""
    result = string(value)
    if not result:
        raise Invalid("must not be empty")
    return result


def boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise Invalid("must be a boolean (true or false)")
    return value


def positive(value: object) -> float:
    # bool is an int in Python, and TOML has inf and nan.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise Invalid("must be a positive number")
    return float(value)


def positive_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Invalid("must be a positive integer")
    return value


def port(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise Invalid("must be a port number (an integer from 1 to 65535)")
    return value


def one_of(kind: type[E]) -> Convert[E]:
    """A converter to a member of the StrEnum `kind`."""

    def convert(value: object) -> E:
        result = string(value)
        choices = [member.value for member in kind]
        if result not in choices:
            raise Invalid(f"must be one of {', '.join(map(repr, choices))}")
        return kind(result)

    return convert


def matching(pattern: re.Pattern[str], reason: str) -> Convert[str]:
    """A converter to a string that fullmatches `pattern`; `reason` says what it must be."""

    def convert(value: object) -> str:
        result = string(value)
        if not pattern.fullmatch(result):
            raise Invalid(reason)
        return result

    return convert


def http_url(value: object) -> str:
    result = string(value)
    try:
        parts = urlsplit(result)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise Invalid("not a URL") from None
    if not parts.scheme or not parts.hostname:
        raise Invalid("not a URL")
    if parts.scheme not in ("http", "https"):
        raise Invalid("must be an http:// or https:// URL")
    return result


def str_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list | tuple | set | frozenset):
        raise Invalid("must be a list of strings")
    items: list[str] = []
    for i, item in enumerate(cast("list[object]", value)):
        try:
            items.append(string(item))
        except Invalid as exc:
            raise Invalid(exc.reason, f"[{i}]") from None
    return tuple(items)


def str_table(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise Invalid("must be a table of strings")
    table: dict[str, str] = {}
    for name, item in cast("Mapping[object, object]", value).items():
        try:
            table[str(name)] = string(item)
        except Invalid as exc:
            raise Invalid(exc.reason, f".{name}") from None
    return table


def user_ids(value: object) -> frozenset[int]:
    """A list of Telegram user ids, or a string of them separated by commas or spaces."""
    items: list[object]
    if isinstance(value, str):
        # A string lets one env var carry the list: allowed_users = "${TOOLNEXUS_ALLOWED_USERS:-}".
        words = re.split(r"[\s,]+", value.strip(" \t\r\n,"))
        items = [int(w) if w.isascii() and w.isdigit() else w for w in words if w]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(cast("list[object]", value))
    else:
        raise Invalid("must be a list of Telegram user ids, or a string of ids separated by commas or spaces")
    ids: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise Invalid("not a Telegram user id (a positive integer)", f"[{i}]")
        ids.add(item)
    return frozenset(ids)


def expand_all(value: object, environ: Environ) -> object:
    """`value` with `expand` applied to every string in it (lists and tables too); other values as they are."""
    if isinstance(value, str):
        return expand(value, environ)
    if isinstance(value, list | tuple):
        items: list[object] = []
        for i, item in enumerate(cast("list[object]", value)):
            try:
                items.append(expand_all(item, environ))
            except Invalid as exc:
                raise Invalid(exc.reason, f"[{i}]{exc.at}") from None
        return items
    if isinstance(value, Mapping):
        table: dict[object, object] = {}
        for name, item in cast("Mapping[object, object]", value).items():
            try:
                table[name] = expand_all(item, environ)
            except Invalid as exc:
                raise Invalid(exc.reason, f".{name}{exc.at}") from None
        return table
    return value

"""Reading raw TOML values for `bot.config`: `${VAR}` expansion, typed converters, problem collection. Pure.

A converter takes a raw value and the environment, and returns the typed value or raises `Invalid`;
a `Section` turns that into a problem line naming the key, and reads on with the default.
"""

from __future__ import annotations

import difflib
import enum
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, cast
from urllib.parse import urlsplit

T = TypeVar("T")
D = TypeVar("D")
E = TypeVar("E", bound=enum.StrEnum)
Environ = Mapping[str, str]
Convert = Callable[[object, Environ], T]
"""Raw value + environment → typed value, or `Invalid`."""


class Invalid(Exception):
    """A value's problem; `at` extends the key into the value (`[2]`, `.Authorization`)."""

    def __init__(self, reason: str, at: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.at = at


class Section:
    """One TOML table under its dotted key; appends problems to a list shared by the whole document."""

    def __init__(self, values: Mapping[str, Any], key: str, environ: Environ, problems: list[str]) -> None:
        self.values = values
        self.key = key
        self.environ = environ
        self.problems = problems

    def key_of(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def problem(self, reason: str, name: str | None = None) -> None:
        self.problems.append(f"{self.key if name is None else self.key_of(name)}: {reason}")

    def has(self, name: str) -> bool:
        return self.values.get(name) is not None

    def only(self, allowed: tuple[str, ...]) -> None:
        """Report every key not in `allowed`, suggesting the nearest allowed one."""
        for name in self.values:
            if name not in allowed:
                near = difflib.get_close_matches(name, allowed, n=1)
                self.problem(f"unknown key (did you mean {near[0]}?)" if near else "unknown key", name)

    def section(self, name: str) -> Section:
        """The sub-table `name`; empty when absent or (a problem) not a table."""
        value = self.values.get(name)
        if value is not None and not isinstance(value, Mapping):
            self.problem("must be a table", name)
        table: Mapping[str, Any] = cast("Mapping[str, Any]", value) if isinstance(value, Mapping) else {}
        return Section(table, self.key_of(name), self.environ, self.problems)

    def get(self, name: str, convert: Convert[T], default: D) -> T | D:
        """The converted value of `name`; `default` when absent or (a problem) invalid."""
        value = self.values.get(name)
        if value is None:
            return default
        try:
            return convert(value, self.environ)
        except Invalid as exc:
            self.problems.append(f"{self.key_of(name)}{exc.at}: {exc.reason}")
            return default


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


def string(value: object, environ: Environ) -> str:
    if not isinstance(value, str):
        raise Invalid("must be a string")
    return expand(value, environ)


def text(value: object, environ: Environ) -> str:
    """A non-empty string."""
    result = string(value, environ)
    if not result:
        raise Invalid("must not be empty")
    return result


def boolean(value: object, environ: Environ) -> bool:
    if not isinstance(value, bool):
        raise Invalid("must be a boolean (true or false)")
    return value


def positive(value: object, environ: Environ) -> float:
    # bool is an int in Python, and TOML has inf and nan.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise Invalid("must be a positive number")
    return float(value)


def positive_int(value: object, environ: Environ) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Invalid("must be a positive integer")
    return value


def port(value: object, environ: Environ) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise Invalid("must be a port number (an integer from 1 to 65535)")
    return value


def one_of(kind: type[E]) -> Convert[E]:
    """A converter to a member of the StrEnum `kind`."""

    def convert(value: object, environ: Environ) -> E:
        result = string(value, environ)
        choices = [member.value for member in kind]
        if result not in choices:
            raise Invalid(f"must be one of {', '.join(map(repr, choices))}")
        return kind(result)

    return convert


def matching(pattern: re.Pattern[str], reason: str) -> Convert[str]:
    """A converter to a string that fullmatches `pattern`; `reason` says what it must be."""

    def convert(value: object, environ: Environ) -> str:
        result = string(value, environ)
        if not pattern.fullmatch(result):
            raise Invalid(reason)
        return result

    return convert


def http_url(value: object, environ: Environ) -> str:
    result = string(value, environ)
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


def str_list(value: object, environ: Environ) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise Invalid("must be a list of strings")
    items: list[str] = []
    for i, item in enumerate(cast("list[object]", value)):
        try:
            items.append(string(item, environ))
        except Invalid as exc:
            raise Invalid(exc.reason, f"[{i}]") from None
    return tuple(items)


def str_table(value: object, environ: Environ) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise Invalid("must be a table of strings")
    table: dict[str, str] = {}
    for name, item in cast("Mapping[object, object]", value).items():
        try:
            table[str(name)] = string(item, environ)
        except Invalid as exc:
            raise Invalid(exc.reason, f".{name}") from None
    return table


def user_ids(value: object, environ: Environ) -> frozenset[int]:
    """A list of Telegram user ids, or a string of them separated by commas or spaces."""
    items: list[object]
    if isinstance(value, str):
        # A string lets one env var carry the list: allowed_users = "${TOOLNEXUS_ALLOWED_USERS:-}".
        words = re.split(r"[\s,]+", expand(value, environ).strip(" \t\r\n,"))
        items = [int(w) if w.isascii() and w.isdigit() else w for w in words if w]
    elif isinstance(value, list | tuple):
        items = list(cast("list[object]", value))
    else:
        raise Invalid("must be a list of Telegram user ids, or a string of ids separated by commas or spaces")
    ids: set[int] = set()
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, int) or item <= 0:
            raise Invalid("not a Telegram user id (a positive integer)", f"[{i}]")
        ids.add(item)
    return frozenset(ids)

"""The four string formats MCP forms allow, checked strictly, and a JSON Schema validator using them. Pure.

The validator also matches `pattern` with RE2 (`mapping._regex`), never with `re` as jsonschema would: a
server's pattern runs in linear time wherever it sits in the schema.

jsonschema's own checkers accept any URI and any date-time unless optional packages are installed, and
accept `x@y` as an email; our checks are the same in `values` (a person's answer) and in the final
whole-schema validation, so what a person is told matches what is sent.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, cast
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.protocols import Validator

from mapping._regex import UnsafePattern, search

_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_DATE_TIME: Final = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# RFC 3986 characters: unreserved, reserved and "%"; anything else (spaces, <>"{}|\^`, non-ASCII) is not a URI
_URI_CHARS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~:/?#[]@!$&'()*+,;=%"
)
_LOCAL_CHARS: Final = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-/=?^_`{|}~."
)
_LABEL: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MAX_EMAIL_LENGTH: Final = 254


def is_date(value: str) -> bool:
    """A calendar date written `YYYY-MM-DD` (RFC 3339 full-date)."""
    if not _DATE.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def is_date_time(value: str) -> bool:
    """An RFC 3339 date-time with seconds and a zone: `2025-06-18T14:30:00Z`, `...+02:00`."""
    match = _DATE_TIME.fullmatch(value)
    if match is None or not is_date(match[1]):
        return False
    hour, minute, second = int(match[2]), int(match[3]), int(match[4])
    zone = match[6]
    if len(zone) > 1 and (int(zone[1:3]) > 23 or int(zone[4:6]) > 59):
        return False
    # RFC 3339 allows a leap second (60); Python's datetime does not, so it is checked by hand
    return hour <= 23 and minute <= 59 and second <= 60


def is_email(value: str) -> bool:
    """`local@domain.tld` as people write it: no quoted local parts, no IP-literal domains, ASCII only."""
    if len(value) > MAX_EMAIL_LENGTH or value.count("@") != 1:
        return False
    local, domain = value.split("@")
    if not local or len(local) > 64 or not set(local) <= _LOCAL_CHARS:
        return False
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return False
    labels = domain.split(".")
    if len(labels) < 2 or not all(_LABEL.fullmatch(label) for label in labels):
        return False
    return labels[-1].isalpha() and len(labels[-1]) >= 2


def is_uri(value: str) -> bool:
    """An absolute URI (RFC 3986): a scheme, then something; only the characters a URI may contain."""
    if not _SCHEME.match(value) or not set(value) <= _URI_CHARS:
        return False
    rest = value.partition(":")[2]
    if not rest:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unbalanced "[" in the host
        return False
    # a hierarchical URI ("https://...") needs a host; "mailto:x" and "urn:x:y" need none
    return not (rest.startswith("//") and not parts.netloc)


FORMAT_CHECKS: Final = {"email": is_email, "uri": is_uri, "date": is_date, "date-time": is_date_time}


def _format_checker() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name, check in FORMAT_CHECKS.items():
        # jsonschema hands non-strings to format checkers too; formats only constrain strings
        checker.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value))
    return checker


FORMAT_CHECKER: Final = _format_checker()


def _pattern(
    checker: Validator, pattern: object, instance: object, schema: object
) -> Iterator[ValidationError]:
    """jsonschema's `pattern` keyword, matched with RE2: unanchored, as JSON Schema says."""
    if not isinstance(instance, str) or not isinstance(pattern, str):
        return
    try:
        found = search(pattern, instance)
    except UnsafePattern:  # parse_schema refuses such a schema; a pattern that cannot be checked is not met
        found = False
    if not found:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


# `extend` is the public way to replace one keyword; its stub has no types, hence the cast
_extend = cast(
    "Callable[[type[Draft202012Validator], dict[str, object]], Callable[..., Validator]]", validators.extend
)
_VALIDATOR: Final = _extend(Draft202012Validator, {"pattern": _pattern})


def validator(schema: Mapping[str, Any]) -> Validator:
    """A Draft 2020-12 validator for `schema` that checks our four formats and matches patterns with RE2."""
    return _VALIDATOR(schema, format_checker=FORMAT_CHECKER)

"""Parse `/call` arguments and find what a tool still needs. Pure (no I/O); shared by both hosts.

`/call <server> <tool> {"a": 1}` or `/call <tool> a=1 note=two words`: a value runs up to the next
` key=` (no quoting needed in a chat; one pair of surrounding quotes is removed). Values are typed by the
tool's input schema where it says how (integer, number, boolean, array/object as JSON), else kept as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z_][\w.-]*)=")


ECHO_LIMIT = 100
"""Characters of a person's bad input quoted back at them; the rest is cut."""


def echo(text: str) -> str:
    """`text` quoted back in a message about it (`'abc'`), cut to `ECHO_LIMIT` characters."""
    return repr(text) if len(text) <= ECHO_LIMIT else repr(text[:ECHO_LIMIT]) + f"… ({len(text):,} characters)"


class CallArgsError(ValueError):
    """The arguments cannot be understood; the message says how to write them."""


@dataclass(frozen=True, slots=True)
class CallCommand:
    """`/call` split into its parts: server may be None when the tool name alone was given."""

    server: str | None
    tool: str
    raw_args: str


def split_call(text: str, servers: list[str]) -> CallCommand:
    """Split `<server> <tool> [args]` or `<tool> [args]` (the first word is a server only if one has that name).

    Raises:
        CallArgsError: nothing to call.
    """
    words = text.strip().split(maxsplit=2)
    if not words:
        raise CallArgsError("usage: /call <server> <tool> [json object | key=value ...]")
    if words[0] in servers and len(words) >= 2:
        return CallCommand(words[0], words[1], words[2] if len(words) > 2 else "")
    rest = text.strip()[len(words[0]) :].strip()
    return CallCommand(None, words[0], rest)


def parse_arguments(raw: str, input_schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A JSON object, or `key=value` pairs typed by `input_schema`.

    Raises:
        CallArgsError: neither a JSON object nor key=value pairs.
    """
    raw = raw.strip()
    if not raw:
        return {}
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CallArgsError(f"not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(value, dict):
            raise CallArgsError("arguments must be a JSON object")
        return value
    keys = list(_KEY.finditer(raw))
    if not keys or keys[0].start() != 0:
        first = raw.split()[0]
        raise CallArgsError(f"{echo(first)} is not key=value (or pass one JSON object)")
    properties = _properties(input_schema)
    args: dict[str, Any] = {}
    for key, following in zip(keys, [*keys[1:], None], strict=True):
        value = raw[key.end() : following.start() if following else len(raw)].strip()
        args[key.group(1)] = _typed(_unquote(value), properties.get(key.group(1)))
    return args


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def missing_required(input_schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> list[str]:
    """Required properties not given, in schema order."""
    if not isinstance(input_schema, Mapping):
        return []
    required = input_schema.get("required")
    if not isinstance(required, list):
        return []
    return [name for name in required if isinstance(name, str) and name not in args]


def sub_schema(input_schema: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """The flat object schema of just `names`, all required (to ask them with the form UI)."""
    properties = _properties(input_schema)
    return {
        "type": "object",
        "properties": {n: properties.get(n, {"type": "string"}) for n in names},
        "required": list(names),
    }


def _properties(schema: Mapping[str, Any] | None) -> Mapping[str, Any]:
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def _typed(value: str, prop: Any) -> Any:
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    if kind in ("integer", "number", "boolean", "array", "object", "null"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # left as text; the server's own validation explains what it wanted
    return value

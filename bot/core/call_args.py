"""Parse `/call` arguments and find what a tool still needs. Pure (no I/O); shared by both hosts.

`/call <server> <tool> {"a": 1}` or `/call <tool> a=1 note=two words`: a value runs up to the next
` key=` (no quoting needed in a chat; one pair of surrounding quotes is removed). Values are typed by the
tool's input schema where it says how (integer, number, boolean, array/object as JSON), else kept as text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final

from bot.errors import ToolnexusError
from mapping.errors import UnsupportedSchema
from mapping.form import check_content
from mapping.schema import parse_schema

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z_][\w.-]*)=")


ECHO_LIMIT: Final = 100
"""Characters of a person's bad input quoted back at them; the rest is cut."""
NAME_CLIP: Final = 64
"""Characters of a server or tool name a person typed, quoted back when nothing has that name."""
ARGUMENT_CLIP: Final = 40
"""Characters of an unknown argument name quoted back."""
UNKNOWN_SHOWN: Final = 5
"""Unknown argument names quoted back at most (the first ones)."""
VALUE_CLIP: Final = 60
"""Characters of an invalid argument value quoted back."""


def echo(text: str) -> str:
    """`text` quoted back in a message about it (`'abc'`), cut to `ECHO_LIMIT` characters."""
    return (
        repr(text) if len(text) <= ECHO_LIMIT else repr(text[:ECHO_LIMIT]) + f"… ({len(text):,} characters)"
    )


class CallArgsError(ToolnexusError, ValueError):
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


def not_found_text(cmd: CallCommand, servers: list[str]) -> str:
    """Why `/call` found no tool (plain text): `/call nosrv deploy` meant a server that is not there (listed);
    `/call nosuchtool` a tool no server has."""
    rest = cmd.raw_args.split(maxsplit=1)
    if cmd.server is None and rest and not rest[0].startswith("{") and "=" not in rest[0]:
        listed = ", ".join(servers) if servers else "none configured"
        return f"There is no server “{cmd.tool[:NAME_CLIP]}”. The servers: {listed}."
    return f"No tool named “{cmd.tool[:NAME_CLIP]}”."


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


@dataclass(frozen=True, slots=True)
class ArgumentCheck:
    """What is wrong with a call's arguments by the tool's `inputSchema`, before anything is sent."""

    unknown: tuple[str, ...] = ()
    """Names the tool does not take (its schema lists its properties and allows no others)."""
    invalid: tuple[tuple[str, str], ...] = ()
    """(name, reason) for values that do not fit their property, to be asked again with the form UI."""

    @property
    def refused(self) -> frozenset[str]:
        """The names in `invalid`."""
        return frozenset(name for name, _ in self.invalid)

    known: tuple[str, ...] = ()
    """The tool's argument names, in schema order (to name them beside an unknown one)."""


def unknown_text(tool: str, check: ArgumentCheck) -> str:
    """`deploy takes no argument “enviroment”. Its arguments: environment, service.` (plain text)."""
    names = ", ".join(f"“{name[:ARGUMENT_CLIP]}”" for name in check.unknown[:UNKNOWN_SHOWN])
    plural = "arguments" if len(check.unknown) > 1 else "argument"
    known = ", ".join(check.known) if check.known else "none"
    return f"{tool} takes no {plural} {names}. Its arguments: {known}."


def asking_again(tool: str, check: ArgumentCheck) -> str:
    """The form's prompt when values given were refused: each reason, then what to do."""
    lines = [f"To call {tool}, please fill in again what did not fit:"]
    lines += [reason for _, reason in check.invalid]
    return "\n".join(lines)


def to_ask(
    input_schema: Mapping[str, Any] | None, args: Mapping[str, Any], check: ArgumentCheck
) -> list[str]:
    """Argument names to ask with the form UI, in schema order: the required ones not given, and those given
    whose values did not fit (`check.invalid`)."""
    refused = {name for name, _ in check.invalid}
    kept = {name: value for name, value in args.items() if name not in refused}
    missing = set(missing_required(input_schema, kept)) | refused
    order = [name for name in _properties(input_schema) if name in missing]
    return order + [name for name in missing_required(input_schema, kept) if name not in order]


def check_arguments(input_schema: Mapping[str, Any] | None, args: Mapping[str, Any]) -> ArgumentCheck:
    """Check `args` against the tool's input schema as the form UI would check answers (same reasons). A
    property the form UI cannot show (nested objects, ...) is left to the server's own validation."""
    properties = _properties(input_schema)
    if not properties:
        return ArgumentCheck()
    known = tuple(name for name in properties if isinstance(name, str))
    extra = input_schema.get("additionalProperties") if isinstance(input_schema, Mapping) else None
    unknown = (
        () if extra is True or isinstance(extra, Mapping) else tuple(n for n in args if n not in properties)
    )
    invalid: list[tuple[str, str]] = []
    for name, value in args.items():
        if name not in properties:
            continue
        try:
            spec = parse_schema(sub_schema(input_schema or {}, [name]))
        except UnsupportedSchema:
            continue
        reason = check_content(spec, {name: value})
        if reason is not None:
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            invalid.append((name, f"{reason} (you gave “{shown[:VALUE_CLIP]}”)"))
    return ArgumentCheck(unknown, tuple(invalid), known)


def sub_schema(
    input_schema: Mapping[str, Any], names: list[str], refused: Collection[str] = ()
) -> dict[str, Any]:
    """The flat object schema of just `names`, all required (to ask them with the form UI). A `refused` name
    loses its default: the person gave a value that did not fit, so it is asked, not filled in for them."""
    properties = _properties(input_schema)

    def prop(name: str) -> Any:
        found = properties.get(name, {"type": "string"})
        if name in refused and isinstance(found, Mapping):
            return {k: v for k, v in found.items() if k != "default"}
        return found

    return {"type": "object", "properties": {n: prop(n) for n in names}, "required": list(names)}


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

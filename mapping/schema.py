"""A `requestedSchema` parsed once into form fields, or refused with the reason. Pure.

The spec allows a flat object of primitives: strings (with formats), numbers, booleans, single choice
(enum, titled oneOf, legacy enumNames) and multiple choice (arrays of enum/anyOf items). Anything else
raises `UnsupportedSchema` here, at this single point, so no surface ever renders a form wrongly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from jsonschema import Draft202012Validator, SchemaError

from mapping._fields import (
    BoolField,
    ChoiceField,
    Field,
    FormSpec,
    MultiChoiceField,
    NumberField,
    Option,
    TextField,
    TextFormat,
    Value,
)
from mapping._regex import UnsafePattern, check_pattern
from mapping.errors import UnsupportedSchema
from mapping.values import check_value

__all__ = [
    "MAX_TEXT_LENGTH",
    "BoolField",
    "ChoiceField",
    "Field",
    "FormSpec",
    "MultiChoiceField",
    "NumberField",
    "Option",
    "TextField",
    "TextFormat",
    "Value",
    "parse_schema",
]

MAX_TEXT_LENGTH: Final = 10_000
"""A `minLength` above this asks for more than anyone will type: the field is refused."""
_MAX_DEPTH: Final = 32
_MAX_BOUND: Final = 1e300
_CLIP: Final = 200
# keywords that make a schema (or a property) depend on other schemas: a form cannot show them
_ROOT_COMBINATORS: Final = ("$ref", "$dynamicRef", "allOf", "anyOf", "oneOf", "not", "if")
_PROPERTY_REFS: Final = ("$ref", "$dynamicRef")
# Keywords that constrain nothing, then those each field type's own rules (mapping.values) enforce at least as
# strictly as JSON Schema does. A schema holding only these needs no JSON Schema pass over its answers.
_ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
)
_ENFORCED: Final[dict[type, frozenset[str]]] = {
    TextField: frozenset({"type", "minLength", "maxLength", "format", "pattern"}),
    NumberField: frozenset({"type", "minimum", "maximum"}),
    BoolField: frozenset({"type"}),
    ChoiceField: frozenset({"type", "enum", "enumNames", "oneOf", "anyOf"}),
    MultiChoiceField: frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"}),
}
_ITEMS_ENFORCED: Final = frozenset({"type", "enum", "enumNames", "oneOf", "anyOf"})
_BRANCH_ENFORCED: Final = frozenset({"const", "title", "description"})
_ROOT_ENFORCED: Final = frozenset({"type", "properties", "required", "$schema"})
_SCHEMA_MAPS: Final = frozenset({"properties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose value maps names to schemas: a property may be called `pattern`."""
_VALUES: Final = frozenset({"const", "enum", "enumNames", "default", "examples", "title", "description"})
"""Keywords whose value is data, not a schema: a `pattern` key inside one is not a pattern."""


def parse_schema(schema: Mapping[str, Any] | None) -> FormSpec:
    """Parse a `requestedSchema` into a `FormSpec`; `None` (no schema) is a form with no fields: a confirm.

    Raises:
        UnsupportedSchema: the only exception it raises, with the reason and a path like `properties.size`.
    """
    if schema is None:
        return FormSpec(fields=(), schema={"type": "object"})
    try:
        return _parse(schema)
    except UnsupportedSchema:
        raise
    except Exception as exc:  # hostile input must never escape as anything but UnsupportedSchema
        raise UnsupportedSchema(f"the schema could not be read ({type(exc).__name__})") from exc


def _parse(schema: object) -> FormSpec:
    if not isinstance(schema, Mapping):
        raise UnsupportedSchema("the schema must be a JSON object")
    data = _json_copy(schema, "", 0)
    _check_schema(data)
    _check_patterns(data, "")
    if data.get("type", "object") != "object":
        raise UnsupportedSchema("the root must be an object schema (type: object)", "type")
    for key in _ROOT_COMBINATORS:
        if key in data:
            raise UnsupportedSchema(f"a form cannot show a schema built with {key}", key)
    properties: dict[str, Any] = data.get("properties", {})
    required: list[str] = data.get("required", [])
    for name in required:
        if name not in properties:
            reason = f"required names a property that does not exist: {_clip(name)!r}"
            raise UnsupportedSchema(reason, "required")
    fields = tuple(_field(name, prop, name in required) for name, prop in properties.items())
    in_full = all(f.checked_in_full for f in fields) and set(data) <= _ROOT_ENFORCED | _ANNOTATIONS
    return FormSpec(fields=fields, schema=data, checked_in_full=in_full)


_VALID: Final[dict[bytes, None]] = {}
"""The digests of the last `_VALID_KEPT` schemas found valid JSON Schema, oldest first: a server asks with the same
schema again and again, and checking one against the meta-schema costs more than the rest of a question."""
_VALID_KEPT: Final = 256


def _check_schema(data: dict[str, Any]) -> None:
    """Check `data` (plain JSON) against the JSON Schema 2020-12 meta-schema, once per distinct schema."""
    digest = hashlib.sha256(
        json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).digest()
    if digest in _VALID:
        return
    try:
        Draft202012Validator.check_schema(data)
    except SchemaError as exc:
        path = ".".join(str(p) for p in exc.absolute_path)
        raise UnsupportedSchema(f"not valid JSON Schema: {_clip(exc.message)}", path) from None
    _VALID[digest] = None
    if len(_VALID) > _VALID_KEPT:
        del _VALID[next(iter(_VALID))]


def _check_patterns(node: object, path: str) -> None:
    """Every `pattern` anywhere in the schema must compile with RE2, which matches it (mapping._regex), and
    `patternProperties` is refused: jsonschema would match its names with `re`, and no form needs it."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            _check_patterns(item, f"{path}.{i}")
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        where = f"{path}.{key}" if path else key
        if key == "pattern" and isinstance(value, str):
            try:
                check_pattern(value)
            except UnsafePattern as exc:
                raise UnsupportedSchema(str(exc), where) from None
        elif key == "patternProperties":
            raise UnsupportedSchema("a form cannot show a schema with patternProperties", where)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):  # names, not keywords, then schemas
            for name, sub in value.items():
                _check_patterns(sub, f"{where}.{name}")
        elif key not in _VALUES:
            _check_patterns(value, where)


def _json_copy(value: object, path: str, depth: int) -> Any:
    """A plain-JSON deep copy (dicts, lists, scalars), refusing anything else, cycles and deep nesting."""
    if depth > _MAX_DEPTH:
        raise UnsupportedSchema("the schema is nested too deeply", path)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnsupportedSchema(f"object keys must be strings, not {type(key).__name__}", path)
            out[key] = _json_copy(item, f"{path}.{key}" if path else key, depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [_json_copy(item, f"{path}.{i}", depth + 1) for i, item in enumerate(value)]
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise UnsupportedSchema(f"{type(value).__name__} is not a JSON value", path)


def _field(name: str, prop: object, required: bool) -> Field:
    path = f"properties.{name}"
    if not isinstance(prop, dict):
        raise UnsupportedSchema("a property must be a schema object", path)
    for key in _PROPERTY_REFS:
        if key in prop:
            raise UnsupportedSchema(f"{key} is not supported in a form", f"{path}.{key}")
    kind = prop.get("type")
    if kind is None and ("enum" in prop or "oneOf" in prop or "anyOf" in prop):
        kind = "string"  # an enum without a type still says what it is
    common: dict[str, Any] = {
        "name": name,
        "title": _text(prop.get("title")) or name,
        "description": _text(prop.get("description")),
        "required": required,
        "schema": prop,
    }
    if kind == "string" and ("enum" in prop or "oneOf" in prop or "anyOf" in prop):
        field: Field = ChoiceField(options=_options(prop, path), **common)
    elif kind == "string":
        field = _text_field(prop, path, common)
    elif kind in ("number", "integer"):
        field = _number_field(prop, path, common, integer=kind == "integer")
    elif kind == "boolean":
        field = BoolField(**common)
    elif kind == "array":
        field = _multi_field(prop, path, common)
    elif kind == "object":
        raise UnsupportedSchema("nested objects are not supported in a form", path)
    elif kind is None:
        raise UnsupportedSchema("the property has no type", path)
    else:
        raise UnsupportedSchema(f"type {_clip(str(kind))} is not supported in a form", f"{path}.type")
    field = dataclasses.replace(field, checked_in_full=_enforced_in_full(field, prop))
    return _with_default(field, prop.get("default"))


def _enforced_in_full(field: Field, prop: dict[str, Any]) -> bool:
    """Whether `field`'s own rules enforce every keyword of `prop` (its choices' branches and items too)."""
    if not set(prop) <= _ENFORCED[type(field)] | _ANNOTATIONS:
        return False
    holder = prop
    if isinstance(field, MultiChoiceField):
        holder = prop["items"]  # a dict with the choices: `_multi_field` has checked
        if not set(holder) <= _ITEMS_ENFORCED | _ANNOTATIONS:
            return False
    branches = [b for key in ("oneOf", "anyOf") for b in holder.get(key, ())]
    return all(isinstance(b, dict) and set(b) <= _BRANCH_ENFORCED for b in branches)


def _text_field(prop: dict[str, Any], path: str, common: dict[str, Any]) -> TextField:
    min_length, max_length = _bounds(prop, "minLength", "maxLength", path)
    if min_length is not None and min_length > MAX_TEXT_LENGTH:
        raise UnsupportedSchema(
            f"minLength {min_length} asks for more than anyone will type (at most {MAX_TEXT_LENGTH})", path
        )
    fmt = prop.get("format")
    # other formats are annotations JSON Schema does not enforce by default: the field stays plain text
    text_format = TextFormat(fmt) if isinstance(fmt, str) and fmt in TextFormat.__members__.values() else None
    return TextField(
        min_length=min_length,
        max_length=max_length,
        format=text_format,
        pattern=prop.get("pattern"),
        **common,
    )


def _number_field(prop: dict[str, Any], path: str, common: dict[str, Any], *, integer: bool) -> NumberField:
    if "enum" in prop or "oneOf" in prop or "anyOf" in prop:
        raise UnsupportedSchema("choices are only supported between strings", path)
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        bound = prop.get(key)
        # written so that NaN, infinities and ints too big for a float all fail without raising
        if bound is not None and not abs(bound) <= _MAX_BOUND:
            raise UnsupportedSchema(f"{key} must be a finite number", f"{path}.{key}")
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None and low > high:
        raise UnsupportedSchema("minimum is greater than maximum", path)
    if integer and low is not None and high is not None and math.ceil(low) > math.floor(high):
        raise UnsupportedSchema("no whole number lies between minimum and maximum", path)
    return NumberField(integer=integer, minimum=low, maximum=high, **common)


def _multi_field(prop: dict[str, Any], path: str, common: dict[str, Any]) -> MultiChoiceField:
    items = prop.get("items")
    if (
        not isinstance(items, dict)
        or not ("enum" in items or "anyOf" in items or "oneOf" in items)
        or items.get("type", "string") != "string"
    ):
        raise UnsupportedSchema(
            "arrays are only supported as multiple choice: items with a string enum or anyOf", path
        )
    options = _options(items, f"{path}.items")
    min_items, max_items = _bounds(prop, "minItems", "maxItems", path)
    if min_items is not None and min_items > len(options):
        raise UnsupportedSchema(f"minItems {min_items} asks for more than the {len(options)} options", path)
    return MultiChoiceField(options=options, min_items=min_items, max_items=max_items, **common)


def _options(prop: dict[str, Any], path: str) -> tuple[Option, ...]:
    """Options from `enum` (+ `enumNames`) or `oneOf`/`anyOf` of `{const, title}`; first of a value wins."""
    pairs: list[tuple[object, object]]
    if "enum" in prop:
        names = prop.get("enumNames")
        names = names if isinstance(names, list) else []
        pairs = [(value, names[i] if i < len(names) else None) for i, value in enumerate(prop["enum"])]
        where = "enum"
    else:
        where = "oneOf" if "oneOf" in prop else "anyOf"
        entries = prop[where]
        if not all(isinstance(e, dict) and "const" in e for e in entries):
            reason = f"{where} is only supported as a list of {{const, title}}"
            raise UnsupportedSchema(reason, f"{path}.{where}")
        pairs = [(e["const"], e.get("title")) for e in entries]
    options: dict[str, Option] = {}
    for value, title in pairs:
        if not isinstance(value, str):
            reason = f"option values must be strings, not {_clip(repr(value))}"
            raise UnsupportedSchema(reason, f"{path}.{where}")
        options.setdefault(value, Option(value=value, title=_text(title) or value or "(empty)"))
    if where == "oneOf":
        # under oneOf a value listed twice matches two branches, so no answer can ever pick it: not offered
        counts = Counter(value for value, _ in pairs)
        repeated = {value for value, count in counts.items() if count > 1}
        options = {value: option for value, option in options.items() if value not in repeated}
    if not options:
        raise UnsupportedSchema("a choice needs at least one option", f"{path}.{where}")
    return tuple(options.values())


def _bounds(prop: dict[str, Any], low_key: str, high_key: str, path: str) -> tuple[int | None, int | None]:
    # the meta-schema has checked these are non-negative integers (possibly written 3.0)
    low = int(prop[low_key]) if low_key in prop else None
    high = int(prop[high_key]) if high_key in prop else None
    if low is not None and high is not None and low > high:
        raise UnsupportedSchema(f"{low_key} is greater than {high_key}", path)
    return low, high


def _with_default(field: Field, default: object) -> Field:
    if default is None:
        return field
    if isinstance(field, NumberField) and field.integer and isinstance(default, float):
        default = int(default) if default.is_integer() else default  # JSON 7.0 is the integer 7
    if check_value(field, default) is not None:
        return field  # a default that does not fit is dropped, never fatal
    value: Value = list(default) if isinstance(default, list) else default  # type: ignore[assignment]
    return dataclasses.replace(field, default=value)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else text[: _CLIP - 1] + "…"

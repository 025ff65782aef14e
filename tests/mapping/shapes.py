"""Every schema shape the spec allows, with a good answer, a bad one and its reason, and defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Shape:
    """One property schema and how a person's answers to it must fare."""

    id: str
    prop: dict[str, Any]
    good: str
    """Typed text that fits."""
    value: Any
    """What `good` parses to."""
    bad: str
    """Typed text that does not fit..."""
    reason: str
    """...and (a part of) the reason given."""
    default: Any
    """A default that fits (kept)."""
    wrong_default: Any
    """A default that does not fit (dropped)."""


TITLED = [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]

SHAPES = [
    Shape("text", {"type": "string"}, "hello there", "hello there", "", "", "hi", 42),
    Shape(
        "text-max",
        {"type": "string", "maxLength": 20},
        "short",
        "short",
        "x" * 21,
        "at most 20 characters",
        "fits",
        "y" * 21,
    ),
    Shape(
        "text-min",
        {"type": "string", "minLength": 3},
        "abc",
        "abc",
        "ab",
        "at least 3 characters",
        "abcd",
        "a",
    ),
    Shape(
        "email",
        {"type": "string", "format": "email"},
        "ada@example.com",
        "ada@example.com",
        "ada at example",
        "not an email address",
        "bob@example.org",
        "bob",
    ),
    Shape(
        "uri",
        {"type": "string", "format": "uri"},
        "https://example.com/a?b=c",
        "https://example.com/a?b=c",
        "example.com",
        "not a URL",
        "https://a.io",
        "a.io",
    ),
    Shape(
        "date",
        {"type": "string", "format": "date"},
        "2024-02-29",
        "2024-02-29",
        "2023-02-29",
        "not a date",
        "2025-06-18",
        "18/06/2025",
    ),
    Shape(
        "date-time",
        {"type": "string", "format": "date-time"},
        "2025-06-18 14:30Z",
        "2025-06-18T14:30:00Z",
        "2025-06-18 14:30",
        "needs a time zone",
        "2025-06-18T14:30:00+02:00",
        "2025-06-18",
    ),
    Shape(
        "pattern",
        {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
        "ABC-12",
        "ABC-12",
        "abc-12",
        "does not match the required pattern",
        "XYZ-1",
        "XYZ",
    ),
    Shape(
        "number",
        {"type": "number", "minimum": 0, "maximum": 1},
        "0.25",
        0.25,
        "1.5",
        "must be a number between 0 and 1",
        0.5,
        "half",
    ),
    Shape(
        "integer",
        {"type": "integer", "minimum": 1, "maximum": 12},
        "7.0",
        7,
        "7.5",
        "must be a whole number between 1 and 12",
        3,
        True,
    ),
    Shape("boolean", {"type": "boolean"}, "y", True, "maybe", "must be yes or no", False, 1),
    Shape(
        "enum",
        {"type": "string", "enum": ["small", "large"]},
        "Large",
        "large",
        "medium",
        "is not one of the options: small, large",
        "small",
        "medium",
    ),
    Shape(
        "titled-oneOf",
        {"type": "string", "oneOf": TITLED},
        "small",
        "s",
        "medium",
        "is not one of the options: Small, Large",
        "l",
        "Large",
    ),
    Shape(
        "legacy-enumNames",
        {"type": "string", "enum": ["s", "l"], "enumNames": ["Small", "Large"]},
        "2",
        "l",
        "3",
        "is not one of the options: Small, Large",
        "s",
        ["s"],
    ),
    Shape(
        "multi-enum",
        {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 2},
        "c, a",
        ["a", "c"],
        "a, b, c",
        "pick at most 2",
        ["b"],
        ["d"],
    ),
    Shape(
        "multi-min",
        {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2},
        "1, 3",
        ["a", "c"],
        "b",
        "pick at least 2",
        ["a", "b"],
        ["a"],
    ),
    Shape(
        "multi-anyOf",
        {"type": "array", "items": {"anyOf": TITLED}},
        "Large, small",
        ["s", "l"],
        "medium",
        "is not one of the options",
        ["l"],
        "l",
    ),
]

BY_ID = {shape.id: shape for shape in SHAPES}


def form(prop: dict[str, Any], *, required: bool = False, name: str = "f") -> dict[str, Any]:
    """A root schema holding the one property `name`."""
    return {"type": "object", "properties": {name: prop}, "required": [name] if required else []}

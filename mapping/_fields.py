"""The form field types: the closed set of primitives an MCP `requestedSchema` may hold. Pure.

Defined here, below both `schema` (which builds them) and `values` (which checks answers against them), and
re-exported from `mapping.schema`, where the contract places them.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

Value: TypeAlias = str | int | float | bool | list[str]
"""A JSON value a form can produce."""


class TextFormat(enum.StrEnum):
    """The string formats the spec allows."""

    EMAIL = "email"
    URI = "uri"
    DATE = "date"
    DATE_TIME = "date-time"


@dataclass(frozen=True, slots=True)
class Option:
    """One choice: the value sent to the server and the title shown to a person."""

    value: str
    title: str


@dataclass(frozen=True, slots=True, kw_only=True)
class _BaseField:
    name: str
    """The property name: the key in the content sent back."""
    title: str = ""
    """What a person sees: the schema's `title`, else the property name."""
    description: str | None = None
    required: bool = False
    default: Value | None = None
    """Pre-filled value; only ever one that fits the field (a default that does not fit is dropped)."""
    schema: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    """The property's own JSON Schema; answers are also validated against it (keywords beyond the spec's)."""
    checked_in_full: bool = dataclasses.field(default=False, compare=False, repr=False)
    """Whether the field's own rules already enforce every keyword in `schema`, so that validating an answer
    against `schema` as well could reject nothing more (set by `parse_schema`)."""

    def __post_init__(self) -> None:
        if not self.title.strip():
            object.__setattr__(self, "title", self.name if self.name.strip() else "(unnamed field)")


@dataclass(frozen=True, slots=True, kw_only=True)
class TextField(_BaseField):
    """A string: free text, or one of the formats."""

    min_length: int | None = None
    max_length: int | None = None
    format: TextFormat | None = None
    pattern: str | None = None
    """A regex applied with `re.search`, as JSON Schema does; screened for catastrophic backtracking."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NumberField(_BaseField):
    """A number; `integer` for whole numbers."""

    integer: bool = False
    minimum: float | int | None = None
    maximum: float | int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class BoolField(_BaseField):
    """Yes or no."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChoiceField(_BaseField):
    """Exactly one of `options` (plain enum, titled oneOf, or legacy enum + enumNames)."""

    options: tuple[Option, ...] = ()

    def option(self, value: object) -> Option | None:
        """The option whose value is `value`, if any."""
        return next((o for o in self.options if isinstance(value, str) and o.value == value), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class MultiChoiceField(_BaseField):
    """Any number of `options` (an array of enum / anyOf items), within `min_items`..`max_items`."""

    options: tuple[Option, ...] = ()
    min_items: int | None = None
    max_items: int | None = None

    def option(self, value: object) -> Option | None:
        """The option whose value is `value`, if any."""
        return next((o for o in self.options if isinstance(value, str) and o.value == value), None)


Field: TypeAlias = TextField | NumberField | BoolField | ChoiceField | MultiChoiceField
"""Any form field."""


@dataclass(frozen=True, slots=True)
class FormSpec:
    """A parsed form: its fields in schema order, and the schema the final content must validate against."""

    fields: tuple[Field, ...]
    schema: dict[str, Any] = dataclasses.field(default_factory=lambda: {"type": "object"})
    checked_in_full: bool = dataclasses.field(default=False, compare=False, repr=False)
    """Whether checking each field's value (and that the required ones are there) already enforces all of
    `schema`, so that validating the whole content against it could reject nothing more."""

    def field(self, name: str) -> Field:
        """The field called `name`.

        Raises:
            KeyError: there is no such field.
        """
        for candidate in self.fields:
            if candidate.name == name:
                return candidate
        raise KeyError(name)

"""A person's answers: typed text -> JSON values, checks with human reasons, display and hints. Pure.

Nothing here raises for anything a person or a server can send: a bad answer is a `FieldError` value.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, cast

from jsonschema import ValidationError
from jsonschema.exceptions import best_match

from mapping._fields import (
    BoolField,
    ChoiceField,
    Field,
    MultiChoiceField,
    NumberField,
    Option,
    TextField,
    TextFormat,
    Value,
)
from mapping._formats import FORMAT_CHECKS, validator
from mapping._phrases import (
    FORMAT_HINTS,
    FORMAT_REASONS,
    clip,
    length_hint,
    length_reason,
    number_rule,
    number_text,
    titles,
)
from mapping._regex import UnsafePattern, search

__all__ = ["MAX_PATTERN_INPUT", "FieldError", "check_value", "describe", "display_value", "parse_text"]

MAX_PATTERN_INPUT: Final = 500
"""Text checked against a `pattern` is at most this long. RE2 matches in linear time, so this no longer guards
against slow patterns; it stays a documented limit of the form (an answer that long is not typed in a chat)."""
_MAX_NUMBER_TEXT: Final = 100
_MAX_MAGNITUDE: Final = 300
_LARGEST: Final = float(f"1e{_MAX_MAGNITUDE}")
"""Numbers beyond 1e300 are refused: finite as floats, sane as JSON, cheap to print."""
_NUMBER: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_YES: Final = frozenset({"yes", "y", "true", "t", "1", "on"})
_NO: Final = frozenset({"no", "n", "false", "f", "0", "off"})
_NOTHING: Final = frozenset({"", "-", "—", "none", "nothing"})
_DATE_TIME_TYPED: Final = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(\.[0-9]{1,9})?)? ?"
    r"([Zz]|[+-][0-9]{2}:?[0-9]{2})?"
)


@dataclass(frozen=True, slots=True)
class FieldError:
    """Why an answer does not fit its field, for a person: `"must be a whole number between 1 and 12"`."""

    field: str
    """The field's name."""
    reason: str


def parse_text(field: Field, raw: str) -> Value | FieldError:
    """Turn a person's typed text into the field's JSON value, or say why it does not fit. Never raises."""
    if not isinstance(raw, str):
        return FieldError(getattr(field, "name", "?"), "must be typed text")
    text = raw.strip()
    value: Value | FieldError
    match field:
        case TextField():
            value = _typed_text(field, text)
        case NumberField():
            value = _typed_number(field, text)
        case BoolField():
            value = _typed_bool(field, text)
        case ChoiceField():
            option = _find_option(field.options, text)
            value = (
                option.value if isinstance(option, Option) else FieldError(field.name, _about(text, option))
            )
        case MultiChoiceField():
            value = _typed_choices(field, text)
        case _:
            return FieldError(getattr(field, "name", "?"), "is not a form field")
    if isinstance(value, FieldError):
        return value
    error = check_value(field, value)
    return error if error is not None else value


def check_value(field: Field, value: object) -> FieldError | None:
    """Does a typed value (a default, a tapped choice, a parsed answer) fit `field`? Never raises."""
    reason = _reason(field, value)
    if reason is None and field.schema and not field.checked_in_full:
        reason = _schema_reason(field, value)
    return FieldError(field.name, reason) if reason is not None else None


def display_value(field: Field, value: Value | None) -> str:
    """A value as a review card shows it: option titles, `Yes`/`No`, `—` for no value. Never raises."""
    if value is None:
        return "—"
    if isinstance(field, BoolField) and isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(field, ChoiceField):
        option = field.option(value)
        return option.title if option is not None else str(value)
    if isinstance(field, MultiChoiceField) and isinstance(value, list):
        shown = [(o.title if (o := field.option(v)) is not None else str(v)) for v in value]
        return ", ".join(shown) if shown else "none"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return number_text(value)
    return str(value)


def describe(field: Field) -> str:
    """A short hint of what `field` expects: `"a whole number from 1 to 12"`, `"an email address"`."""
    match field:
        case TextField():
            parts = [FORMAT_HINTS[field.format] if field.format is not None else "text"]
            parts.extend(length_hint(field.min_length, field.max_length, "character"))
            if field.pattern is not None:
                parts.append(f"matching {field.pattern}")
            return ", ".join(parts)
        case NumberField():
            return number_rule(field)
        case BoolField():
            return "yes or no"
        case ChoiceField():
            return f"one of: {titles(field.options)}"
        case MultiChoiceField():
            hint = f"any of: {titles(field.options)}"
            pick = length_hint(field.min_items, field.max_items, "")
            return f"{hint} (pick {pick[0]})" if pick else hint
    return "an answer"


def _typed_text(field: TextField, text: str) -> str | FieldError:
    if field.format is TextFormat.DATE_TIME:
        match = _DATE_TIME_TYPED.fullmatch(text)
        if match is None:
            return FieldError(field.name, FORMAT_REASONS[TextFormat.DATE_TIME])
        date, hour, minute, second, fraction, zone = match.groups()
        if zone is None:
            return FieldError(field.name, "needs a time zone: add Z for UTC, or an offset like +02:00")
        if zone not in "Zz" and ":" not in zone:
            zone = f"{zone[:3]}:{zone[3:]}"
        return f"{date}T{hour}:{minute}:{second or '00'}{fraction or ''}{zone.upper()}"
    return text


def _typed_number(field: NumberField, text: str) -> int | float | FieldError:
    text = text.replace("\u2212", "-")  # the minus sign some phone keyboards offer
    if len(text) > _MAX_NUMBER_TEXT or not _NUMBER.fullmatch(text):
        return FieldError(field.name, number_rule(field, must=True))
    number = Decimal(text)
    if number != 0 and number.adjusted() > _MAX_MAGNITUDE:
        return FieldError(field.name, "is too large")
    if field.integer:
        if number != number.to_integral_value():
            return FieldError(field.name, number_rule(field, must=True))
        return int(number)
    if "." in text or "e" in text.lower():
        return float(number)
    return int(number)


def _typed_bool(field: BoolField, text: str) -> bool | FieldError:
    word = text.casefold()
    if word in _YES:
        return True
    if word in _NO:
        return False
    return FieldError(field.name, "must be yes or no")


def _about(text: str, reason: str) -> str:
    """A refusal of typed `text` that says what was typed: "“prod” is not one of the options: ..."."""
    return f"“{clip(text)}” {reason}" if text.strip() else reason


def _find_option(options: tuple[Option, ...], text: str) -> Option | str:
    """The option `text` names (its value, its title, or its 1-based number), else why not."""
    folded = text.casefold()
    rules = (
        lambda o: o.value == text,
        lambda o: o.title == text,
        lambda o: folded in (o.value.casefold(), o.title.casefold()),
    )
    for rule in rules:
        matches = [o for o in options if rule(o)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            return f"matches more than one option ({titles(tuple(matches))}); type its number instead"
    if text.isascii() and text.isdigit() and len(text) <= 9 and 1 <= int(text) <= len(options):
        return options[int(text) - 1]
    return f"is not one of the options: {titles(options)}"


def _typed_choices(field: MultiChoiceField, text: str) -> list[str] | FieldError:
    whole = _find_option(field.options, text)
    if isinstance(whole, Option):
        return [whole.value]
    if text.casefold() in _NOTHING:
        return []
    chosen: set[str] = set()
    for piece in re.split(r"[,\n]", text):
        if not piece.strip():
            continue
        option = _find_option(field.options, piece.strip())
        if not isinstance(option, Option):
            return FieldError(field.name, f"“{clip(piece.strip())}” {option}")
        chosen.add(option.value)
    return [o.value for o in field.options if o.value in chosen]


def _reason(field: Field, value: object) -> str | None:
    match field:
        case TextField():
            return _text_reason(field, value)
        case NumberField():
            if not isinstance(value, int | float) or isinstance(value, bool):
                return number_rule(field, must=True)
            if isinstance(value, float) and not math.isfinite(value):
                return number_rule(field, must=True)
            if abs(value) > _LARGEST:  # exact for ints of any size; math.isfinite would overflow on them
                return "is too large"
            if field.integer and isinstance(value, float) and not value.is_integer():
                return number_rule(field, must=True)
            if (field.minimum is not None and value < field.minimum) or (
                field.maximum is not None and value > field.maximum
            ):
                return number_rule(field, must=True)
            return None
        case BoolField():
            return None if isinstance(value, bool) else "must be yes or no"
        case ChoiceField():
            if field.option(value) is None:
                return f"is not one of the options: {titles(field.options)}"
            return None
        case MultiChoiceField():
            return _choices_reason(field, value)
    return "is not a form field"


def _text_reason(field: TextField, value: object) -> str | None:
    if not isinstance(value, str):
        return "must be text"
    if field.min_length is not None and len(value) < field.min_length:
        return length_reason(field.min_length, field.max_length, "at least")
    if field.max_length is not None and len(value) > field.max_length:
        return length_reason(field.min_length, field.max_length, "at most")
    if field.format is not None and not FORMAT_CHECKS[field.format](value):
        return FORMAT_REASONS[field.format]
    if field.pattern is not None:
        if len(value) > MAX_PATTERN_INPUT:
            return f"at most {MAX_PATTERN_INPUT} characters"
        try:
            if not search(field.pattern, value):
                return f"does not match the required pattern {field.pattern}"
        except UnsafePattern:
            return "cannot be checked: the form's pattern is broken"
    return None


def _choices_reason(field: MultiChoiceField, value: object) -> str | None:
    if not isinstance(value, list):
        return "must be a list of options"
    seen: set[str] = set()
    for item in value:
        option = field.option(item)
        if option is None:
            return f"“{clip(str(item))}” is not one of the options: {titles(field.options)}"
        if item in seen:
            return f"lists {option.title} twice"
        seen.add(item)
    if field.min_items is not None and len(value) < field.min_items:
        return f"pick at least {field.min_items}"
    if field.max_items is not None and len(value) > field.max_items:
        return f"pick at most {field.max_items}"
    return None


def _schema_reason(field: Field, value: object) -> str | None:
    """Keywords the field types do not model (`exclusiveMinimum`, `multipleOf`, ...), via jsonschema."""
    error: ValidationError | None = best_match(validator(field.schema).iter_errors(cast(Any, value)))
    if error is None:
        return None
    expected: Any = error.validator_value
    is_number = isinstance(expected, int | float) and not isinstance(expected, bool)
    shown = number_text(expected) if is_number else None
    reasons = {
        "exclusiveMinimum": f"must be greater than {shown}",
        "exclusiveMaximum": f"must be less than {shown}",
        "multipleOf": f"must be a multiple of {shown}",
        "const": f"must be {display_value(field, expected)}",
        "enum": "is not one of the allowed values",
        "pattern": f"does not match the required pattern {expected}",
        "format": f"is not a valid {expected}",
    }
    return reasons.get(str(error.validator), f"does not fit the form's rules ({clip(error.message)})")

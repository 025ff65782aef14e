"""How values and rules are put into words for a person: hints, reasons, numbers, option lists. Pure."""

from __future__ import annotations

from typing import Final

from mapping._fields import NumberField, Option, TextFormat

LISTED: Final = 10
"""Hints and reasons name at most this many options."""
_HUGE: Final = 1e300
"""Ints above this are not spelled out: str() of a very long int raises."""

FORMAT_REASONS: Final = {
    TextFormat.EMAIL: "not an email address",
    TextFormat.URI: "not a URL (it needs a scheme, like https://example.com)",
    TextFormat.DATE: "not a date (write it as YYYY-MM-DD, like 2025-06-18)",
    TextFormat.DATE_TIME: "not a date and time (write it like 2025-06-18T14:30:00Z)",
}
FORMAT_HINTS: Final = {
    TextFormat.EMAIL: "an email address",
    TextFormat.URI: "a URL (like https://example.com)",
    TextFormat.DATE: "a date (YYYY-MM-DD)",
    TextFormat.DATE_TIME: "a date and time (like 2025-06-18T14:30:00Z)",
}


def number_rule(field: NumberField, *, must: bool = False) -> str:
    """ "a whole number from 1 to 12" (a hint), or "must be a whole number between 1 and 12" (`must`)."""
    kind = "a whole number" if field.integer else "a number"
    low, high = field.minimum, field.maximum
    if low is not None and high is not None:
        low_text, high_text = number_text(low), number_text(high)
        rule = (
            f"{kind} between {low_text} and {high_text}" if must else f"{kind} from {low_text} to {high_text}"
        )
    elif low is not None:
        rule = f"{kind}, at least {number_text(low)}"
    elif high is not None:
        rule = f"{kind}, at most {number_text(high)}"
    else:
        rule = kind
    for key, words in (("exclusiveMinimum", "greater than"), ("exclusiveMaximum", "less than")):
        bound = field.schema.get(key)
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            rule += f", {words} {number_text(bound)}"
    return f"must be {rule}" if must else rule


def length_hint(low: int | None, high: int | None, unit: str) -> list[str]:
    """["3 to 20 characters"], ["at most 2"], or [] when there is no limit."""

    def units(n: int) -> str:
        return f"{n} {unit}{'' if n == 1 else 's'}" if unit else str(n)

    low = low or None  # zero is no lower bound at all
    if low is not None and high is not None:
        return [f"exactly {units(low)}" if low == high else f"{low} to {units(high)}"]
    if low is not None:
        return [f"at least {units(low)}"]
    if high is not None:
        return [f"at most {units(high)}"]
    return []


def length_reason(low: int | None, high: int | None, side: str) -> str:
    """ "at most 20 characters" / "at least 3 characters" / "exactly 5 characters"."""
    if low is not None and low == high:
        return f"exactly {low} character{'' if low == 1 else 's'}"
    n = low if side == "at least" else high
    return f"{side} {n} character{'' if n == 1 else 's'}"


def number_text(value: int | float) -> str:
    """A number as people write it (and as `parse_text` reads it back): 7, 0.5, 1e+20."""
    if isinstance(value, int) and abs(value) > _HUGE:
        return "a huge number"  # str() of a very long int raises
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def titles(options: tuple[Option, ...]) -> str:
    """Option titles, comma-separated, the first few only when there are many."""
    shown = ", ".join(clip(o.title) for o in options[:LISTED])
    return shown if len(options) <= LISTED else f"{shown}, … ({len(options)} options)"


def clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

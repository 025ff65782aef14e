"""The pattern screen: common patterns pass; shapes that backtrack catastrophically are refused."""

from __future__ import annotations

import pytest

from mapping._regex import MAX_PATTERN_LENGTH, UnsafePattern, check_pattern

SAFE = [
    r"^[a-z]+$",
    r"^\d{3}-\d{4}$",
    r"^([a-z0-9-]+\.)+[a-z]{2,}$",
    r"^[\w.+-]+@([\w-]+\.)+[\w-]{2,}$",
    r"^\S+@\S+\.\S+$",
    r"^(\w+\s)*\w+$",
    r"^\w+\s*\w+$",
    r"(\d+,)*\d+",
    r"^(a|bc)+$",
    r"(ab?)*",
    r"^(?:[01]\d|2[0-3]):[0-5]\d$",
    r"^(\+\d{1,3})?\s?\d{6,14}$",
    r"^[^<>]*$",
    r"(?i)^(yes|no)$",
    r"^[A-Z]{2}\d{2}[A-Z0-9]{1,30}$",
    r"^\d*\d*\d*x",
    r"\d*\d*x",
    r"(ab|a)+c",
    r"(cat|dog)s?",
    r"^(?=.*\d)[a-z\d]{8,}$",
    r"[0-9]",
    r"",
]

UNSAFE = [
    (r"^(a+)+$", "nests repetitions"),
    (r"(\w+\s?)+$", "nests repetitions"),
    (r"(a?a)*$", "nests repetitions"),
    (r"(.*a){20}", "nests repetitions"),
    (r"(x+x+)+y", "nests repetitions"),
    (r"^(\w+)*@", "nests repetitions"),
    (r"(a{1,10}){1,10}$", "nests repetitions"),
    (r"((a*)*b)", "nests repetitions"),
    (r"(?=(a+)+)b", "nests repetitions"),
    (r"(?i)(A+a+)+$", "nests repetitions"),
    (r"(\d+5)+$", "nests repetitions"),
    (r"(a|a)+$", "alternatives"),
    (r"(ab|cd|ab)+$", "alternatives"),
    (r"(a|aa)+$", "nests repetitions"),
    (r"(?:(?:a|a){1})+$", "alternatives"),
    (r"(?:x(?:a?a?){1}y)+$", "nests repetitions"),
    (r"\d*\d*\d*x", "chains"),
    (r"^\d*\d*\d*\d*x", "chains"),
    (r"\S+@\S+\.\S+!", "chains"),
    (r"(a)\1", "backreference"),
    (r"(", "not a valid regular expression"),
    ("a" * (MAX_PATTERN_LENGTH + 1), "longer than"),
    ("(" * 200 + "a*" + ")*" * 200, "nests repetitions"),
]


@pytest.mark.parametrize("pattern", SAFE)
def test_common_patterns_pass_the_screen(pattern: str) -> None:
    """Everyday patterns (codes, slugs, emails, phone numbers) are accepted."""
    check_pattern(pattern)


@pytest.mark.parametrize(("pattern", "reason"), UNSAFE)
def test_catastrophic_patterns_are_refused_with_a_reason(pattern: str, reason: str) -> None:
    """Nested or chained repetitions over shared characters, backreferences, broken regexes: refused."""
    with pytest.raises(UnsafePattern, match=reason):
        check_pattern(pattern)


def test_the_screen_errs_on_the_side_of_refusing() -> None:
    """Overlapping alternatives inside a repetition are refused even when re would cope (a trade-off)."""
    with pytest.raises(UnsafePattern, match="alternatives"):
        check_pattern(r"(a|ab|abc)*$")

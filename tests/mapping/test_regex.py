"""Server patterns run on RE2: everyday patterns pass and match as before, patterns that made `re` backtrack
catastrophically are matched (in linear time), and what RE2 cannot run is refused with a reason."""

from __future__ import annotations

import pytest

from mapping._regex import MAX_PATTERN_LENGTH, UnsafePattern, check_pattern, search

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
    r"^[\u0400-\u04FF]+$",
    r"[0-9]",
    r"",
]

EVIL = "a" * 100_000 + "!"
"""Far longer than any text `re` could finish on with `(a+)+$` (2**40 steps for 40 characters)."""
FORMERLY_CATASTROPHIC = [
    (r"^(a+)+$", EVIL, False),
    (r"^(a+)+$", "a" * 100_000, True),
    (r"(a+)+$", EVIL, False),
    (r"(\w+\s?)+$", EVIL, False),
    (r"(a?a)*$", EVIL, True),  # the empty match at the end
    (r"(a|a)+$", EVIL, False),
    (r"(a|aa)+$", EVIL, False),
    (r"(x+x+)+y", "x" * 100_000, False),
    (r"\d*\d*\d*\d*x", "1" * 100_000, False),
    (r"\S+@\S+\.\S+!", "@" * 100_000, False),
]
"""Shapes the old screen refused because Python's `re` backtracks on them exponentially (or polynomially)."""

REFUSED = [
    (r"(a)\1", "backreference"),
    (r"(?<name>a)\k<name>", "backreference"),
    (r"^(?=.*\d)[a-z\d]{8,}$", "lookahead"),
    (r"(?!x)y", "lookahead"),
    (r"(?<=x)y", "lookbehind"),
    (r"(?<!x)y", "lookbehind"),
    (r"(", "not a valid regular expression"),
    (r"a++", "not a valid regular expression"),
    (r"\p{L}{1,1000}", "too large"),
    ("\ud800", "not valid Unicode"),
    ("a" * (MAX_PATTERN_LENGTH + 1), "longer than"),
]


@pytest.mark.parametrize("pattern", SAFE)
def test_common_patterns_pass(pattern: str) -> None:
    """Everyday patterns (codes, slugs, emails, phone numbers, a script's range) are accepted."""
    check_pattern(pattern)


@pytest.mark.parametrize(("pattern", "text", "found"), FORMERLY_CATASTROPHIC)
def test_patterns_that_made_re_backtrack_are_accepted_and_answered(
    pattern: str, text: str, found: bool
) -> None:
    """RE2 does not backtrack: nested and chained repetitions are ordinary patterns, answered on long text."""
    check_pattern(pattern)
    assert search(pattern, text) is found


@pytest.mark.parametrize(("pattern", "reason"), REFUSED)
def test_what_re2_cannot_run_is_refused_with_a_reason(pattern: str, reason: str) -> None:
    """Backreferences and lookaround (which need backtracking), broken and oversized patterns: refused."""
    with pytest.raises(UnsafePattern, match=reason):
        check_pattern(pattern)
    with pytest.raises(UnsafePattern, match=reason):
        search(pattern, "x")


def test_a_refusal_quotes_a_long_pattern_clipped() -> None:
    """RE2's message quotes the pattern from where it fails; the reason a person reads stays short."""
    with pytest.raises(UnsafePattern) as caught:
        check_pattern("(" + "a" * 900)
    assert len(str(caught.value)) < 120


@pytest.mark.parametrize(
    ("pattern", "text", "found"),
    [
        ("[0-9]", "abc1def", True),  # unanchored, as JSON Schema says
        ("^[0-9]+$", "12a", False),
        (r"^\d+$", "٣", False),  # ECMA-262's \d is ASCII (Python's `re` said yes)
        (r"^\w+$", "é", False),  # so is \w
        (r"^a$", "a\n", False),  # $ is the end, not before a final newline (`re` said yes)
        (r"^[\u0400-\u04FF]+$", "Привет", True),  # ECMA-262's \uXXXX
        (r"^\\u0041$", "\\u0041", True),  # an escaped backslash, then the letters
        (r"^\\u0041$", "A", False),
        (r"(?i)^(yes|no)$", "YES", True),
        ("a", "\ud800a", False),  # a lone surrogate cannot be matched: no answer, never a crash
    ],
)
def test_patterns_match_as_ecma_262_says(pattern: str, text: str, found: bool) -> None:
    """Search semantics, ASCII classes and ECMA-262 escapes, the way a JSON Schema validator reads them."""
    assert search(pattern, text) is found

"""parse_text, check_value, display_value, describe: typed answers, human reasons, and what a card shows."""

from __future__ import annotations

from typing import Any

import pytest

from mapping import (
    MAX_PATTERN_INPUT,
    BoolField,
    ChoiceField,
    FieldError,
    MultiChoiceField,
    NumberField,
    Option,
    TextField,
    TextFormat,
    check_value,
    describe,
    display_value,
    parse_schema,
    parse_text,
)
from tests.mapping.shapes import SHAPES, Shape, form


def field_of(prop: dict[str, Any]) -> Any:
    return parse_schema(form(prop)).fields[0]


INTEGER = NumberField(name="n", integer=True, minimum=1, maximum=12)
NUMBER = NumberField(name="x")
BOOL = BoolField(name="b")
SIZES = ChoiceField(name="size", options=(Option("s", "Small"), Option("m", "Medium"), Option("l", "Large")))
COLOURS = MultiChoiceField(
    name="colours",
    options=(Option("r", "Red"), Option("g", "Green"), Option("dr", "Red, dark"), Option("b", "Blue")),
    max_items=3,
)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_accepts_good_input(shape: Shape) -> None:
    """The shape's good answer parses to the expected JSON value."""
    assert parse_text(field_of(shape.prop), shape.good) == shape.value


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.reason], ids=lambda s: s.id)
def test_each_shape_refuses_bad_input_with_a_reason(shape: Shape) -> None:
    """The shape's bad answer is a FieldError whose reason a person can act on."""
    result = parse_text(field_of(shape.prop), shape.bad)
    assert isinstance(result, FieldError)
    assert result.field == "f"
    assert shape.reason in result.reason


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("yes", True),
        ("Y", True),
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("on", True),
        (" yes ", True),
        ("no", False),
        ("n", False),
        ("False", False),
        ("0", False),
        ("off", False),
    ],
)
def test_booleans_accept_the_spellings_people_type(raw: str, value: bool) -> None:
    """yes/no/y/n/true/false/1/0/on/off, any case, surrounding spaces ignored."""
    assert parse_text(BOOL, raw) is value


@pytest.mark.parametrize(
    ("raw", "value"),
    [("7", 7), ("7.0", 7), ("+7", 7), (" 12 ", 12), ("1e1", 10), ("1.", 1), ("\u22121e0", None)],
)
def test_integers_accept_exact_whole_numbers(raw: str, value: int | None) -> None:
    """ "7" and "7.0" are 7; the phone keyboard minus sign reads as minus (and -1 is out of range here)."""
    result = parse_text(INTEGER, raw)
    if value is None:
        assert result == FieldError("n", "must be a whole number between 1 and 12")
    else:
        assert result == value
        assert type(result) is int


@pytest.mark.parametrize(
    "raw", ["7.5", "seven", "", "1,000", "1_0", "١٢", "0x7", "7e-1", "nan", "inf", "13", "0", "-1", "1e999"]
)
def test_integers_refuse_everything_else_with_the_range(raw: str) -> None:
    """Fractions, words, separators, non-ASCII digits, hex, NaN, infinities, out-of-range: all refused."""
    result = parse_text(INTEGER, raw)
    assert isinstance(result, FieldError)
    assert result.reason in ("must be a whole number between 1 and 12", "is too large")


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("0.5", 0.5),
        (".5", 0.5),
        ("3", 3),
        ("-2.25", -2.25),
        ("1e3", 1000.0),
        ("1E-2", 0.01),
        ("5e-324", 5e-324),
    ],
)
def test_numbers_accept_decimals_and_exponents(raw: str, value: float) -> None:
    """Plain decimals and scientific notation; integers stay ints."""
    result = parse_text(NUMBER, raw)
    assert result == value
    assert type(result) is type(value)


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-Infinity", "1e400", "1,5", "½", "12abc", "--1"])
def test_numbers_refuse_nan_infinity_and_junk(raw: str) -> None:
    """Nothing that is not a finite JSON number gets through."""
    assert isinstance(parse_text(NUMBER, raw), FieldError)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        (INTEGER, True, "must be a whole number between 1 and 12"),
        (INTEGER, 7.5, "must be a whole number between 1 and 12"),
        (INTEGER, "7", "must be a whole number between 1 and 12"),
        (NUMBER, float("nan"), "must be a number"),
        (NUMBER, float("-inf"), "must be a number"),
        (NUMBER, 10**400, "is too large"),
        (BOOL, 1, "must be yes or no"),
        (BOOL, "yes", "must be yes or no"),
        (SIZES, "Small", "is not one of the options: Small, Medium, Large"),
        (SIZES, 1, "is not one of the options: Small, Medium, Large"),
        (COLOURS, "r", "must be a list of options"),
        (COLOURS, ["r", "r"], "lists Red twice"),
        (COLOURS, ["r", "g", "b", "dr"], "pick at most 3"),
        (COLOURS, ["x"], "“x” is not one of the options"),
        (TextField(name="t"), 5, "must be text"),
    ],
)
def test_check_value_refuses_values_of_the_wrong_type_or_range(
    field: Any, value: object, reason: str
) -> None:
    """True is not an integer, 1 is not a boolean, NaN is not a number, titles are not values."""
    error = check_value(field, value)
    assert error is not None
    assert error.reason.startswith(reason)


@pytest.mark.parametrize(("field", "value"), [(INTEGER, 7.0), (INTEGER, 12), (NUMBER, -0.0), (BOOL, False)])
def test_check_value_accepts_values_that_fit(field: Any, value: object) -> None:
    """Whole floats are integers in JSON; the bounds are inclusive."""
    assert check_value(field, value) is None


@pytest.mark.parametrize(
    ("field", "reason"),
    [
        (TextField(name="t", max_length=20), "at most 20 characters"),
        (TextField(name="t", max_length=1), "at most 1 character"),
        (TextField(name="t", min_length=3), "at least 3 characters"),
        (TextField(name="t", min_length=2, max_length=2), "exactly 2 characters"),
    ],
)
def test_length_reasons_read_as_plain_sentences(field: TextField, reason: str) -> None:
    """Length reasons say the limit in characters, singular or plural."""
    bad = "x" * ((field.max_length or 0) + 1) if field.max_length and not field.min_length else "x"
    error = check_value(field, bad)
    assert error is not None
    assert error.reason == reason


@pytest.mark.parametrize(
    ("fmt", "good", "bad"),
    [
        (
            TextFormat.EMAIL,
            ["a@b.co", "first.last+tag@sub.example.org", "x_y@ex-ample.io"],
            ["a", "a@b", "a@@b.co", "a b@c.io", "@b.co", "a@.co", "a@b.c", ".a@b.co", "a..b@c.io", "é@b.co"],
        ),
        (
            TextFormat.URI,
            ["https://example.com", "http://a.io/p?q=1#f", "mailto:a@b.co", "urn:isbn:0451450523"],
            [
                "example.com",
                "https://",
                "https:",
                "http://exa mple.com",
                "https://[::1",
                "/relative",
                "é://x",
            ],
        ),
        (
            TextFormat.DATE,
            ["2025-06-18", "2024-02-29", "0001-01-01"],
            ["2023-02-29", "2025-13-01", "20250618", "2025-6-18", "18/06/2025", "2025-W25-3"],
        ),
        (
            TextFormat.DATE_TIME,
            ["2025-06-18T14:30:00Z", "2025-06-18T14:30:00.123+02:00", "2016-12-31T23:59:60Z"],
            ["2025-06-18", "2025-06-18T14:30:00", "2025-06-18T24:00:00Z", "2025-06-18T14:30:00+25:00"],
        ),
    ],
)
def test_formats_are_checked_strictly(fmt: TextFormat, good: list[str], bad: list[str]) -> None:
    """Each format accepts real examples and refuses look-alikes."""
    field = TextField(name="t", format=fmt)
    assert [v for v in good if check_value(field, v) is not None] == []
    assert [v for v in bad if check_value(field, v) is None] == []


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("2025-06-18T14:30:00Z", "2025-06-18T14:30:00Z"),
        ("2025-06-18 14:30Z", "2025-06-18T14:30:00Z"),
        ("2025-06-18t14:30:05.5z", "2025-06-18T14:30:05.5Z"),
        ("2025-06-18 14:30 +0200", "2025-06-18T14:30:00+02:00"),
        ("2025-06-18T14:30-05:30", "2025-06-18T14:30:00-05:30"),
    ],
)
def test_typed_date_times_are_normalised_to_rfc_3339(raw: str, value: str) -> None:
    """A space for T, missing seconds, lowercase z and +HHMM offsets are accepted and normalised."""
    assert parse_text(TextField(name="t", format=TextFormat.DATE_TIME), raw) == value


def test_a_date_time_without_a_zone_asks_for_one() -> None:
    """No zone is never guessed: the reason says how to add one."""
    result = parse_text(TextField(name="t", format=TextFormat.DATE_TIME), "2025-06-18 14:30")
    assert result == FieldError("t", "needs a time zone: add Z for UTC, or an offset like +02:00")


def test_patterns_use_search_semantics() -> None:
    """JSON Schema patterns are not anchored: "[0-9]" matches anywhere."""
    field = TextField(name="t", pattern="[0-9]")
    assert parse_text(field, "abc1def") == "abc1def"
    assert isinstance(parse_text(field, "abcdef"), FieldError)


def test_text_checked_against_a_pattern_is_capped() -> None:
    """Long answers are not fed to a pattern at all (bounds regex cost)."""
    field = TextField(name="t", pattern="a")
    assert parse_text(field, "a" * MAX_PATTERN_INPUT) == "a" * MAX_PATTERN_INPUT
    assert parse_text(field, "a" * (MAX_PATTERN_INPUT + 1)) == FieldError(
        "t", f"at most {MAX_PATTERN_INPUT} characters"
    )


def test_a_broken_pattern_on_a_hand_built_field_is_a_reason_not_a_crash() -> None:
    """Fields built by hand skip parse_schema's screening; a bad regex still never raises."""
    assert parse_text(TextField(name="t", pattern="("), "x") == FieldError(
        "t", "cannot be checked: the form's pattern is broken"
    )


def test_text_is_stripped_and_may_be_empty_when_allowed() -> None:
    """Surrounding spaces go; an empty answer is refused only by a minimum length."""
    assert parse_text(TextField(name="t"), "  hi  ") == "hi"
    assert parse_text(TextField(name="t"), "   ") == ""
    assert parse_text(TextField(name="t", min_length=1), "   ") == FieldError("t", "at least 1 character")


@pytest.mark.parametrize(
    ("raw", "value"), [("s", "s"), ("Medium", "m"), ("LARGE", "l"), ("2", "m"), (" small ", "s")]
)
def test_choices_match_value_title_case_insensitively_or_number(raw: str, value: str) -> None:
    """An option is named by its value, its title (any case) or its 1-based number."""
    assert parse_text(SIZES, raw) == value


@pytest.mark.parametrize("raw", ["0", "4", "Mediums", "", "1.0"])
def test_choices_refuse_unknown_names_and_numbers(raw: str) -> None:
    """Numbers outside the list and near-misses are refused, saying what was typed and listing the options."""
    said = f"“{raw}” " if raw else ""
    assert parse_text(SIZES, raw) == FieldError(
        "size", said + "is not one of the options: Small, Medium, Large"
    )


def test_ambiguous_titles_ask_for_the_number() -> None:
    """Two options with the same title cannot be told apart by it: the reason says to use the number."""
    twins = ChoiceField(name="c", options=(Option("a", "Same"), Option("b", "Same")))
    result = parse_text(twins, "same")
    assert isinstance(result, FieldError)
    assert "type its number instead" in result.reason
    assert parse_text(twins, "2") == "b"


def test_an_exact_value_beats_a_number() -> None:
    """When option values are digits, typing one means that value, not that position."""
    digits = ChoiceField(name="c", options=(Option("2", "Two"), Option("1", "One")))
    assert parse_text(digits, "1") == "1"


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("r, g", ["r", "g"]),
        ("Blue, red", ["r", "b"]),
        ("4,1", ["r", "b"]),
        ("Red, dark", ["dr"]),
        ("red\ngreen", ["r", "g"]),
        ("r, r, g", ["r", "g"]),
        ("none", []),
        ("", []),
    ],
)
def test_multi_choice_reads_comma_separated_names_in_option_order(raw: str, value: list[str]) -> None:
    """Commas or new lines separate picks; a title with a comma still matches whole; none is empty."""
    assert parse_text(COLOURS, raw) == value


def test_multi_choice_names_the_piece_it_does_not_know() -> None:
    """The reason quotes the unknown piece."""
    result = parse_text(COLOURS, "red, purple")
    assert isinstance(result, FieldError)
    assert result.reason.startswith("“purple” is not one of the options")


def test_parse_text_never_raises_on_forged_input() -> None:
    """Non-string input (a forged callback) is a FieldError, not a crash."""
    for field in (INTEGER, BOOL, SIZES, COLOURS, TextField(name="t")):
        assert isinstance(parse_text(field, None), FieldError)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        (BOOL, True, "Yes"),
        (BOOL, False, "No"),
        (INTEGER, None, "—"),
        (INTEGER, 7, "7"),
        (NUMBER, 2.0, "2"),
        (NUMBER, 0.1, "0.1"),
        (NUMBER, 1e20, "1e+20"),
        (SIZES, "m", "Medium"),
        (SIZES, "zz", "zz"),
        (COLOURS, ["r", "dr"], "Red, Red, dark"),
        (COLOURS, [], "none"),
        (TextField(name="t"), "hello", "hello"),
    ],
)
def test_display_value_shows_what_a_person_recognises(field: Any, value: Any, shown: str) -> None:
    """Option titles, Yes/No, plain numbers, and a dash for no value."""
    assert display_value(field, value) == shown


@pytest.mark.parametrize(
    ("field", "hint"),
    [
        (INTEGER, "a whole number from 1 to 12"),
        (NumberField(name="x", minimum=0), "a number, at least 0"),
        (NumberField(name="x", maximum=2.5), "a number, at most 2.5"),
        (NUMBER, "a number"),
        (BOOL, "yes or no"),
        (SIZES, "one of: Small, Medium, Large"),
        (COLOURS, "any of: Red, Green, Red, dark, Blue (pick at most 3)"),
        (
            MultiChoiceField(name="m", options=SIZES.options, min_items=1, max_items=2),
            "any of: Small, Medium, Large (pick 1 to 2)",
        ),
        (TextField(name="t"), "text"),
        (TextField(name="t", min_length=0, max_length=20), "text, at most 20 characters"),
        (TextField(name="t", min_length=3, max_length=20), "text, 3 to 20 characters"),
        (TextField(name="t", format=TextFormat.EMAIL), "an email address"),
        (TextField(name="t", format=TextFormat.DATE), "a date (YYYY-MM-DD)"),
        (TextField(name="t", pattern="^[A-Z]+$"), "text, matching ^[A-Z]+$"),
    ],
)
def test_describe_gives_a_short_hint(field: Any, hint: str) -> None:
    """What is expected, in a few words."""
    assert describe(field) == hint


def test_describe_shortens_long_option_lists() -> None:
    """A thousand options are not all spelled out."""
    field = ChoiceField(name="c", options=tuple(Option(f"v{i}", f"V{i}") for i in range(1000)))
    assert describe(field).endswith("… (1000 options)")
    assert len(describe(field)) < 200


def test_describe_mentions_exclusive_bounds_from_the_schema() -> None:
    """exclusiveMinimum is part of the hint and of the reason."""
    field = field_of({"type": "integer", "exclusiveMinimum": 0, "maximum": 9})
    assert describe(field) == "a whole number, at most 9, greater than 0"
    assert parse_text(field, "0") == FieldError("f", "must be greater than 0")


def test_multiple_of_is_enforced_with_a_reason() -> None:
    """multipleOf (not modelled by NumberField) is still checked, with its own reason."""
    field = field_of({"type": "integer", "multipleOf": 5})
    assert parse_text(field, "10") == 10
    assert parse_text(field, "12") == FieldError("f", "must be a multiple of 5")

"""parse_schema: each allowed shape becomes the right field; anything else is refused with a reason."""

from __future__ import annotations

import math
from typing import Any

import pytest

from mapping import (
    BoolField,
    ChoiceField,
    FormSpec,
    MultiChoiceField,
    NumberField,
    Option,
    TextField,
    TextFormat,
    UnsupportedSchema,
    check_value,
    parse_schema,
)
from tests.mapping.shapes import SHAPES, TITLED, Shape, form

KINDS = {
    "text": TextField,
    "text-max": TextField,
    "text-min": TextField,
    "email": TextField,
    "uri": TextField,
    "date": TextField,
    "date-time": TextField,
    "pattern": TextField,
    "number": NumberField,
    "integer": NumberField,
    "boolean": BoolField,
    "enum": ChoiceField,
    "titled-oneOf": ChoiceField,
    "legacy-enumNames": ChoiceField,
    "multi-enum": MultiChoiceField,
    "multi-min": MultiChoiceField,
    "multi-anyOf": MultiChoiceField,
}


def only_field(schema: dict[str, Any]) -> Any:
    spec = parse_schema(schema)
    assert len(spec.fields) == 1
    return spec.fields[0]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_parses_into_its_field_kind(shape: Shape) -> None:
    """Each allowed shape becomes the field type that mirrors it."""
    assert type(only_field(form(shape.prop))) is KINDS[shape.id]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_keeps_a_default_that_fits(shape: Shape) -> None:
    """A default of the right type and within the constraints is pre-filled."""
    field = only_field(form({**shape.prop, "default": shape.default}))
    assert field.default == shape.default


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_drops_a_default_that_does_not_fit(shape: Shape) -> None:
    """A default that does not fit is dropped, never fatal."""
    field = only_field(form({**shape.prop, "default": shape.wrong_default}))
    assert field.default is None


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("required", [True, False])
def test_each_shape_records_whether_it_is_required(shape: Shape, required: bool) -> None:
    """`required` on the root decides the field's `required`."""
    assert only_field(form(shape.prop, required=required)).required is required


def test_text_fields_carry_lengths_formats_and_patterns() -> None:
    """minLength, maxLength, format and pattern land on the TextField."""
    field = only_field(
        form({"type": "string", "minLength": 2, "maxLength": 9, "format": "email", "pattern": "@"})
    )
    assert (field.min_length, field.max_length, field.format, field.pattern) == (2, 9, TextFormat.EMAIL, "@")


def test_number_fields_carry_kind_and_bounds() -> None:
    """integer vs number, minimum and maximum land on the NumberField."""
    field = only_field(form({"type": "integer", "minimum": -3, "maximum": 3.5}))
    assert (field.integer, field.minimum, field.maximum) == (True, -3, 3.5)
    assert only_field(form({"type": "number"})).integer is False


def test_titles_and_descriptions_come_from_the_schema_else_the_name() -> None:
    """title falls back to the property name; a blank description is none."""
    spec = parse_schema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "string", "title": "Your name", "description": "As on your passport"},
                "b": {"type": "string", "description": "   "},
            },
        }
    )
    assert (spec.field("a").title, spec.field("a").description) == ("Your name", "As on your passport")
    assert (spec.field("b").title, spec.field("b").description) == ("b", None)


def test_titled_options_keep_their_titles() -> None:
    """oneOf {const, title} gives options with those titles."""
    assert only_field(form({"type": "string", "oneOf": TITLED})).options == (
        Option("s", "Small"),
        Option("l", "Large"),
    )


def test_legacy_enum_names_title_the_options_and_fall_back_to_values() -> None:
    """enumNames titles options by position; missing or non-string names fall back to the value."""
    field = only_field(form({"type": "string", "enum": ["a", "b", "c"], "enumNames": ["Apple", 7]}))
    assert field.options == (Option("a", "Apple"), Option("b", "b"), Option("c", "c"))


def test_duplicate_option_values_are_dropped_keeping_the_first() -> None:
    """A repeated value keeps its first occurrence (and that one's title), in enum, enumNames and anyOf."""
    enum = only_field(form({"type": "string", "enum": ["a", "b", "a"], "enumNames": ["A", "B", "Again"]}))
    assert enum.options == (Option("a", "A"), Option("b", "B"))
    multi = only_field(
        form({"type": "array", "items": {"anyOf": [*TITLED, {"const": "s", "title": "Again"}]}})
    )
    assert multi.options == (Option("s", "Small"), Option("l", "Large"))


def test_a_thousand_option_enum_is_fine() -> None:
    """Big enums parse, keep their order, and take a default from the far end."""
    values = [f"v{i}" for i in range(1000)]
    field = only_field(form({"type": "string", "enum": values, "default": "v999"}))
    assert [o.value for o in field.options] == values
    assert field.default == "v999"


def test_multi_choice_fields_carry_item_bounds() -> None:
    """minItems and maxItems land on the MultiChoiceField."""
    field = only_field(
        form({"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2})
    )
    assert (field.min_items, field.max_items) == (1, 2)
    assert [o.value for o in field.options] == ["a", "b", "c"]


def test_no_schema_is_a_form_with_no_fields() -> None:
    """None (a request without requestedSchema) is a plain confirm."""
    spec = parse_schema(None)
    assert spec == FormSpec(fields=(), schema={"type": "object"})


@pytest.mark.parametrize("schema", [{"type": "object"}, {"type": "object", "properties": {}}, {}])
def test_an_object_without_properties_is_a_form_with_no_fields(schema: dict[str, Any]) -> None:
    """An empty object schema (or one with no type at all) is also a plain confirm."""
    assert parse_schema(schema).fields == ()


def test_fields_keep_schema_order() -> None:
    """Fields come in the order the properties are written."""
    props = {name: {"type": "string"} for name in ["zeta", "alpha", "mid"]}
    assert [f.name for f in parse_schema({"type": "object", "properties": props}).fields] == [
        "zeta",
        "alpha",
        "mid",
    ]


@pytest.mark.parametrize("name", ["", " ", "a.b", "__proto__", "😀", "x" * 1000, "properties", "$ref", "1"])
def test_odd_property_names_are_kept_verbatim(name: str) -> None:
    """Any string is a property name; blank ones get a readable title."""
    field = only_field(form({"type": "string"}, name=name, required=True))
    assert field.name == name
    assert field.title.strip()


def test_the_spec_keeps_a_copy_of_the_schema() -> None:
    """Changing the caller's dict afterwards does not change the parsed form's schema."""
    schema = form({"type": "string"})
    spec = parse_schema(schema)
    schema["properties"]["f"]["type"] = "integer"
    assert spec.schema["properties"]["f"]["type"] == "string"


def test_an_enum_without_a_type_is_a_string_choice() -> None:
    """`type` may be left out of an enum; it is still a single choice."""
    assert isinstance(only_field(form({"enum": ["a", "b"]})), ChoiceField)


def test_unknown_formats_leave_a_plain_text_field() -> None:
    """Formats beyond the spec's four are annotations: the field is plain text."""
    assert only_field(form({"type": "string", "format": "uuid"})).format is None


@pytest.mark.parametrize(
    ("default", "kept"),
    [
        (7.0, 7),
        (True, None),
        (float("nan"), None),
        (float("inf"), None),
        (10**400, None),
        ("x" * 100_000, None),
        ([1, 2], None),
        (None, None),
    ],
)
def test_integer_defaults_must_be_whole_finite_numbers(default: object, kept: object) -> None:
    """7.0 is the integer 7; booleans, NaN, infinities, huge ints and other types are dropped."""
    field = only_field(form({"type": "integer", "default": default}))
    assert field.default == kept
    assert type(field.default) is type(kept)


def test_json_1_is_not_a_boolean_default() -> None:
    """bool-vs-int confusion: 1 and 0 are not booleans."""
    assert only_field(form({"type": "boolean", "default": 1})).default is None
    assert only_field(form({"type": "boolean", "default": 0})).default is None
    assert only_field(form({"type": "boolean", "default": True})).default is True


def test_multi_choice_defaults_must_be_lists_of_known_unique_options() -> None:
    """Multi defaults that are not lists, name unknown options, repeat one or break the bounds are dropped."""
    prop = {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2}
    for wrong in ["a", ["a", "a"], ["z"], ["a", "b", "c"], [1]]:
        assert only_field(form({**prop, "default": wrong})).default is None
    assert only_field(form({**prop, "default": ["c", "a"]})).default == ["c", "a"]


def test_extra_keywords_are_enforced_per_field() -> None:
    """Keywords the field types do not model still constrain answers (via the property's own schema)."""
    field = only_field(form({"type": "number", "exclusiveMinimum": 0, "default": 0}))
    assert field.default is None
    error = check_value(field, 0)
    assert error is not None
    assert error.reason == "must be greater than 0"


REFUSED: list[tuple[str, Any, str, str]] = [
    ("root-list", [], "must be a JSON object", ""),
    ("root-string", "object", "must be a JSON object", ""),
    ("root-array", {"type": "array", "items": {"type": "string"}}, "root must be an object", "type"),
    ("root-ref", {"$ref": "#/$defs/x", "$defs": {"x": {"type": "object"}}}, "$ref", "$ref"),
    ("root-anyOf", {"type": "object", "anyOf": [{"required": ["a"]}]}, "anyOf", "anyOf"),
    (
        "nested-object",
        form({"type": "object", "properties": {"x": {"type": "string"}}}),
        "nested objects",
        "properties.f",
    ),
    (
        "array-of-strings",
        form({"type": "array", "items": {"type": "string"}}),
        "only supported as multiple choice",
        "properties.f",
    ),
    (
        "array-of-objects",
        form({"type": "array", "items": {"type": "object"}}),
        "only supported as multiple choice",
        "properties.f",
    ),
    (
        "array-of-int-enum",
        form({"type": "array", "items": {"type": "integer", "enum": [1]}}),
        "multiple choice",
        "properties.f",
    ),
    ("null-type", form({"type": "null"}), "type null is not supported", "properties.f.type"),
    ("type-list", form({"type": ["string", "null"]}), "is not supported", "properties.f.type"),
    ("unknown-type", form({"type": "strin"}), "not valid JSON Schema", "properties.f.type"),
    ("no-type", form({"title": "x"}), "has no type", "properties.f"),
    ("boolean-schema", form(True), "must be a schema object", "properties.f"),  # type: ignore[arg-type]  # on purpose
    ("property-ref", form({"$ref": "#/$defs/x"}), "$ref is not supported", "properties.f.$ref"),
    ("non-string-title", form({"type": "string", "title": 5}), "not valid JSON Schema", "properties.f.title"),
    (
        "negative-minLength",
        form({"type": "string", "minLength": -1}),
        "not valid JSON Schema",
        "properties.f.minLength",
    ),
    (
        "bad-regex",
        form({"type": "string", "pattern": "(unclosed"}),
        "not valid JSON Schema",
        "properties.f.pattern",
    ),
    (
        "lookahead-regex",
        form({"type": "string", "pattern": "^(?=.*[0-9])[a-z0-9]{8,}$"}),
        "lookahead",
        "properties.f.pattern",
    ),
    (
        "nested-regex",
        form({"type": "string", "not": {"allOf": [{"pattern": "(a)\\1"}]}}),
        "backreference",
        "properties.f.not.allOf.0.pattern",
    ),
    (
        "root-nested-regex",
        {"type": "object", "properties": {}, "propertyNames": {"pattern": "(?<=a)b"}},
        "lookbehind",
        "propertyNames.pattern",
    ),
    (
        "patternProperties",
        {"type": "object", "properties": {}, "patternProperties": {"^x": {"type": "string"}}},
        "patternProperties",
        "patternProperties",
    ),
    ("backreference", form({"type": "string", "pattern": "(a)\\1"}), "backreference", "properties.f.pattern"),
    ("zero-options", form({"type": "string", "enum": []}), "at least one option", "properties.f.enum"),
    ("zero-oneOf", form({"type": "string", "oneOf": []}), "not valid JSON Schema", "properties.f.oneOf"),
    (
        "int-enum",
        form({"type": "string", "enum": ["a", 1]}),
        "option values must be strings",
        "properties.f.enum",
    ),
    (
        "number-enum",
        form({"type": "number", "enum": [1, 2]}),
        "only supported between strings",
        "properties.f",
    ),
    (
        "oneOf-without-const",
        form({"type": "string", "oneOf": [{"type": "string"}]}),
        "{const, title}",
        "properties.f.oneOf",
    ),
    (
        "required-missing",
        {"type": "object", "properties": {}, "required": ["ghost"]},
        "does not exist",
        "required",
    ),
    ("nan-minimum", form({"type": "number", "minimum": float("nan")}), "finite", "properties.f.minimum"),
    ("inf-maximum", form({"type": "number", "maximum": float("inf")}), "finite", "properties.f.maximum"),
    ("huge-int-bound", form({"type": "integer", "maximum": 10**400}), "finite", "properties.f.maximum"),
    (
        "min-over-max",
        form({"type": "number", "minimum": 2, "maximum": 1}),
        "greater than maximum",
        "properties.f",
    ),
    (
        "no-whole-number",
        form({"type": "integer", "minimum": 1.2, "maximum": 1.8}),
        "no whole number",
        "properties.f",
    ),
    (
        "minLength-over-maxLength",
        form({"type": "string", "minLength": 5, "maxLength": 2}),
        "greater than",
        "properties.f",
    ),
    (
        "enormous-minLength",
        form({"type": "string", "minLength": 10**9}),
        "more than anyone will type",
        "properties.f",
    ),
    (
        "minItems-over-options",
        form({"type": "array", "items": {"enum": ["a"]}, "minItems": 2}),
        "more than the 1 options",
        "properties.f",
    ),
    (
        "set-value",
        form({"type": "string", "enum": {"a", "b"}}),
        "set is not a JSON value",
        "properties.f.enum",
    ),
    (
        "int-key",
        {"type": "object", "properties": {1: {"type": "string"}}},
        "keys must be strings",
        "properties",
    ),
]


@pytest.mark.parametrize(("schema", "reason", "path"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_schemas_the_spec_does_not_allow_are_refused_with_the_reason(
    schema: Any, reason: str, path: str
) -> None:
    """Nested objects, arrays of non-enums, unknown types, broken JSON Schema...: refused, never a form."""
    with pytest.raises(UnsupportedSchema) as caught:
        parse_schema(schema)
    assert reason in caught.value.reason
    assert caught.value.path == path


def test_a_schema_that_contains_itself_is_refused() -> None:
    """A cyclic dict is refused, not a RecursionError."""
    prop: dict[str, Any] = {"type": "string"}
    prop["not"] = prop
    with pytest.raises(UnsupportedSchema, match="nested too deeply"):
        parse_schema(form(prop))


def test_deeply_nested_schemas_are_refused() -> None:
    """Nesting beyond what a form could mean is refused before anything recurses far."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(10_000):
        deep = {"not": deep}
    with pytest.raises(UnsupportedSchema, match="nested too deeply"):
        parse_schema(form(deep))


def test_a_pattern_that_made_re_backtrack_is_a_form_and_answers_at_once() -> None:
    """`^(a+)+$` was refused while `re` matched patterns; RE2 matches it in linear time, so it is a form."""
    field = only_field(form({"type": "string", "pattern": "^(a+)+$"}))
    assert check_value(field, "a" * 40) is None
    error = check_value(field, "a" * 40 + "!")
    assert error is not None and "does not match the required pattern" in error.reason


def test_patterns_inside_other_keywords_match_with_re2_too() -> None:
    """The whole-schema pass (jsonschema) matches `pattern` with RE2 as the field check does: a `not` holding
    `(a+)+$` answers at once, and `\\d` is ASCII as in ECMA-262 (`re` took the Arabic-Indic three for a digit)."""
    ascii_digits = only_field(form({"type": "string", "not": {"pattern": "^\\d$"}}))
    assert check_value(ascii_digits, "\u0663") is None
    assert check_value(ascii_digits, "3") is not None
    evil = only_field(form({"type": "string", "not": {"pattern": "^(a+)+$"}}))
    assert check_value(evil, "a" * 40 + "!") is None
    assert check_value(evil, "a" * 40) is not None


def test_a_property_named_pattern_is_a_name_not_a_pattern() -> None:
    """Only `pattern` keywords are compiled: a property called `pattern` (or `patternProperties`) is a field."""
    spec = parse_schema(
        {
            "type": "object",
            "properties": {"pattern": {"type": "string"}, "patternProperties": {"type": "string"}},
        }
    )
    assert [f.name for f in spec.fields] == ["pattern", "patternProperties"]


def test_finite_bounds_near_the_limit_are_fine() -> None:
    """Large but finite bounds are accepted."""
    field = only_field(form({"type": "number", "minimum": -1e300, "maximum": 1e300}))
    assert math.isclose(field.maximum, 1e300)


def test_a_value_listed_twice_under_one_of_is_not_offered() -> None:
    """Under oneOf a repeated const matches two branches, so it could never validate: it is left out."""
    field = only_field(form({"type": "string", "oneOf": [*TITLED, {"const": "s", "title": "Again"}]}))
    assert field.options == (Option("l", "Large"),)
    with pytest.raises(UnsupportedSchema, match="at least one option"):
        parse_schema(form({"type": "string", "oneOf": [TITLED[0], TITLED[0]]}))

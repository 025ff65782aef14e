"""Property tests over generated schemas and inputs: nothing raises but UnsupportedSchema, accepted content
always validates, display/parse round trips hold, and walks with valid answers always finish."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from mapping import (
    Ask,
    BoolField,
    ChoiceField,
    Choose,
    Done,
    Edit,
    FieldError,
    Finished,
    FormState,
    Keep,
    MultiChoiceField,
    NumberField,
    Review,
    SetBool,
    Skip,
    Submit,
    TextField,
    TextFormat,
    TextInput,
    Toggle,
    UnsupportedSchema,
    apply,
    check_value,
    display_value,
    parse_schema,
    parse_text,
    start,
)
from mapping._formats import validator

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SAFE_PATTERNS = ["^[A-Z]{3}$", "[0-9]", "^[a-z]+(-[a-z]+)*$", r"^\d{3}-\d{4}$", "x", "^(ab|cd)+$"]
KEYWORDS = [
    "type",
    "properties",
    "required",
    "enum",
    "enumNames",
    "oneOf",
    "anyOf",
    "items",
    "const",
    "title",
    "default",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "format",
    "pattern",
    "minItems",
    "maxItems",
    "$ref",
]
TYPES = ["string", "number", "integer", "boolean", "array", "object", "null", "strin"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**20), 10**20)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(TYPES)
)
junk = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(KEYWORDS) | st.text(max_size=4), inner, max_size=4)
    ),
    max_leaves=12,
)
labels = st.text(max_size=10)


@st.composite
def options(draw: st.DrawFn, *, unique: bool = False) -> list[str]:
    """Option values; repeats allowed except where the schema (oneOf) would make a repeat unpickable."""
    return draw(st.lists(st.text(max_size=6), min_size=1, max_size=8, unique=unique))


@st.composite
def property_schemas(draw: st.DrawFn) -> dict[str, Any]:  # noqa: C901 - one branch per kind of property the spec allows
    """One property of any kind the spec allows, with consistent constraints and maybe a junk default."""
    kind = draw(
        st.sampled_from(
            [
                "text",
                "email",
                "uri",
                "date",
                "date-time",
                "pattern",
                "number",
                "integer",
                "boolean",
                "enum",
                "oneOf",
                "enumNames",
                "multi-enum",
                "multi-anyOf",
            ]
        )
    )
    prop: dict[str, Any]
    if kind == "text":
        prop = {"type": "string"}
        low = draw(st.none() | st.integers(0, 5))
        if low is not None:
            prop["minLength"] = low
        if draw(st.booleans()):
            prop["maxLength"] = (low or 0) + draw(st.integers(0, 20))
    elif kind in ("email", "uri", "date", "date-time"):
        prop = {"type": "string", "format": kind}
    elif kind == "pattern":
        prop = {"type": "string", "pattern": draw(st.sampled_from(SAFE_PATTERNS))}
    elif kind in ("number", "integer"):
        bound = st.integers(-1000, 1000) if kind == "integer" else st.floats(-1e6, 1e6)
        least, most = draw(st.none() | bound), draw(st.none() | bound)
        if least is not None and most is not None and least > most:
            least, most = most, least
        numeric: dict[str, Any] = (
            {"type": kind}
            | ({"minimum": least} if least is not None else {})
            | ({"maximum": most} if most else {})
        )
        prop = numeric
        assume(kind == "number" or most is None or least is None or math.ceil(least) <= math.floor(most))
    elif kind == "boolean":
        prop = {"type": "boolean"}
    elif kind == "enum":
        prop = {"type": "string", "enum": draw(options())}
    elif kind == "oneOf":
        prop = {
            "type": "string",
            "oneOf": [{"const": v, "title": draw(labels)} for v in draw(options(unique=True))],
        }
    elif kind == "enumNames":
        values = draw(options())
        prop = {"type": "string", "enum": values, "enumNames": draw(st.lists(labels, max_size=len(values)))}
    else:
        values = draw(options())
        items: dict[str, Any] = (
            {"type": "string", "enum": values}
            if kind == "multi-enum"
            else {"anyOf": [{"const": v, "title": draw(labels)} for v in values]}
        )
        prop = {"type": "array", "items": items}
        distinct = len(set(values))
        low = draw(st.none() | st.integers(0, distinct))
        if low is not None:
            prop["minItems"] = low
        if draw(st.booleans()):
            prop["maxItems"] = draw(st.integers(low or 0, distinct + 2))
    if draw(st.booleans()):
        prop["title"] = draw(labels)
    if draw(st.booleans()):
        prop["description"] = draw(labels)
    if draw(st.booleans()):
        prop["default"] = draw(junk)
    return prop


@st.composite
def schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A whole requestedSchema the spec allows: odd property names, any mix of kinds, some required."""
    names = draw(st.lists(st.text(max_size=6), max_size=5, unique=True))
    properties = {name: draw(property_schemas()) for name in names}
    required = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    return {"type": "object", "properties": properties, "required": required}


def valid_values(field: Any) -> st.SearchStrategy[Any]:
    """Values that fit `field` (what a careful person would answer)."""
    match field:
        case TextField(format=TextFormat.EMAIL):
            return st.from_regex(r"[a-z0-9]{1,8}@[a-z]{1,8}\.(com|org|io)", fullmatch=True)
        case TextField(format=TextFormat.URI):
            return st.from_regex(r"https://[a-z]{1,10}\.(com|io)(/[a-z0-9]{0,8})?", fullmatch=True)
        case TextField(format=TextFormat.DATE):
            return st.dates().map(dt.date.isoformat)
        case TextField(format=TextFormat.DATE_TIME):
            return st.datetimes(timezones=st.just(dt.UTC)).map(dt.datetime.isoformat)
        case TextField(pattern=str() as pattern):
            return st.from_regex(pattern).map(str.strip).filter(lambda s: check_value(field, s) is None)
        case TextField():
            low, high = field.min_length or 0, field.max_length
            return (
                st.text(min_size=low, max_size=high if high is not None else low + 20)
                .map(str.strip)
                .filter(lambda s: low <= len(s) and (high is None or len(s) <= high))
            )
        case NumberField():
            low = -(10**18) if field.minimum is None else math.ceil(field.minimum)
            high = 10**18 if field.maximum is None else math.floor(field.maximum)
            whole = st.integers(low, high)
            if field.integer:
                return whole
            low_f = -1e300 if field.minimum is None else field.minimum
            high_f = 1e300 if field.maximum is None else field.maximum
            return st.floats(low_f, high_f, allow_nan=False) | (whole if low <= high else st.nothing())
        case BoolField():
            return st.booleans()
        case ChoiceField():
            return st.sampled_from([o.value for o in field.options])
        case MultiChoiceField():
            values = [o.value for o in field.options]
            high = len(values) if field.max_items is None else min(field.max_items, len(values))
            return st.lists(
                st.sampled_from(values), unique=True, min_size=field.min_items or 0, max_size=high
            ).map(lambda chosen: [v for v in values if v in chosen])
    raise AssertionError(field)


def is_json_typed(field: Any, value: object) -> bool:
    """The value has the JSON type the field's schema asks for (bool is never a number, ints for integers)."""
    match field:
        case NumberField(integer=True):
            return type(value) is int
        case NumberField():
            return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]
        case BoolField():
            return type(value) is bool
        case MultiChoiceField():
            return type(value) is list and all(type(v) is str for v in value)
    return type(value) is str


def assert_valid_content(schema: dict[str, Any], content: dict[str, Any]) -> None:
    assert set(content) <= set(schema["properties"])
    assert set(schema["required"]) <= set(content)
    assert not list(validator(schema).iter_errors(content))
    assert Draft202012Validator(schema).is_valid(content)
    json.dumps(content, allow_nan=False)


@FAST
@given(junk | st.dictionaries(st.sampled_from(KEYWORDS), junk, max_size=5))
def test_parse_schema_only_ever_raises_unsupported_schema(schema: Any) -> None:
    """Arbitrary JSON (and schema-looking junk) parses or is refused; nothing else escapes."""
    try:
        spec = parse_schema(schema)
    except UnsupportedSchema as exc:
        refused: UnsupportedSchema | None = exc
    else:
        refused = None
        assert all(f.default is None or check_value(f, f.default) is None for f in spec.fields)
    assert refused is None or refused.reason


@FAST
@given(schemas())
def test_every_generated_spec_schema_parses_and_keeps_only_fitting_defaults(schema: dict[str, Any]) -> None:
    """Schemas the spec allows are never refused; every kept default fits its field."""
    spec = parse_schema(schema)
    assert [f.name for f in spec.fields] == list(schema["properties"])
    for f in spec.fields:
        assert f.required is (f.name in schema["required"])
        if f.default is not None:
            assert check_value(f, f.default) is None
            assert validator(schema["properties"][f.name]).is_valid(f.default)


# keywords beyond the field types' own rules (the last one inside a choice's branch): each needs the JSON
# Schema pass
EXTRA_RULES = [{"exclusiveMinimum": 0}, {"multipleOf": 3}, {"const": "s"}, {"not": {"const": "l"}}, "branch"]


@FAST
@given(st.data(), schemas(), st.lists(st.sampled_from(EXTRA_RULES), max_size=2))
def test_a_field_checked_in_full_accepts_only_what_its_schema_accepts(
    data: st.DataObject, schema: dict[str, Any], extra: list[Any]
) -> None:
    """The JSON Schema pass is skipped only where it could reject nothing the field's own rules accept."""
    added: dict[str, bool] = {}
    for name, prop in schema["properties"].items():
        added[name] = False
        for rules in extra:
            if rules == "branch":
                if "oneOf" in prop:
                    prop["oneOf"][0]["maxLength"] = 0
                    added[name] = True
            else:
                prop.update(rules)
                added[name] = True
    try:
        spec = parse_schema(schema)
    except UnsupportedSchema:
        assume(False)
        raise
    for f in spec.fields:
        prop = schema["properties"][f.name]
        pass  # MUT  # spec-shaped fields need no second pass; the rest do
        values = data.draw(st.lists(valid_values(f) | scalars | st.lists(st.text(max_size=6)), max_size=6))
        for value in values:
            if check_value(f, value) is None:
                assert validator(prop).is_valid(value)
    assert spec.checked_in_full is not any(added.values())
    content = {f.name: v for f in spec.fields if (v := data.draw(valid_values(f) | scalars)) is not None}
    fits = all(check_value(f, content[f.name]) is None for f in spec.fields if f.name in content)
    if spec.checked_in_full and fits and all(f.name in content for f in spec.fields if f.required):
        assert validator(schema).is_valid(content)


@FAST
@given(
    schemas(), st.text(max_size=30) | st.sampled_from(["nan", "inf", "-0", "1e999", "7.0", "yes", "1, 2", ""])
)
def test_parse_text_never_raises_and_what_it_accepts_validates(schema: dict[str, Any], raw: str) -> None:
    """Any text gives a FieldError or a value of the right JSON type that passes the property's schema."""
    for f in parse_schema(schema).fields:
        result = parse_text(f, raw)
        if isinstance(result, FieldError):
            assert result.field == f.name
            assert result.reason
        else:
            assert is_json_typed(f, result)
            assert check_value(f, result) is None
            assert validator(schema["properties"][f.name]).is_valid(result)


@FAST
@given(st.data(), schemas())
def test_typed_values_round_trip_through_display_and_parse(
    data: st.DataObject, schema: dict[str, Any]
) -> None:
    """What a card displays (or the value itself, for choices) parses back to the same value."""
    for f in parse_schema(schema).fields:
        value = data.draw(valid_values(f))
        assert check_value(f, value) is None
        if isinstance(f, ChoiceField):
            assume(value == value.strip())
            typed = value
        elif isinstance(f, MultiChoiceField):
            assume(all(v == v.strip() and v and "," not in v and "\n" not in v for v in value))
            typed = ", ".join(value)
            assume(not any(typed.casefold() in (o.value.casefold(), o.title.casefold()) for o in f.options))
            assume(value or typed.casefold() in ("", "none"))
        else:
            typed = display_value(f, value)
        assert parse_text(f, typed) == value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), schemas())
def test_walking_with_valid_answers_always_finishes_with_valid_content(
    data: st.DataObject, schema: dict[str, Any]
) -> None:
    """Buttons or typed text, skips, edits from review: the walk ends Finished with content that validates."""
    spec = parse_schema(schema)
    state = start(spec)
    skipped: set[str] = set()
    edits = data.draw(st.integers(0, 2))
    for _ in range(100):
        step = state.step
        if isinstance(step, Finished):
            break
        if isinstance(step, Review):
            assert step.error is None
            if edits and step.rows:
                edits -= 1
                state = apply(state, Edit(data.draw(st.sampled_from([f.name for f, _ in step.rows]))))
            else:
                state = apply(state, Submit())
            continue
        assert isinstance(step, Ask)
        assert step.error is None
        state = answer(state, step, data, skipped)
    else:
        raise AssertionError("the walk did not finish")
    assert isinstance(state.step, Finished)
    content = state.step.content
    assert_valid_content(schema, content)
    assert not skipped & set(content)


def answer(state: FormState, step: Ask, data: st.DataObject, skipped: set[str]) -> FormState:
    """Answer the current question with a valid value, by button, by text, or by skipping/keeping."""
    f = step.field
    how = data.draw(st.sampled_from(["button", "text", "skip", "keep"]))
    if how == "skip" and not f.required:
        skipped.add(f.name)
        return apply(state, Skip())
    if how == "keep" and step.current is not None:
        return apply(state, Keep())
    value = data.draw(valid_values(f))
    skipped.discard(f.name)
    if how == "button" and isinstance(f, ChoiceField):
        after = apply(state, Choose([o.value for o in f.options].index(value)))
    elif how == "button" and isinstance(f, BoolField):
        after = apply(state, SetBool(value))
    elif how == "button" and isinstance(f, MultiChoiceField):
        # Off first, then on, as a person at `max_items` must (a toggle past the maximum is refused).
        off = [i for i, o in enumerate(f.options) if o.value in step.selected and o.value not in value]
        on = [i for i, o in enumerate(f.options) if o.value in value and o.value not in step.selected]
        for index in off + on:
            state = apply(state, Toggle(index))
        after = apply(state, Done())
    elif isinstance(f, ChoiceField | MultiChoiceField):
        chosen = [value] if isinstance(f, ChoiceField) else value
        indexes = [str(i + 1) for i, o in enumerate(f.options) if o.value in chosen]
        typed = ", ".join(indexes) or "none"
        names = {name for o in f.options for name in (o.value.casefold(), o.title.casefold())}
        assume(not any(piece.casefold() in names for piece in [typed, *indexes]))
        after = apply(state, TextInput(typed))
    else:
        after = apply(state, TextInput(display_value(f, value)))
    assert not (isinstance(after.step, Ask) and after.step.field == f and after.step.error), after.step
    assert after.values.get(f.name) == value
    return after


inputs = st.one_of(
    st.builds(
        TextInput,
        st.text(max_size=12) | st.sampled_from(["1", "yes", "2025-01-01", "a@b.io", "none", "2, 1"]),
    ),
    st.builds(Choose, st.integers(-2, 9)),
    st.builds(SetBool, st.booleans()),
    st.builds(Toggle, st.integers(-2, 9)),
    st.builds(Edit, st.text(max_size=6)),
    st.sampled_from([Done(), Skip(), Keep(), Submit(), Submit()]),
    st.sampled_from([Choose("0"), Toggle(True), SetBool(1), TextInput(None), Edit(None), None, "Submit"]),  # type: ignore[arg-type]
)


@FAST
@given(schemas(), st.lists(inputs, max_size=25))
def test_apply_never_raises_whatever_is_sent(schema: dict[str, Any], sent: list[Any]) -> None:
    """Random (and forged) inputs in any order: every state is a valid step; a finish is valid content."""
    state = start(parse_schema(schema))
    for user_input in sent:
        state = apply(state, user_input)
        assert isinstance(state.step, Ask | Review | Finished)
        for f in state.spec.fields:
            if f.name in state.values:
                assert check_value(f, state.values[f.name]) is None
    if isinstance(state.step, Finished):
        assert_valid_content(schema, state.step.content)

"""The form walk: start, ask, refuse with reasons, review, edit, submit; nothing a person sends raises."""

from __future__ import annotations

from typing import Any

import pytest

from mapping import (
    Ask,
    Choose,
    Done,
    Edit,
    Finished,
    FormInput,
    FormState,
    Keep,
    Review,
    SetBool,
    Skip,
    Submit,
    TextInput,
    Toggle,
    apply,
    check_content,
    parse_schema,
    start,
)
from mapping.form import NOT_FOR_THIS
from tests.mapping.shapes import SHAPES, Shape, form

ORDER = {
    "type": "object",
    "properties": {
        "qty": {"type": "integer", "title": "Quantity", "minimum": 1, "maximum": 12},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "gift": {"type": "boolean", "default": False},
        "extras": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 1, "maxItems": 2},
        "note": {"type": "string", "maxLength": 20},
    },
    "required": ["qty", "size"],
}


def walk(schema: dict[str, Any], *inputs: Any) -> FormState:
    state = start(parse_schema(schema))
    for user_input in inputs:
        state = apply(state, user_input)
    return state


def ask(state: FormState) -> Ask:
    assert isinstance(state.step, Ask), state.step
    return state.step


def review(state: FormState) -> Review:
    assert isinstance(state.step, Review), state.step
    return state.step


def finished(state: FormState) -> dict[str, Any]:
    assert isinstance(state.step, Finished), state.step
    return state.step.content


def test_the_walk_asks_fields_without_values_in_schema_order() -> None:
    """Fields with defaults are not asked; the others come in order with index and total."""
    state = walk(ORDER)
    first = ask(state)
    assert (first.field.name, first.index, first.total, first.current, first.error) == (
        "qty",
        0,
        4,
        None,
        None,
    )

    state = apply(state, TextInput("3"))
    assert (ask(state).field.name, ask(state).index) == ("size", 1)


def test_a_full_walk_reaches_review_and_then_finished_content() -> None:
    """Answers by text and by buttons end on Review with every row, then Submit finishes."""
    state = walk(ORDER, TextInput("3"), Choose(1), Toggle(0), Toggle(2), Done(), TextInput("ring the bell"))

    rows = {f.name: v for f, v in review(state).rows}
    assert rows == {"qty": 3, "size": "l", "gift": False, "extras": ["a", "c"], "note": "ring the bell"}
    assert finished(apply(state, Submit())) == rows


def test_bad_text_is_refused_with_the_reason_and_earlier_answers_are_kept() -> None:
    """The same question comes back with `error`; values already given stay."""
    state = walk(ORDER, TextInput("3"), TextInput("medium"))

    assert ask(state).field.name == "size"
    assert ask(state).error == "“medium” is not one of the options: Small, Large"
    assert state.values["qty"] == 3

    state = apply(state, TextInput("13"))
    assert ask(state).error == "“13” is not one of the options: Small, Large"


def test_the_error_clears_once_an_answer_fits() -> None:
    """After a refusal, a good answer moves on with no error."""
    state = walk(ORDER, TextInput("13"))
    assert ask(state).error == "must be a whole number between 1 and 12"
    state = apply(state, TextInput("12"))
    assert (ask(state).field.name, ask(state).error) == ("size", None)


def test_required_fields_cannot_be_skipped() -> None:
    """Skip on a required field is refused with a reason."""
    state = walk(ORDER, Skip())
    assert ask(state).field.name == "qty"
    assert ask(state).error is not None
    assert "cannot be skipped" in (ask(state).error or "")


def test_skipped_optional_fields_are_absent_from_the_content() -> None:
    """Skipping leaves the key out entirely (not null, not empty)."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Submit())
    assert finished(state) == {"qty": 1, "size": "s", "gift": False}


def test_skip_on_edit_removes_a_default() -> None:
    """An optional field's default can be removed from review: Edit, then Skip."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Edit("gift"), Skip(), Submit())
    assert finished(state) == {"qty": 1, "size": "s"}


def test_defaults_are_prefilled_and_can_be_changed_from_review() -> None:
    """Edit asks the field again (current = its value) and returns to Review after the answer."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Edit("gift"))

    edit = ask(state)
    assert (edit.field.name, edit.index, edit.total, edit.current) == ("gift", 0, 1, False)

    state = apply(state, SetBool(True))
    assert dict((f.name, v) for f, v in review(state).rows)["gift"] is True


def test_keep_holds_the_current_value() -> None:
    """Keep on an edited field leaves its value and goes back to review."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Edit("qty"), Keep())
    assert dict((f.name, v) for f, v in review(state).rows)["qty"] == 1


def test_keep_without_a_value_is_refused_on_required_fields_and_skips_optional_ones() -> None:
    """There is nothing to keep on a fresh required field; on an optional one, nothing stays nothing."""
    assert ask(walk(ORDER, Keep())).error == "there is no answer to keep yet"
    state = walk(ORDER, TextInput("1"), TextInput("s"), Keep(), Keep(), Submit())
    assert finished(state) == {"qty": 1, "size": "s", "gift": False}


def test_multi_select_toggles_are_seeded_from_the_current_value() -> None:
    """Editing a multi-select shows its current picks as selected; toggling flips one."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), TextInput("a, b"), Skip(), Edit("extras"))
    assert ask(state).selected == ("a", "b")

    state = apply(state, Toggle(1))
    assert ask(state).selected == ("a",)
    state = apply(state, Done())
    assert dict((f.name, v) for f, v in review(state).rows)["extras"] == ["a"]


def test_multi_select_refuses_too_many_and_too_few() -> None:
    """Toggling past maxItems is refused at once; Done below minItems is refused with the count."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Toggle(0), Toggle(1), Toggle(2))
    assert (ask(state).selected, ask(state).error) == (("a", "b"), "pick at most 2")

    state = apply(apply(apply(state, Toggle(0)), Toggle(1)), Done())
    assert (ask(state).field.name, ask(state).error) == ("extras", "pick at least 1")


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ((Choose(0),), "qty"),
        ((Toggle(0),), "qty"),
        ((SetBool(True),), "qty"),
        ((Done(),), "qty"),
        ((Submit(),), "qty"),
        ((Edit("qty"),), "qty"),
        ((TextInput("1"), Choose(2)), "size"),
        ((TextInput("1"), Choose(-1)), "size"),
        ((TextInput("1"), Choose(True)), "size"),
        ((TextInput("1"), Choose("0")), "size"),  # type: ignore[arg-type]  # a forged, non-int index
        ((TextInput("1"), TextInput("s"), Toggle(3)), "extras"),
        ((TextInput("1"), TextInput("s"), Choose(0)), "extras"),
    ],
)
def test_inputs_that_do_not_fit_the_question_are_refused(inputs: tuple[Any, ...], field: str) -> None:
    """Wrong buttons (or forged indexes) re-ask the same question with an error; nothing raises."""
    state = walk(ORDER, *inputs)
    assert (ask(state).field.name, ask(state).error) == (field, NOT_FOR_THIS)


def test_forged_values_never_raise() -> None:
    """A non-bool SetBool, non-string text, unknown objects: all refused."""
    gift_only = form({"type": "boolean"}, required=True)
    for forged in [SetBool(1), TextInput(None), object(), None, "yes", Edit(None)]:  # type: ignore[arg-type]
        state = walk(gift_only, forged)
        assert ask(state).error is not None


def test_review_refuses_inputs_that_are_not_edit_or_submit() -> None:
    """On Review, an answer-like input gets an error on the review, values unchanged."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip())
    strays: list[FormInput] = [TextInput("x"), Choose(0), Skip(), Keep(), Done()]
    for stray in strays:
        after = apply(state, stray)
        assert review(after).error == NOT_FOR_THIS
        assert after.values == state.values


def test_edit_of_an_unknown_field_is_refused_on_review() -> None:
    """Edit names must be real fields."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Edit("nope"))
    assert review(state).error == "there is no such field"


def test_finished_ignores_further_input() -> None:
    """Once finished, inputs change nothing."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), Skip(), Skip(), Submit())
    assert apply(state, Edit("qty")) is state


def test_submit_validates_the_whole_schema() -> None:
    """Root-level rules (here dependentRequired) are checked before anything is sent."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
        "dependentRequired": {"city": ["zip"]},
    }
    state = walk(schema, TextInput("Paris"), Skip(), Submit())
    error = review(state).error
    assert error is not None
    assert error.startswith("the form's rules are not met")

    state = apply(apply(state, Edit("zip")), TextInput("75001"))
    assert finished(apply(state, Submit())) == {"city": "Paris", "zip": "75001"}


def test_a_form_with_no_fields_is_a_review_with_no_rows() -> None:
    """No schema: review straight away, and Submit sends empty content."""
    state = start(parse_schema(None))
    assert review(state) == Review(rows=(), error=None)
    assert finished(apply(state, Submit())) == {}


def test_a_form_whose_fields_all_have_defaults_starts_on_review() -> None:
    """Nothing to ask: review at once, defaults shown."""
    state = walk(form({"type": "integer", "default": 4}, required=True))
    assert [(f.name, v) for f, v in review(state).rows] == [("f", 4)]


def test_states_are_immutable_and_values_read_only() -> None:
    """apply returns a new state; the old one is unchanged; values cannot be written."""
    state = walk(ORDER)
    after = apply(state, TextInput("2"))
    assert "qty" not in state.values
    assert after.values["qty"] == 2
    with pytest.raises(TypeError):
        after.values["qty"] = 5  # type: ignore[index]


def test_finished_content_lists_are_copies() -> None:
    """Mutating the content does not reach back into the state."""
    state = walk(ORDER, TextInput("1"), TextInput("s"), TextInput("a"), Skip(), Submit())
    finished(state)["extras"].append("zzz")
    assert state.values["extras"] == ["a"]


def test_start_takes_initial_values_that_fit() -> None:
    """Known values (say, tool arguments already given) are pre-filled; ones that do not fit are asked."""
    state = start(parse_schema(ORDER), {"qty": 2.0, "size": "medium"})
    assert state.values["qty"] == 2
    assert type(state.values["qty"]) is int
    assert ask(state).field.name == "size"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("required", [True, False])
def test_each_shape_walks_to_content_by_text(shape: Shape, required: bool) -> None:
    """Each shape, required or optional, takes its good text answer into the final content."""
    state = walk(form(shape.prop, required=required), TextInput(shape.good), Submit())
    assert finished(state) == {"f": shape.value}


@pytest.mark.parametrize("shape", [s for s in SHAPES if s.reason], ids=lambda s: s.id)
def test_each_shape_reasks_after_bad_text(shape: Shape) -> None:
    """Each shape's bad answer comes back as the same question with its reason."""
    state = walk(form(shape.prop, required=True), TextInput(shape.bad))
    assert ask(state).error is not None
    assert shape.reason in (ask(state).error or "")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_sends_its_default_when_kept(shape: Shape) -> None:
    """A fitting default is not asked and goes out as is."""
    state = walk(form({**shape.prop, "default": shape.default}, required=True), Submit())
    assert finished(state) == {"f": shape.default}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.id)
def test_each_shape_optional_can_be_skipped_and_required_cannot(shape: Shape) -> None:
    """Optional: Skip leaves it out. Required: Skip is refused."""
    assert finished(walk(form(shape.prop), Skip(), Submit())) == {}
    assert ask(walk(form(shape.prop, required=True), Skip())).error is not None


def test_check_content_says_what_review_submit_says_for_a_whole_form() -> None:
    """A host that shows every field at once gets review's reasons: a missing required field, a value that
    does not fit, the schema's own rules; None when the content can be sent."""
    spec = parse_schema(
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "title": "Guests", "minimum": 1},
                "a": {"type": "string", "title": "A"},
                "b": {"type": "string", "title": "B"},
            },
            "required": ["n"],
            "dependentRequired": {"a": ["b"]},
        }
    )
    assert check_content(spec, {}) == "still needed: Guests"
    assert check_content(spec, {"n": 0}) == "Guests: must be a whole number, at least 1"
    assert (check_content(spec, {"n": 2, "a": "x"}) or "").startswith("the form's rules are not met")
    assert check_content(spec, {"n": 2, "a": "x", "b": "y"}) is None

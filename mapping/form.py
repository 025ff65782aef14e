"""The form walk as an immutable step machine: `start(spec)`, then `apply(state, input)` to `Finished`. Pure.

A surface shows `state.step` (ask a field, review, or done), turns a person's tap or text into a `FormInput`
and calls `apply`; nothing a person (or a forged button) sends makes `apply` raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, TypeAlias, TypeGuard, TypeVar, cast

from jsonschema.exceptions import best_match

from mapping._fields import BoolField, ChoiceField, Field, FormSpec, MultiChoiceField, NumberField, Value
from mapping._formats import validator
from mapping.values import FieldError, check_value, parse_text

__all__ = [
    "NOT_FOR_THIS",
    "Ask",
    "Choose",
    "Done",
    "Edit",
    "Finished",
    "FormInput",
    "FormState",
    "Keep",
    "Review",
    "SetBool",
    "Skip",
    "Step",
    "Submit",
    "TextInput",
    "Toggle",
    "apply",
    "check_content",
    "restore",
    "snapshot",
    "start",
    "walk_note",
]

_V = TypeVar("_V", bound="Value | None")
NOT_FOR_THIS: Final = "that button is not for this question"
"""The error when an input does not fit the current step (a stale or forged button)."""
_CLIP: Final = 200


@dataclass(frozen=True, slots=True)
class TextInput:
    """A typed answer to the current field (any kind: parsed with `parse_text`)."""

    raw: str


@dataclass(frozen=True, slots=True)
class Choose:
    """Pick option `index` (0-based) of the current single-choice field."""

    index: int


@dataclass(frozen=True, slots=True)
class SetBool:
    """Answer the current yes/no field."""

    value: bool


@dataclass(frozen=True, slots=True)
class Toggle:
    """Flip option `index` (0-based) in the current multiple-choice selection."""

    index: int


@dataclass(frozen=True, slots=True)
class Done:
    """Commit the current multiple-choice selection."""


@dataclass(frozen=True, slots=True)
class Skip:
    """Leave the current optional field empty (removing any value)."""


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep the current field's value (its default or an earlier answer)."""


@dataclass(frozen=True, slots=True)
class Edit:
    """From review: ask field `name` again, then come back to review."""

    name: str


@dataclass(frozen=True, slots=True)
class Submit:
    """From review: validate everything and finish."""


FormInput: TypeAlias = TextInput | Choose | SetBool | Toggle | Done | Skip | Keep | Edit | Submit


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask one field."""

    field: Field
    index: int
    """0-based position of this question in the current walk ("question index+1 of total")."""
    total: int
    """Questions in the current walk (1 when a field is asked again from review)."""
    current: Value | None = None
    """The value the field holds now (a default or an earlier answer): surfaces offer to keep it."""
    selected: tuple[str, ...] = ()
    """The in-progress multiple-choice selection (option values, in option order)."""
    error: str | None = None
    """Why the previous input was refused; the question is asked again."""


@dataclass(frozen=True, slots=True)
class Review:
    """Every field with its value (None: empty), before anything is sent."""

    rows: tuple[tuple[Field, Value | None], ...]
    error: str | None = None
    """Why the last Submit (or a stray input) was refused."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The content to send: valid against the whole schema; skipped optional fields are absent."""

    content: dict[str, Value]


Step: TypeAlias = Ask | Review | Finished


@dataclass(frozen=True, slots=True)
class FormState:
    """Where a form walk stands: immutable; `apply` returns a new one."""

    spec: FormSpec
    values: Mapping[str, Value]
    """Values so far (read-only): defaults, then answers."""
    step: Step
    queue: tuple[str, ...] = ()
    """Names still to ask in this walk, the current one first."""
    editing: bool = False
    """The current question was asked from review: answering it returns there."""


def start(spec: FormSpec, initial: Mapping[str, object] | None = None) -> FormState:
    """Begin a walk: defaults (and fitting `initial` values) pre-filled, the rest asked in schema order."""
    values: dict[str, Value] = {f.name: _copy(f.default) for f in spec.fields if f.default is not None}
    for f in spec.fields:
        given = (initial or {}).get(f.name)
        if isinstance(f, NumberField) and f.integer and isinstance(given, float) and given.is_integer():
            given = int(given)  # JSON 7.0 is the integer 7
        if given is not None and check_value(f, given) is None:
            values[f.name] = _copy(cast(Value, given))  # check_value accepted it
    queue = tuple(f.name for f in spec.fields if f.name not in values)
    state = FormState(spec, MappingProxyType(values), _review(spec, values), queue)
    return _ask(state, queue, index=0, total=len(queue), editing=False) if queue else state


def snapshot(state: FormState) -> dict[str, object]:
    """Where a walk stands, as a JSON-ready dict (values, the questions left, the step): `restore` takes it back.

    A step's refusal (`error`) is not kept: after a restart the question is asked as it was drawn before.
    """
    step = state.step
    shot: dict[str, object] = {
        "values": {k: _copy(v) for k, v in state.values.items()},
        "queue": list(state.queue),
        "editing": state.editing,
    }
    if isinstance(step, Ask):
        shot["ask"] = {"index": step.index, "total": step.total, "selected": list(step.selected)}
    return shot


def restore(spec: FormSpec, shot: Mapping[str, object]) -> FormState:
    """The walk `snapshot` saw, on the same `spec`; anything that does not fit the spec (an unknown field, a
    value it refuses, a malformed snapshot) starts that part over instead. Never raises."""
    raw_values = shot.get("values")
    given = raw_values if isinstance(raw_values, Mapping) else {}
    values: dict[str, Value] = {}
    for f in spec.fields:
        value = given.get(f.name)
        if value is not None and check_value(f, value) is None:
            values[f.name] = _copy(cast(Value, value))
    names = {f.name for f in spec.fields}
    raw_queue = shot.get("queue")
    queue = tuple(n for n in raw_queue if n in names) if isinstance(raw_queue, list) else ()
    ask = shot.get("ask")
    editing = shot.get("editing") is True
    if not isinstance(ask, Mapping) or not queue:
        return FormState(spec, MappingProxyType(values), _review(spec, values))
    index, total = ask.get("index"), ask.get("total")
    if not isinstance(index, int) or not isinstance(total, int):
        index, total = 0, len(queue)
    state = _ask(
        FormState(spec, MappingProxyType(values), _review(spec, values), queue),
        queue,
        index=index,
        total=total,
        editing=editing,
    )
    selected = ask.get("selected")
    step = state.step
    if isinstance(step, Ask) and isinstance(selected, list) and isinstance(step.field, MultiChoiceField):
        chosen = tuple(o.value for o in step.field.options if o.value in selected)
        state = _with_step(state, Ask(step.field, step.index, step.total, step.current, chosen, None))
    return state


def apply(state: FormState, user_input: FormInput) -> FormState:
    """Take one input; input that does not fit the current step re-shows it with `error` set. Never raises."""
    step = state.step
    if isinstance(step, Ask):
        return _on_ask(state, step, user_input)
    if isinstance(step, Review):
        return _on_review(state, user_input)
    return state  # Finished: nothing more to do


def _on_ask(state: FormState, step: Ask, user_input: object) -> FormState:
    field = step.field
    match user_input:
        case TextInput(raw=raw):
            parsed = parse_text(field, raw)
            if isinstance(parsed, FieldError):
                return _refuse(state, step, parsed.reason)
            return _answer(state, step, parsed)
        case Choose(index=index) if isinstance(field, ChoiceField):
            if not _valid_index(index, field.options):
                return _refuse(state, step, NOT_FOR_THIS)
            return _answer(state, step, field.options[index].value)
        case SetBool(value=value) if isinstance(field, BoolField) and isinstance(value, bool):
            return _answer(state, step, value)
        case Toggle(index=index) if isinstance(field, MultiChoiceField):
            return _toggle(state, step, field, index)
        case Done() if isinstance(field, MultiChoiceField):
            return _answer(state, step, list(step.selected))
        case Skip():
            if field.required:
                return _refuse(state, step, "this question needs an answer; it cannot be skipped")
            values = {k: v for k, v in state.values.items() if k != field.name}
            return _advance(state, step, values)
        case Keep():
            if field.name not in state.values and field.required:
                return _refuse(state, step, "there is no answer to keep yet")
            return _advance(state, step, dict(state.values))
    return _refuse(state, step, NOT_FOR_THIS)


def _on_review(state: FormState, user_input: object) -> FormState:
    values = dict(state.values)
    match user_input:
        case Edit(name=name):
            if not isinstance(name, str) or not any(f.name == name for f in state.spec.fields):
                return _with_step(state, _review(state.spec, values, "there is no such field"))
            return _ask(state, (name,), index=0, total=1, editing=True)
        case Submit():
            error = _submit_error(state.spec, values)
            if error is not None:
                return _with_step(state, _review(state.spec, values, error))
            content = {f.name: _copy(values[f.name]) for f in state.spec.fields if f.name in values}
            return _with_step(state, Finished(content))
    return _with_step(state, _review(state.spec, values, NOT_FOR_THIS))


def walk_note(state: FormState) -> str | None:
    """On a walk's first question, when fields already hold a value (defaults) and will only be shown at the
    review, what the count leaves out: "5 to answer, 2 more with defaults at the review". Else None."""
    step = state.step
    if not isinstance(step, Ask) or state.editing or step.index != 0:
        return None
    prefilled = len(state.spec.fields) - step.total
    if prefilled <= 0:
        return None
    more = "1 more with a default" if prefilled == 1 else f"{prefilled} more with defaults"
    return f"{step.total} to answer, {more} at the review"


def check_content(spec: FormSpec, content: Mapping[str, Value]) -> str | None:
    """Why a whole form's content cannot be sent, as review's Submit says it (a required field missing, a value
    that does not fit, the schema's own rules), or None: for hosts that show every field at once. Never raises."""
    return _submit_error(spec, content)


def _answer(state: FormState, step: Ask, value: Value) -> FormState:
    error = check_value(step.field, value)
    if error is not None:
        return _refuse(state, step, error.reason, selected=_selection(step.field, value) or step.selected)
    return _advance(state, step, {**state.values, step.field.name: value})


def _toggle(state: FormState, step: Ask, field: MultiChoiceField, index: object) -> FormState:
    if not _valid_index(index, field.options):
        return _refuse(state, step, NOT_FOR_THIS)
    value = field.options[index].value
    chosen = set(step.selected) ^ {value}
    if field.max_items is not None and len(chosen) > field.max_items:
        return _refuse(state, step, f"pick at most {field.max_items}")
    selected = tuple(o.value for o in field.options if o.value in chosen)
    return _with_step(state, Ask(field, step.index, step.total, step.current, selected, None))


def _advance(state: FormState, step: Ask, values: dict[str, Value]) -> FormState:
    rest = state.queue[1:]
    if state.editing or not rest:
        return FormState(state.spec, MappingProxyType(values), _review(state.spec, values))
    moved = FormState(state.spec, MappingProxyType(values), state.step, rest)
    return _ask(moved, rest, index=step.index + 1, total=step.total, editing=False)


def _ask(state: FormState, queue: tuple[str, ...], *, index: int, total: int, editing: bool) -> FormState:
    field = state.spec.field(queue[0])
    current = state.values.get(field.name)
    ask = Ask(field, index, total, _copy(current), _selection(field, current), None)
    return FormState(state.spec, state.values, ask, queue, editing)


def _refuse(state: FormState, step: Ask, reason: str, selected: tuple[str, ...] | None = None) -> FormState:
    chosen = step.selected if selected is None else selected
    return _with_step(state, Ask(step.field, step.index, step.total, step.current, chosen, reason))


def _with_step(state: FormState, step: Step) -> FormState:
    return FormState(state.spec, state.values, step, state.queue, state.editing)


def _review(spec: FormSpec, values: Mapping[str, Value], error: str | None = None) -> Review:
    return Review(tuple((f, _copy(values.get(f.name))) for f in spec.fields), error)


def _submit_error(spec: FormSpec, values: Mapping[str, Value]) -> str | None:
    missing = [f.title for f in spec.fields if f.required and f.name not in values]
    if missing:
        return f"still needed: {', '.join(missing)}"
    for f in spec.fields:
        if f.name in values and (error := check_value(f, values[f.name])) is not None:
            return f"{f.title}: {error.reason}"
    if spec.checked_in_full:
        return None
    error = best_match(validator(spec.schema).iter_errors(dict(values)))
    if error is None:
        return None
    message = error.message if len(error.message) <= _CLIP else error.message[: _CLIP - 1] + "…"
    return f"the form's rules are not met: {message}"


def _selection(field: Field, value: object) -> tuple[str, ...]:
    if not isinstance(field, MultiChoiceField) or not isinstance(value, list):
        return ()
    return tuple(o.value for o in field.options if o.value in value)


def _valid_index(index: object, options: tuple[object, ...]) -> TypeGuard[int]:
    return isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(options)


def _copy(value: _V) -> _V:
    # lists are the one mutable Value: hand out copies so no surface can change the state behind its back
    return cast(_V, list(value)) if isinstance(value, list) else value

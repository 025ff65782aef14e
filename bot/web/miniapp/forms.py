"""A form as the Mini App page shows it, and what the page sends back, read through `mapping`. Pure.

The page is told each field's kind, title, hint, bounds and default (`page_form`); it sends back raw values:
typed text for text and number fields, `true`/`false` for yes/no, option values for choices. Nothing it
sends is trusted: `read_answers` parses and checks every value with `mapping` (the same functions, and so
the same wording, as the chat flow), then the whole content with `mapping.check_content`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from bot.config import MiniAppConfig
from bot.core import MESSAGE_CLIP, Prompt, clip
from mapping import (
    BoolField,
    ChoiceField,
    Field,
    FieldError,
    FormSpec,
    MultiChoiceField,
    NumberField,
    TextField,
    TextFormat,
    Value,
    check_content,
    check_value,
    describe,
    parse_text,
)

__all__ = ["NEEDED", "PageAnswers", "page_form", "read_answers", "read_value", "wants_page"]

NEEDED: Final = "this question needs an answer; it cannot be skipped"
"""The chat flow's words when a required field is left empty."""
_KINDS: Final = {
    None: "text",
    TextFormat.EMAIL: "email",
    TextFormat.URI: "url",
    TextFormat.DATE: "date",
    TextFormat.DATE_TIME: "datetime",
}


def wants_page(prompt: Prompt, config: MiniAppConfig) -> bool:
    """Whether `prompt` is a long form that gets an **Open form** button: a form asked in a private chat with
    `min_fields` fields or more, any date / date-time field, or a multi-select of more than `many_options`."""
    spec = prompt.form
    if spec is None or prompt.request.url is not None or not prompt.origin.is_private or not config.enabled:
        return False
    return (
        len(spec.fields) >= config.min_fields
        or (config.dates and any(_is_date(f) for f in spec.fields))
        or any(isinstance(f, MultiChoiceField) and len(f.options) > config.many_options for f in spec.fields)
    )


def _is_date(f: Field) -> bool:
    return isinstance(f, TextField) and f.format in (TextFormat.DATE, TextFormat.DATE_TIME)


def page_form(prompt: Prompt) -> dict[str, Any]:
    """What the page renders (as JSON): who asks, their message (clipped as a card clips it), and the fields.
    All server text is data the page inserts as text."""
    assert prompt.form is not None
    return {
        "server": prompt.server,
        "message": clip(prompt.request.prompt, MESSAGE_CLIP),
        "fields": [_page_field(f) for f in prompt.form.fields],
        "secondsLeft": int(prompt.seconds_left),
    }


def _page_field(f: Field) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": f.name,
        "title": f.title,
        "description": f.description,
        "required": f.required,
        "hint": describe(f),
        "default": f.default,
    }
    match f:
        case TextField():
            out.update(kind=_KINDS[f.format], minLength=f.min_length, maxLength=f.max_length)
        case NumberField():
            out.update(kind="integer" if f.integer else "number", minimum=f.minimum, maximum=f.maximum)
        case BoolField():
            out.update(kind="boolean")
        case ChoiceField():
            out.update(kind="choice", options=[{"value": o.value, "title": o.title} for o in f.options])
        case MultiChoiceField():
            out.update(
                kind="multi",
                options=[{"value": o.value, "title": o.title} for o in f.options],
                minItems=f.min_items,
                maxItems=f.max_items,
            )
    return out


def read_value(f: Field, raw: object) -> Value | FieldError | None:
    """One value from the page: the field's JSON value, why it does not fit, or None for left empty."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(f, TextField | NumberField):
        if not isinstance(raw, str):
            return FieldError(f.name, "must be typed text")
        return parse_text(f, raw)  # typed text, as in the chat: "4" is the integer 4
    if isinstance(f, MultiChoiceField) and isinstance(raw, list):
        raw = list(raw)
    error = check_value(f, raw)
    if error is not None:
        return error
    assert isinstance(raw, str | bool | list)  # check_value accepted it: an option, a bool, or options
    return raw


@dataclass(frozen=True, slots=True)
class PageAnswers:
    """The page's values read: `content` to send when there are no `errors` (by field name) and no `error`
    (about the whole form)."""

    content: dict[str, Value] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.errors and self.error is None


def read_answers(spec: FormSpec, values: object) -> PageAnswers:
    """Every value the page sent, parsed and checked with `mapping`; keys that are not fields are ignored."""
    if not isinstance(values, Mapping):
        return PageAnswers(error="the form's values are missing")
    content: dict[str, Value] = {}
    errors: dict[str, str] = {}
    for f in spec.fields:
        value = read_value(f, values.get(f.name))
        if isinstance(value, FieldError):
            errors[f.name] = value.reason
        elif value is None:
            if f.required:
                errors[f.name] = NEEDED
        else:
            content[f.name] = value
    if errors:
        return PageAnswers(content, errors)
    return PageAnswers(content, error=check_content(spec, content))

"""toolnexus-bot's pure core: MCP elicitation params <-> `Request`/`Answer`, and the form engine. Pure.

No I/O, no Telegram, no MCP SDK: hosts (the Telegram bot, the console) drive these functions.
"""

from __future__ import annotations

from mapping.elicitation import answer_to_elicit_result, elicitation_to_request
from mapping.errors import InvalidParams, MappingError, UnsupportedSchema
from mapping.form import (
    NOT_FOR_THIS,
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
    Step,
    Submit,
    TextInput,
    Toggle,
    apply,
    check_content,
    start,
)
from mapping.ids import new_request_id, to_base36
from mapping.model import DECLINED, Answer, Request, RequestKind
from mapping.schema import (
    MAX_TEXT_LENGTH,
    BoolField,
    ChoiceField,
    Field,
    FormSpec,
    MultiChoiceField,
    NumberField,
    Option,
    TextField,
    TextFormat,
    Value,
    parse_schema,
)
from mapping.urls import MAX_HOST, MAX_SHOWN_URL, WEB_SCHEMES, UrlCheck, check_url
from mapping.values import MAX_PATTERN_INPUT, FieldError, check_value, describe, display_value, parse_text

__all__ = [
    "DECLINED",
    "MAX_HOST",
    "MAX_PATTERN_INPUT",
    "MAX_SHOWN_URL",
    "MAX_TEXT_LENGTH",
    "NOT_FOR_THIS",
    "WEB_SCHEMES",
    "Answer",
    "Ask",
    "BoolField",
    "ChoiceField",
    "Choose",
    "Done",
    "Edit",
    "Field",
    "FieldError",
    "Finished",
    "FormInput",
    "FormSpec",
    "FormState",
    "InvalidParams",
    "Keep",
    "MappingError",
    "MultiChoiceField",
    "NumberField",
    "Option",
    "Request",
    "RequestKind",
    "Review",
    "SetBool",
    "Skip",
    "Step",
    "Submit",
    "TextField",
    "TextFormat",
    "TextInput",
    "Toggle",
    "UnsupportedSchema",
    "UrlCheck",
    "Value",
    "answer_to_elicit_result",
    "apply",
    "check_content",
    "check_url",
    "check_value",
    "describe",
    "display_value",
    "elicitation_to_request",
    "new_request_id",
    "parse_schema",
    "parse_text",
    "start",
    "to_base36",
]

"""`bot.servers.elicitation.admit`: whether a server's question is shown, and what its server and person hear
when it is not. No I/O: the facts go in, a decision comes out."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, ElicitResult, ErrorData

from bot.servers.elicitation import Admitted, Refused, admit
from bot.servers.limits import Limit, Refusal
from mapping import RequestKind

FORM: dict[str, Any] = {
    "mode": "form",
    "message": "Deploy where?",
    "requestedSchema": {"type": "object", "properties": {"env": {"type": "string", "enum": ["prod", "dev"]}}},
}
LIMITED = Refusal(Limit.OPEN_QUESTIONS, "at most 3 open questions each; answer one (or /cancel) first")


def _admit(wire: dict[str, Any] = FORM, **facts: Any) -> Admitted | Refused:
    given: dict[str, Any] = {
        "owned": True,
        "stopping": False,
        "limited": None,
        "open_now": 1,
        "max_open": 5,
        "per_call": False,
    }
    return admit(wire, **(given | facts))


def test_a_question_within_every_bound_is_admitted_with_its_form_parsed() -> None:
    """A form question of a person's call, the bot running and nothing over: shown, its schema parsed once."""
    admission = _admit()
    assert isinstance(admission, Admitted)
    assert admission.request.kind is RequestKind.INPUT and admission.request.prompt == "Deploy where?"
    assert admission.form is not None and [f.name for f in admission.form.fields] == ["env"]


def test_a_question_of_no_ones_call_is_an_error_and_nobody_is_told() -> None:
    """Outside any tool call (a shared session with no call running) nobody could answer: an error."""
    assert _admit(owned=False, stopping=True, limited=LIMITED) == Refused(
        ErrorData(code=INVALID_REQUEST, message="elicitation outside of any tool call"), "Deploy where?"
    )


def test_a_question_arriving_while_the_bot_stops_is_an_error() -> None:
    assert _admit(stopping=True, open_now=99) == Refused(
        ErrorData(code=INVALID_REQUEST, message="the client is shutting down"), "Deploy where?"
    )


def test_a_question_past_the_persons_open_questions_is_cancelled_and_told_unless_told_lately() -> None:
    """Past `[limits] open_questions`: the server hears `cancel`; the person gets the limit's line, unless
    they were told about it lately."""
    assert _admit(limited=LIMITED, open_now=99) == Refused(
        ElicitResult(action="cancel"), "Deploy where?", LIMITED.reason
    )
    quiet = Refusal(Limit.OPEN_QUESTIONS, LIMITED.reason, tell=False)
    assert _admit(limited=quiet) == Refused(ElicitResult(action="cancel"), "Deploy where?", None)


@pytest.mark.parametrize(("per_call", "unit"), [(False, "session"), (True, "call")])
def test_one_question_too_many_at_once_is_an_error_whose_line_is_throttled(per_call: bool, unit: str) -> None:
    """More than `max_open` open at once (per session, or per call on a shared session): an error naming the
    bound; the person's line is marked `too_many` (sent at most every `REFUSAL_LINE_EVERY_S`)."""
    assert isinstance(_admit(open_now=5, per_call=per_call), Admitted)
    assert _admit(open_now=6, per_call=per_call) == Refused(
        ErrorData(
            code=INVALID_REQUEST, message=f"too many questions at once: at most 5 may be open per {unit}"
        ),
        "Deploy where?",
        "it asked more than 5 questions at once; the extra ones were refused",
        too_many=True,
    )


def test_a_schema_the_bot_cannot_show_is_invalid_params_and_the_person_is_told_why() -> None:
    """A nested object is no flat form: the server gets -32602, the person the mapping's reason."""
    nested = FORM | {
        "requestedSchema": {"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}
    }
    admission = _admit(nested)
    assert isinstance(admission, Refused) and admission.about == "Deploy where?" and not admission.too_many
    assert isinstance(admission.reply, ErrorData) and admission.reply.code == INVALID_PARAMS
    assert admission.line and admission.reply.message == f"unsupported elicitation: {admission.line}"


def test_an_unsafe_link_is_declined_and_the_person_is_told_why() -> None:
    """A URL-mode question whose link is not a web address: never a button; the server hears `decline`."""
    wire = {"mode": "url", "message": "Open this", "url": "javascript:alert(1)", "elicitationId": "e1"}
    admission = _admit(wire)
    assert isinstance(admission, Refused) and admission.reply == ElicitResult(action="decline")
    assert admission.line is not None and admission.line.startswith("the link was refused: not a web address")


def test_a_safe_link_is_admitted_without_a_form() -> None:
    wire = {"mode": "url", "message": "Sign in", "url": "https://example.com/auth", "elicitationId": "e1"}
    admission = _admit(wire)
    assert isinstance(admission, Admitted)
    assert admission.request.kind is RequestKind.AUTHORIZATION and admission.form is None

"""The seed's three examples, ported verbatim, and the request ids."""

from __future__ import annotations

import re
import threading

from mapping import (
    DECLINED,
    Answer,
    RequestKind,
    answer_to_elicit_result,
    elicitation_to_request,
    parse_schema,
)
from mapping.ids import new_request_id

ID_SHAPE = re.compile(r"elc-[0-9a-z]+-[0-9]+")


def test_form_mode_elicitation_becomes_an_input_request() -> None:
    """Seed example 1: a form-mode elicitation becomes a `kind: "input"` request carrying the schema."""
    params = {
        "message": "What is your deployment target?",
        "requestedSchema": {
            "type": "object",
            "properties": {"target": {"type": "string", "enum": ["staging", "prod"]}},
        },
    }

    req = elicitation_to_request(params)

    assert req.kind == "input"
    assert req.prompt == "What is your deployment target?"
    assert req.url is None
    assert req.data is not None
    assert req.data["schema"]["properties"]["target"]["enum"] == ["staging", "prod"]
    assert req.id.startswith("elc-")


def test_url_mode_elicitation_becomes_an_authorization_request() -> None:
    """Seed example 2: a URL-mode elicitation becomes a `kind: "authorization"` request carrying the URL."""
    params = {
        "mode": "url",
        "message": "Authorize toolnexus to access your calendar",
        "url": "https://example.com/oauth/authorize?state=abc123",
    }

    req = elicitation_to_request(params)

    assert req.kind == "authorization"
    assert req.prompt == "Authorize toolnexus to access your calendar"
    assert req.url == "https://example.com/oauth/authorize?state=abc123"
    assert req.data is None


def test_answers_round_trip_to_accept_decline_and_cancel() -> None:
    """Seed example 3: accepted (with and without data), declined, and anything else is a cancel."""
    accepted = answer_to_elicit_result(Answer(id="a1", ok=True, data={"target": "prod"}))
    assert accepted == {"action": "accept", "content": {"target": "prod"}}

    accepted_empty = answer_to_elicit_result(Answer(id="a2", ok=True))
    assert accepted_empty == {"action": "accept", "content": {}}

    declined = answer_to_elicit_result(Answer(id="a3", ok=False, reason="declined"))
    assert declined == {"action": "decline"}

    cancelled = answer_to_elicit_result(Answer(id="a4", ok=False, reason="timeout"))
    assert cancelled == {"action": "cancel"}


def test_the_declined_constant_is_the_seeds_reason() -> None:
    """`DECLINED` is the seed's literal "declined"."""
    assert DECLINED == "declined"
    assert answer_to_elicit_result(Answer(id="a", ok=False, reason=DECLINED)) == {"action": "decline"}


def test_a_request_without_mode_from_a_2025_06_18_server_is_a_form() -> None:
    """No `mode` (2025-06-18 servers) means form mode, and its schema parses into fields."""
    req = elicitation_to_request(
        {
            "message": "Name?",
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
        }
    )

    assert req.kind is RequestKind.INPUT
    assert req.data is not None
    assert [f.name for f in parse_schema(req.data["schema"]).fields] == ["name"]


def test_a_request_without_a_schema_is_a_plain_confirm() -> None:
    """No `requestedSchema`: `data` is None, and the form has no fields (just confirm)."""
    req = elicitation_to_request({"mode": "form", "message": "Proceed?"})

    assert req.kind is RequestKind.INPUT
    assert req.data is None
    assert parse_schema(None).fields == ()


def test_ten_thousand_ids_in_a_tight_loop_are_distinct_and_well_formed() -> None:
    """Ids made within the same millisecond still differ, and all match `elc-<ts36>-<seq>`."""
    ids = [new_request_id() for _ in range(10_000)]

    assert len(set(ids)) == len(ids)
    assert all(ID_SHAPE.fullmatch(i) for i in ids)


def test_ids_made_from_several_threads_are_distinct() -> None:
    """Eight threads making ids at once never collide."""
    results: list[list[str]] = [[] for _ in range(8)]
    go = threading.Barrier(len(results))

    def make(out: list[str]) -> None:
        go.wait(timeout=5)
        out.extend(new_request_id() for _ in range(2_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)

    ids = [i for out in results for i in out]
    assert len(ids) == 16_000
    assert len(set(ids)) == len(ids)
    assert all(ID_SHAPE.fullmatch(i) for i in ids)


def test_ids_use_the_injected_clock_in_base_36() -> None:
    """The timestamp part is the clock's milliseconds in base 36."""
    assert new_request_id(lambda: 36**3).startswith("elc-1000-")

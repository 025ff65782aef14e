"""`bot.servers.calls.classify`: what one sending of a tool call comes to, from how its request ended. No I/O."""

from __future__ import annotations

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError, UrlElicitationRequiredError

from bot.core import CallStatus, ToolOutcome
from bot.servers.calls import Sent, classify

LOST = MCPError(types.CONNECTION_CLOSED, "Connection closed")


def _sent(
    *,
    result: types.CallToolResult | None = None,
    error: BaseException | None = None,
    gone: bool = False,
    timed_out: bool = False,
    answered: bool = False,
) -> Sent:
    return Sent(result=result, error=error, gone=gone, timed_out=timed_out, answered=answered)


def _outcome(sent: Sent, why_gone: str | None = None) -> ToolOutcome:
    outcome = classify(sent, "demo", 30.0, why_gone)
    assert isinstance(outcome, ToolOutcome)
    return outcome


def test_a_result_is_the_outcome_whatever_else_happened() -> None:
    """A result that came back is the call's outcome, even with the session gone and the clock run out after."""
    result = types.CallToolResult(content=[types.TextContent(text="done")])
    outcome = _outcome(_sent(result=result, timed_out=True, answered=True))
    assert (outcome.status, outcome.text) == (CallStatus.OK, "done")


@pytest.mark.parametrize("error", [None, LOST, RuntimeError("boom")])
def test_a_call_whose_server_went_away_is_unavailable_with_the_sessions_reason(
    error: BaseException | None,
) -> None:
    """The session ended under a call nobody had answered for: unavailable, saying why the session ended."""
    outcome = _outcome(_sent(error=error, gone=True, timed_out=True), why_gone="exit code 3")
    assert (outcome.status, outcome.text, outcome.again) == (
        CallStatus.UNAVAILABLE,
        "the server went away (exit code 3)",
        False,
    )
    assert _outcome(_sent(error=error, gone=True)).text == "the server went away (connection closed)"


@pytest.mark.parametrize(
    ("error", "gone"),
    [
        (None, True),
        (LOST, False),
        (httpx2.ReadError("reset"), False),
        (anyio.BrokenResourceError(), False),
        (anyio.ClosedResourceError(), False),
    ],
)
def test_a_connection_broken_after_the_persons_answer_fails_and_offers_to_run_again(
    error: BaseException | None, gone: bool
) -> None:
    """After an answer went to the server, a broken connection cannot tell whether the tool got it: a failure
    that offers **Run again**, never sent again on its own."""
    outcome = _outcome(_sent(error=error, gone=gone, answered=True))
    assert outcome.status is CallStatus.FAILED and outcome.again
    assert outcome.text == "the connection to demo broke after your answer; the server may or may not have it"


def test_a_broken_connection_before_any_answer_is_the_servers_error() -> None:
    """Before any answer, a request the connection dropped (its session not ended) is a plain failure."""
    outcome = _outcome(_sent(error=LOST))
    assert (outcome.status, outcome.text, outcome.again) == (CallStatus.FAILED, "Connection closed", False)


def test_a_call_whose_clock_ran_out_timed_out() -> None:
    """No result, no error, the call's own clock ran out: timed out after its budget."""
    outcome = _outcome(_sent(timed_out=True))
    assert (outcome.status, outcome.text) == (CallStatus.TIMED_OUT, "no result after 30 s")


def test_an_error_is_named_even_when_the_clock_ran_out_meanwhile() -> None:
    """An error the request raised is the outcome's reason, not the clock."""
    outcome = _outcome(_sent(error=MCPError(types.INVALID_PARAMS, "bad arguments"), timed_out=True))
    assert (outcome.status, outcome.text) == (CallStatus.FAILED, "bad arguments")


def test_a_transport_error_is_described_in_one_line() -> None:
    """An error that is not the server's own is described (`describe_error`)."""
    outcome = _outcome(_sent(error=RuntimeError("the pipe burst")))
    assert (outcome.status, outcome.text) == (CallStatus.FAILED, "the pipe burst")


def test_a_url_elicitation_required_error_asks_for_its_elicitations() -> None:
    """-32042: not an outcome yet, but the URL elicitations to show before the call is sent again."""
    wanted = types.ElicitRequestURLParams(
        message="Sign in", url="https://example.com/auth", elicitation_id="auth-1", mode="url"
    )
    error = MCPError.from_error_data(UrlElicitationRequiredError([wanted]).error)
    assert classify(_sent(error=error), "demo", 30.0, None) == [wanted]


def test_a_sending_that_ended_without_anything_was_cancelled() -> None:
    """No result, no error, no clock run out, the session alive: the call was cancelled (it says nothing)."""
    outcome = _outcome(_sent())
    assert (outcome.status, outcome.text) == (CallStatus.CANCELLED, "")

"""`Prompt`'s own lifecycle, without a registry: how an answer, an abort, a deadline and a completion end it."""

from __future__ import annotations

import time

import anyio
import pytest

from bot.core import Origin, Outcome, Prompt
from mapping import Answer, Request, RequestKind

ORIGIN = Origin(chat_id=7, user_id=7)


def _prompt(*, seconds: float = 60.0) -> Prompt:
    request = Request(id="r1", kind=RequestKind.INPUT, prompt="Name?", data=None)
    return Prompt(request=request, origin=ORIGIN, server="demo", deadline=time.monotonic() + seconds)


@pytest.mark.parametrize(
    ("answer", "outcome"),
    [
        (Answer(id="r1", ok=True, data={"name": "Ada"}), Outcome.ANSWERED),
        (Answer(id="r1", ok=False, reason="declined"), Outcome.DECLINED),
        (Answer(id="r1", ok=False, reason="cancelled"), Outcome.CANCELLED),
        (Answer(id="r1", ok=False, reason=Outcome.UNDELIVERABLE.value), Outcome.UNDELIVERABLE),
    ],
)
def test_a_prompt_concludes_as_its_persons_answer_says(answer: Answer, outcome: Outcome) -> None:
    """An answer by a person's (or a surface's) hand ends the prompt as that answer's reason says."""
    prompt = _prompt()
    assert prompt.answer(answer)
    assert prompt.conclude() == (answer, outcome)


def test_an_aborted_prompt_concludes_as_the_system_ended_it() -> None:
    """`abort` answers `cancel` with the outcome's reason, and the prompt ends as that outcome; only once."""
    prompt = _prompt()
    assert prompt.abort(Outcome.SERVER_GONE)
    assert not prompt.pending and prompt.aborted is Outcome.SERVER_GONE
    assert not prompt.abort(Outcome.SHUTDOWN)
    answer, outcome = prompt.conclude()
    assert (answer.ok, answer.reason, outcome) == (False, Outcome.SERVER_GONE.value, Outcome.SERVER_GONE)


@pytest.mark.anyio
async def test_an_unanswered_prompt_expires_at_its_deadline() -> None:
    """Past its deadline the wait ends, and the prompt concludes as expired: no longer pending."""
    prompt = _prompt(seconds=0.0)
    with anyio.fail_after(5):
        await prompt.wait()
    assert prompt.pending
    answer, outcome = prompt.conclude()
    assert (answer.reason, outcome, prompt.pending) == ("timeout", Outcome.EXPIRED, False)


def test_a_url_prompt_is_completed_by_hand_only_while_it_awaits_completion() -> None:
    """`complete_by_hand` releases a prompt awaiting completion once; after `stop_awaiting` it says False."""
    released: list[Prompt] = []
    prompt = _prompt()
    assert not prompt.complete_by_hand()
    prompt.await_completion(released.append)
    assert prompt.complete_by_hand() and prompt.completed.is_set() and released == [prompt]
    assert not prompt.complete_by_hand()
    other = _prompt()
    other.await_completion(released.append)
    other.stop_awaiting()
    assert not other.complete_by_hand() and released == [prompt]

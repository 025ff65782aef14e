"""Per-person limits (bot/servers/limits.py): the value object on a virtual clock, `[limits]` parsing, and the
hub refusing calls, questions and server processes with real in-process servers."""

from __future__ import annotations

import json

import anyio
import pytest

from bot.config import ConfigError, LimitsConfig
from bot.core import CallStatus
from bot.servers.limits import TELL_EVERY_S, WINDOW_S, Limit, Limits
from tests.fakes.servers.elicit import build_server
from tests.fakes.surface import ALICE, BOB, cancel, make_config, placeholder, running_hub

FORM = json.dumps({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]})


class Clock:
    """A virtual clock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limits(**values: int) -> tuple[Limits, Clock]:
    clock = Clock()
    return Limits(LimitsConfig(**values), clock), clock


def test_calls_past_the_per_minute_limit_are_refused_until_the_window_moves_on() -> None:
    """Three a minute: the fourth is refused with the wait, and a minute after the first one more may start."""
    lim, clock = limits(calls_per_minute=3)
    for _ in range(3):
        assert lim.start_call(1) is None
        lim.end_call(1)
        clock.now += 1
    refusal = lim.start_call(1)
    assert refusal is not None and refusal.limit is Limit.CALLS_PER_MINUTE
    assert refusal.reason == "at most 3 calls a minute each; try again in 57 s"
    clock.now += WINDOW_S - 3
    assert lim.start_call(1) is None


def test_a_person_is_told_about_a_limit_once_a_minute_and_every_refusal_is_counted() -> None:
    """The first refusal is to be said, the next ones within a minute silently; all are counted."""
    lim, clock = limits(calls_per_minute=1)
    assert lim.start_call(1) is None
    told = [r.tell for r in (lim.start_call(1), lim.start_call(1), lim.start_call(1)) if r is not None]
    assert told == [True, False, False]
    clock.now += max(TELL_EVERY_S, WINDOW_S)
    assert lim.start_call(1) is None
    again = lim.start_call(1)
    assert again is not None and again.tell
    assert lim.refused[Limit.CALLS_PER_MINUTE] == 4


def test_concurrent_calls_are_limited_per_person_and_freed_when_one_ends() -> None:
    """Two at once for one person; another person is unaffected; an ended call makes room."""
    lim, _ = limits(concurrent_calls=2)
    assert lim.start_call(1) is None and lim.start_call(1) is None
    refusal = lim.start_call(1)
    assert refusal is not None and refusal.limit is Limit.CONCURRENT_CALLS
    assert lim.start_call(2) is None
    lim.end_call(1)
    assert lim.start_call(1) is None


def test_zero_is_no_limit_and_nothing_is_kept_per_person_after_their_calls() -> None:
    """With every limit off a loop is never refused, and a person who is done leaves no state behind."""
    lim, _ = limits()
    for _ in range(100):
        assert lim.start_call(1) is None
    assert lim.question(1, 100) is None and lim.process(1, 100) is None
    for _ in range(100):
        lim.end_call(1)
    assert lim.refused.total() == 0
    assert not lim._running and not lim._started


def test_people_whose_last_call_is_a_minute_old_are_forgotten() -> None:
    """A thousand strangers' call times and refusal marks are gone once their minute is over."""
    lim, clock = limits(calls_per_minute=1)
    for user in range(1000):
        assert lim.start_call(user) is None
        lim.end_call(user)
        assert lim.start_call(user) is not None
    clock.now += WINDOW_S + TELL_EVERY_S
    assert lim.start_call(5000) is None
    assert list(lim._started) == [(5000, None)] and not lim._told


def test_open_questions_and_processes_are_refused_at_their_limits() -> None:
    """A person with as many open questions as allowed gets no more; past the process cap no process starts."""
    lim, _ = limits(open_questions=2, stdio_processes=3)
    assert lim.question(1, 1) is None
    question = lim.question(1, 2)
    assert question is not None and question.limit is Limit.OPEN_QUESTIONS
    assert lim.process(1, 2) is None
    process = lim.process(1, 3)
    assert process is not None and "3 server processes" in process.reason


def test_limits_are_on_by_default_only_under_allow_everyone() -> None:
    """No [limits]: off for a private bot, the public defaults for allow_everyone; set keys win either way."""
    servers = placeholder(["t"])
    assert make_config(servers).limits == LimitsConfig()
    public = make_config(servers, telegram={"allow_everyone": True})
    assert public.limits == LimitsConfig.public()
    tuned = make_config(servers, telegram={"allow_everyone": True}, limits={"calls_per_minute": 0})
    assert tuned.limits.calls_per_minute == 0 and tuned.limits.concurrent_calls == 2
    assert make_config(servers, limits={"open_questions": 1}).limits.open_questions == 1


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"calls_per_minute": -1}, "limits.calls_per_minute: must be 0 (no limit) or a positive integer"),
        ({"open_questions": "3"}, "limits.open_questions: must be 0 (no limit) or a positive integer"),
        ({"per_minute": 3}, "limits.per_minute: unknown key (did you mean calls_per_minute?)"),
    ],
)
def test_a_bad_limit_is_reported_by_its_key(table: dict[str, object], problem: str) -> None:
    """Each problem names its `limits.<key>`."""
    with pytest.raises(ConfigError) as raised:
        make_config(placeholder(["t"]), limits=table)
    assert raised.value.problems == (problem,)


@pytest.mark.anyio
async def test_past_the_process_cap_an_unshared_stdio_session_is_refused_until_one_is_idle() -> None:
    """With one server process allowed and Alice's session busy, Bob's call is refused without a session
    being opened; once Alice's call has ended, her idle session is closed to make room for Bob's."""
    config = make_config(placeholder(["t"]), limits={"stdio_processes": 1})
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, prompts, surface),
        anyio.create_task_group() as tg,
    ):
        alice_done = anyio.Event()

        async def alice() -> None:
            await hub.call_tool("t", "ask_form", {"schema_json": FORM}, ALICE)
            alice_done.set()

        tg.start_soon(alice)
        prompt = await surface.next_prompt(ALICE)
        refused = await hub.call_tool("t", "long_text", {"chars": 5}, BOB)
        assert refused.status is CallStatus.REFUSED and "1 server processes" in refused.text
        assert hub.sessions_open == 1
        assert hub.limits.refused[Limit.STDIO_PROCESSES] == 1
        prompts.answer(prompt, cancel(prompt))
        with anyio.fail_after(5):
            await alice_done.wait()
        served = await hub.call_tool("t", "long_text", {"chars": 5}, BOB)
        assert served.status is CallStatus.OK
        assert hub.pool.get(hub.servers["t"], ALICE) is None


@pytest.mark.anyio
async def test_a_question_past_a_persons_open_questions_is_cancelled_and_they_are_told() -> None:
    """With one open question each, a second concurrent question to Alice is cancelled towards the server
    and she is told why; Bob still gets his."""
    config = make_config(placeholder(["t"]), limits={"open_questions": 1})
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, prompts, surface),
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(hub.call_tool, "t", "ask_form", {"schema_json": FORM}, ALICE)
        first = await surface.next_prompt(ALICE)
        second = await hub.call_tool("t", "ask_form", {"schema_json": FORM}, ALICE)
        assert second.status is CallStatus.OK and json.loads(second.text)["action"] == "cancel"
        ((origin, server, _, reason),) = surface.unsupported
        assert (origin, server) == (ALICE, "t") and "at most 1 open questions" in reason
        tg.start_soon(hub.call_tool, "t", "ask_form", {"schema_json": FORM}, BOB)
        bobs = await surface.next_prompt(BOB)
        for prompt in (first, bobs):
            prompts.answer(prompt, cancel(prompt))


def test_an_agents_calls_count_against_its_person_and_against_its_own_half() -> None:
    """Four a minute for Alice: her agent may start two (half); its third is refused naming the agent and the
    key; Alice's own calls use the two left, and then every call of hers, by any agent too, is refused."""
    lim, _ = limits(calls_per_minute=4)
    assert lim.start_call(1, "ci") is None and lim.start_call(1, "ci") is None
    refusal = lim.start_call(1, "ci")
    assert refusal is not None and refusal.limit is Limit.CALLS_PER_MINUTE
    assert refusal.reason.startswith(
        "at most 2 calls a minute for agent ci (half of [limits] calls_per_minute)"
    )
    assert lim.start_call(1) is None and lim.start_call(1) is None
    person = lim.start_call(1)
    other_agent = lim.start_call(1, "ide")
    assert person is not None and person.reason.startswith("at most 4 calls a minute each")
    assert other_agent is not None and other_agent.reason.startswith("at most 4 calls a minute each")
    assert lim.start_call(2, "ci") is None  # another person's agent of the same name is another agent


def test_an_agents_concurrent_calls_are_half_its_persons_and_an_ended_call_frees_both() -> None:
    """Three at once for Alice: her agent runs two, its third is refused while Alice still starts one; when the
    agent's call ends, the agent and Alice each have room again, and nothing is left once all ended."""
    lim, _ = limits(concurrent_calls=3)
    assert lim.start_call(1, "ci") is None and lim.start_call(1, "ci") is None
    refused = lim.start_call(1, "ci")
    assert refused is not None and refused.limit is Limit.CONCURRENT_CALLS and "agent ci" in refused.reason
    assert lim.start_call(1) is None
    assert lim.start_call(1) is not None  # Alice's three are running (two by her agent)
    lim.end_call(1, "ci")
    assert lim.start_call(1, "ci") is None
    for agent in ("ci", "ci", None):
        lim.end_call(1, agent)
    assert not lim._running


def test_an_agents_refusals_are_told_apart_from_its_persons() -> None:
    """The agent hearing about a limit does not silence the person's own first refusal of that limit."""
    lim, _ = limits(calls_per_minute=2)
    assert lim.start_call(1, "ci") is None
    agent = lim.start_call(1, "ci")
    assert lim.start_call(1) is None
    person = lim.start_call(1)
    assert agent is not None and agent.tell and person is not None and person.tell

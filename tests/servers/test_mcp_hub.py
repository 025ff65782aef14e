"""The MCP side end to end: real test servers (in-process, stdio), the real hub and registry, a recording surface."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import pytest

from bot.core import CallStatus, Origin, Outcome, Progress, Prompt, PromptRegistry, ToolOutcome
from bot.servers.hub import Hub
from mapping import Answer, RequestKind, SetBool, Submit, TextInput
from tests.fakes.servers.elicit import build_server
from tests.fakes.servers.http import serve_http
from tests.fakes.surface import (
    ALICE,
    BOB,
    RecordingSurface,
    cancel,
    decline,
    fill,
    make_config,
    placeholder,
    running_hub,
    stdio_server,
)

pytestmark = pytest.mark.anyio

T = TypeVar("T")

PROTOCOLS = ["legacy", "auto"]
FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2},
        "guests": {"type": "integer", "title": "Guests", "minimum": 1, "maximum": 12},
        "outdoor": {"type": "boolean", "title": "Outdoor"},
    },
    "required": ["name", "guests", "outdoor"],
}


Parts = tuple[Hub, PromptRegistry, RecordingSurface]


def in_process(protocol: str, **extra: object) -> AbstractAsyncContextManager[Parts]:
    return running_hub(
        make_config(placeholder(["t"], protocol=protocol, **extra)), in_process={"t": build_server}
    )


TRANSPORTS = ["memory", "stdio", "http"]


@asynccontextmanager
async def connected(transport: str, protocol: str, **extra: Any) -> AsyncIterator[Parts]:
    """The test server reached in-process, as a stdio subprocess, or over streamable HTTP."""
    if transport == "memory":
        async with in_process(protocol, **extra) as parts:
            yield parts
    elif transport == "stdio":
        config = make_config({"t": stdio_server("tests.fakes.servers.elicit", protocol=protocol, **extra)})
        async with running_hub(config) as parts:
            yield parts
    else:
        async with (
            serve_http(build_server) as url,
            running_hub(make_config({"t": {"url": url, "protocol": protocol, **extra}})) as parts,
        ):
            yield parts


def server_saw(text: str) -> dict[str, object]:
    saw: dict[str, object] = json.loads(text)
    return saw


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_form_answer_reaches_the_server_as_typed_content(transport: str, protocol: str) -> None:
    """Typed text becomes JSON types on the wire (an integer, a boolean), in both protocol eras."""
    async with connected(transport, protocol) as (hub, prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []

        async def call() -> None:
            results.append(await hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE))

        tg.start_soon(call)
        prompt = await surface.next_prompt(ALICE)
        assert prompt.request.kind is RequestKind.INPUT and prompt.server == "t"
        assert prompts.answer(
            prompt, fill(prompt, TextInput("Ada"), TextInput("7.0"), SetBool(True), Submit())
        )
        assert await surface.outcome_of(prompt) is Outcome.ANSWERED
    (result,) = results
    assert result.status is CallStatus.OK
    assert server_saw(result.text) == {
        "action": "accept",
        "content": {"name": "Ada", "guests": 7, "outdoor": True},
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("answer", "action", "outcome"),
    [(decline, "decline", Outcome.DECLINED), (cancel, "cancel", Outcome.CANCELLED)],
)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_decline_and_cancel_reach_the_server_without_content(
    transport: str, protocol: str, answer: Callable[[Prompt], Answer], action: str, outcome: Outcome
) -> None:
    """Decline and cancel are distinct on the wire and settle the card accordingly."""
    async with connected(transport, protocol) as (hub, prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        tg.start_soon(
            lambda: _collect(
                results, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE)
            )
        )
        prompt = await surface.next_prompt()
        prompts.answer(prompt, answer(prompt))
        assert await surface.outcome_of(prompt) is outcome
    assert server_saw(results[0].text) == {"action": action, "content": None}


async def _collect(into: list[T], awaitable: Awaitable[T]) -> None:
    into.append(await awaitable)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_url_consent_is_an_accept_without_content(transport: str, protocol: str) -> None:
    """URL mode: consent is `accept` with no content; on 2025-11-25 the completion notice settles the card."""
    async with connected(transport, protocol) as (hub, prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        tg.start_soon(lambda: _collect(results, hub.call_tool("t", "ask_url", {}, ALICE)))
        prompt = await surface.next_prompt()
        assert prompt.request.kind is RequestKind.AUTHORIZATION
        assert prompt.request.url == "https://example.com/test/login"
        from mapping import Answer

        prompts.answer(prompt, Answer(prompt.request.id, ok=True))
        if protocol == "legacy":
            assert await surface.wait_for(
                lambda: surface.outcomes(prompt) == [Outcome.ANSWERED, Outcome.COMPLETED]
            )
    assert server_saw(results[0].text)["action"] == "accept"
    assert not prompts.asking(ALICE, "t")  # the link's flow is over, whichever way it completed
    if protocol != "legacy":
        assert surface.outcomes(prompt) == [Outcome.ANSWERED]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_url_elicitation_required_shows_consent_then_retries_the_call(
    transport: str, protocol: str
) -> None:
    """-32042: the URL elicitation becomes a consent card; once the person says it is done, the call is retried."""
    from mapping import Answer

    async with connected(transport, protocol) as (hub, prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        tg.start_soon(lambda: _collect(results, hub.call_tool("t", "needs_auth", {}, ALICE)))
        prompt = await surface.next_prompt()
        assert prompt.awaits_completion and (prompt.request.url or "").startswith(
            "https://example.com/test/authorize"
        )
        prompts.answer(prompt, Answer(prompt.request.id, ok=True))
        await surface.wait_for(lambda: surface.outcomes(prompt) == [Outcome.ANSWERED])
        assert prompts.asking(ALICE, "t")  # consented: the person is off in the browser, the card still out
        assert prompts.complete_by_hand(prompt)
    assert not prompts.asking(ALICE, "t")
    assert results[0].status is CallStatus.OK and results[0].text == "authorized"
    assert surface.outcomes(prompt) == [Outcome.ANSWERED, Outcome.COMPLETED]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_declined_authorization_does_not_retry(protocol: str) -> None:
    """Declining a -32042 consent ends the call with a clear message, and no retry happens."""
    async with in_process(protocol) as (hub, prompts, surface):
        async with anyio.create_task_group() as tg:
            results: list[ToolOutcome] = []
            tg.start_soon(lambda: _collect(results, hub.call_tool("t", "needs_auth", {}, ALICE)))
            prompt = await surface.next_prompt()
            prompts.answer(prompt, decline(prompt))
        assert results[0].status is CallStatus.CANCELLED and "declined" in results[0].text
        assert len(surface.shown) == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"address": {"type": "object", "properties": {}}}},
        {"type": "object", "properties": {"n": {"type": "wizard"}}},
        {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "integer"}}}},
    ],
)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_unsupported_schema_is_a_json_rpc_error_and_the_person_is_told(
    transport: str, protocol: str, schema: dict[str, Any]
) -> None:
    """Never a fake decline: the server gets invalid-params, the surface reports why."""
    async with connected(transport, protocol) as (hub, _prompts, surface):
        result = await hub.call_tool("t", "ask_form", {"schema_json": json.dumps(schema)}, ALICE)
    assert result.status in (CallStatus.FAILED, CallStatus.TOOL_ERROR)
    assert "unsupported elicitation" in result.text
    assert not surface.shown
    ((origin, server, _message, reason),) = surface.unsupported
    assert origin == ALICE and server == "t" and reason


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_non_object_root_schema_is_an_error_for_the_server_never_a_prompt(protocol: str) -> None:
    """The SDK refuses a non-object root before our callback; the server still sees an error, not a decline."""
    async with in_process(protocol) as (hub, _prompts, surface):
        result = await hub.call_tool("t", "ask_form", {"schema_json": json.dumps({"type": "array"})}, ALICE)
    assert result.status in (CallStatus.FAILED, CallStatus.TOOL_ERROR)
    assert "decline" not in result.text and not surface.shown


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_non_web_url_is_declined_and_reported(protocol: str) -> None:
    """A javascript: URL never becomes a prompt: the server hears decline, the person is warned."""
    async with in_process(protocol) as (hub, _prompts, surface):
        result = await hub.call_tool("t", "ask_url", {"url": "javascript:alert(1)"}, ALICE)
    assert server_saw(result.text)["action"] == "decline"
    assert not surface.shown
    assert "javascript" in surface.unsupported[0][3]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_unanswered_prompt_expires_and_the_server_gets_cancel(protocol: str) -> None:
    """The prompt's own timeout bounds the wait; the server hears cancel."""
    config = make_config(placeholder(["t"], protocol=protocol), elicitation={"timeout_s": 0.2})
    async with running_hub(config, in_process={"t": build_server}) as (hub, _prompts, surface):
        result = await hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE)
        (prompt,) = surface.shown
        assert surface.outcomes(prompt) == [Outcome.EXPIRED]
    assert server_saw(result.text) == {"action": "cancel", "content": None}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_time_spent_answering_does_not_count_against_the_call_timeout(protocol: str) -> None:
    """A call with a short own timeout survives a person who takes longer than that to answer."""
    call_timeout = 0.2
    async with (
        in_process(protocol, call_timeout_s=call_timeout) as (hub, prompts, surface),
        anyio.create_task_group() as tg,
    ):
        results: list[ToolOutcome] = []
        tg.start_soon(
            lambda: _collect(
                results, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE)
            )
        )
        prompt = await surface.next_prompt()
        await anyio.sleep(call_timeout * 3)  # the passing of time is the thing under test
        prompts.answer(prompt, fill(prompt, TextInput("Ada"), TextInput("2"), SetBool(False), Submit()))
    assert results[0].status is CallStatus.OK


async def test_a_call_that_never_returns_times_out_by_its_own_clock() -> None:
    """With no prompt open, `call_timeout_s` ends a hung call."""
    async with in_process("auto", call_timeout_s=0.2) as (hub, _prompts, _surface):
        result = await hub.call_tool("t", "never_answers", {}, ALICE)
    assert result.status is CallStatus.TIMED_OUT


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancel_answers_the_question_with_cancel_and_the_tool_ends_in_its_own_way(
    transport: str, protocol: str
) -> None:
    """/cancel answers a pending question with `cancel` towards its server, as the Cancel button does (in the
    2026-07-28 era that answer travels in the call's next round), and the tool's own result comes back."""
    async with connected(transport, protocol) as (hub, _prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        tg.start_soon(
            lambda: _collect(
                results, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE)
            )
        )
        prompt = await surface.next_prompt()
        assert hub.cancel(BOB) == 0
        assert hub.cancel(ALICE) == 1
    assert surface.outcomes(prompt) == [Outcome.CANCELLED]
    assert results[0].status is CallStatus.OK
    assert server_saw(results[0].text) == {"action": "cancel", "content": None}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_cancel_stops_a_call_with_no_question_pending(protocol: str) -> None:
    """A call that asked nothing (the tool just runs) is cancelled outright by /cancel."""
    async with in_process(protocol) as (hub, _prompts, _surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        running = anyio.Event()

        async def on_progress(_progress: Progress) -> None:
            running.set()

        tg.start_soon(
            lambda: _collect(results, hub.call_tool("t", "runs_until_cancelled", {}, ALICE, on_progress))
        )
        with anyio.fail_after(10):
            await running.wait()  # the server is running the tool
        assert hub.cancel(ALICE) == 1
    assert results[0].status is CallStatus.CANCELLED and results[0].text == ""  # the status says it


async def test_cancel_tells_apart_a_persons_call_that_asks_from_one_that_does_not() -> None:
    """2026-07-28, two calls of one person on one session: /cancel answers the question of the one that asks
    (its tool reports the cancel) and cancels the other outright."""
    async with in_process("auto") as (hub, _prompts, surface), anyio.create_task_group() as tg:
        asking: list[Any] = []
        silent: list[Any] = []
        tg.start_soon(lambda: _collect(silent, hub.call_tool("t", "never_answers", {}, ALICE)))
        tg.start_soon(
            lambda: _collect(asking, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE))
        )
        await surface.next_prompt()
        assert hub.cancel(ALICE) == 2
    assert server_saw(asking[0].text) == {"action": "cancel", "content": None}
    assert silent[0].status is CallStatus.CANCELLED


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_progress_notifications_reach_the_surface(protocol: str) -> None:
    """Each progress notification arrives, in order, with total and message."""
    seen: list[Progress] = []

    async def sink(progress: Progress) -> None:
        seen.append(progress)

    async with in_process(protocol) as (hub, _prompts, _surface):
        result = await hub.call_tool("t", "slow_progress", {"n": 3}, ALICE, sink)
    assert result.text == "done 3"
    assert [(p.progress, p.total, p.message) for p in seen] == [(i, 3, f"step {i}/3") for i in (1, 2, 3)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_two_people_at_once_each_get_only_their_own_prompt(protocol: str) -> None:
    """Concurrent calls by two users: each prompt goes to its caller, each server request gets its own answer."""
    async with in_process(protocol) as (hub, prompts, surface):
        results: dict[str, ToolOutcome] = {}

        async def call(who: str, origin: Origin) -> None:
            results[who] = await hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, origin)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "alice", ALICE)
            tg.start_soon(call, "bob", BOB)
            alice_prompt = await surface.next_prompt(ALICE)
            bob_prompt = await surface.next_prompt(BOB)
            prompts.answer(
                bob_prompt, fill(bob_prompt, TextInput("Bob"), TextInput("2"), SetBool(False), Submit())
            )
            prompts.answer(
                alice_prompt, fill(alice_prompt, TextInput("Alice"), TextInput("9"), SetBool(True), Submit())
            )
        assert len(surface.shown) == 2
    assert server_saw(results["alice"].text)["content"] == {"name": "Alice", "guests": 9, "outdoor": True}
    assert server_saw(results["bob"].text)["content"] == {"name": "Bob", "guests": 2, "outdoor": False}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_sessions_are_per_person_unless_shared(protocol: str) -> None:
    """Two people get two sessions; `shared = true` gives them one, and prompts still reach the caller."""
    async with in_process(protocol) as (hub, _prompts, _surface):
        a = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        b = json.loads((await hub.call_tool("t", "whoami", {}, BOB)).text)
        assert a["connection"] != b["connection"]
    async with in_process(protocol, shared=True) as (hub, prompts, surface):
        a = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        b = json.loads((await hub.call_tool("t", "whoami", {}, BOB)).text)
        assert a["connection"] == b["connection"]
        async with anyio.create_task_group() as tg:
            tg.start_soon(hub.call_tool, "t", "ask_form", {"schema_json": json.dumps(FORM)}, BOB)
            prompt = await surface.next_prompt()
            assert prompt.origin == BOB
            prompts.answer(prompt, cancel(prompt))


async def test_shutdown_cancels_pending_prompts_towards_the_server() -> None:
    """Stopping the hub settles every pending prompt as SHUTDOWN and the server hears cancel."""
    results: list[ToolOutcome] = []
    async with in_process("legacy") as (hub, _prompts, surface), anyio.create_task_group() as tg:
        tg.start_soon(
            lambda: _collect(
                results, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, ALICE)
            )
        )
        prompt = await surface.next_prompt()
        await hub.aclose()
    assert surface.outcomes(prompt) == [Outcome.SHUTDOWN]
    assert server_saw(results[0].text) == {"action": "cancel", "content": None}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_server_killed_while_a_prompt_is_pending_settles_it_and_the_next_call_reconnects(
    protocol: str,
) -> None:
    """Over stdio the server exits mid-question: the card settles, the call fails cleanly, the next call works."""
    config = make_config({"t": stdio_server("tests.fakes.servers.elicit", protocol=protocol)})
    async with running_hub(config) as (hub, _prompts, surface):
        first = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        result = await hub.call_tool("t", "die_during_elicitation", {}, ALICE)
        assert result.status is CallStatus.UNAVAILABLE
        for prompt in surface.shown:
            assert surface.outcomes(prompt) == [Outcome.SERVER_GONE]
        again = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        assert again["pid"] != first["pid"]


async def test_unreachable_server_is_reported_and_retried_with_backoff() -> None:
    """A server whose command does not exist is unavailable with a reason; the others keep working."""
    config = make_config({"broken": {"command": "/nonexistent/toolnexus-server"}, **placeholder(["t"])})
    async with running_hub(config, in_process={"t": build_server}) as (hub, _prompts, _surface):
        first = await hub.call_tool("broken", "x", {}, ALICE)
        assert first.status is CallStatus.UNAVAILABLE and first.text
        second = await hub.call_tool("broken", "x", {}, ALICE)
        assert second.status is CallStatus.UNAVAILABLE and "retrying in" in second.text
        assert (await hub.call_tool("t", "whoami", {}, ALICE)).status is CallStatus.OK


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_over_streamable_http_forms_urls_and_two_people_work(protocol: str) -> None:
    """The same flows over real HTTP: a form answer, a URL consent, and per-person sessions."""
    from mapping import Answer
    from tests.fakes.servers.http import serve_http

    async with serve_http(build_server) as url:
        config = make_config(
            {"t": {"url": url, "protocol": protocol, "headers": {"Authorization": "Bearer t0k"}}}
        )
        async with running_hub(config) as (hub, prompts, surface):
            async with anyio.create_task_group() as tg:
                results: dict[str, ToolOutcome] = {}

                async def call(who: str, origin: Origin, tool: str, args: dict[str, Any]) -> None:
                    results[who] = await hub.call_tool("t", tool, args, origin)

                tg.start_soon(call, "alice", ALICE, "ask_form", {"schema_json": json.dumps(FORM)})
                tg.start_soon(call, "bob", BOB, "ask_url", {})
                form = await surface.next_prompt(ALICE)
                link = await surface.next_prompt(BOB)
                prompts.answer(link, Answer(link.request.id, ok=True))
                prompts.answer(form, fill(form, TextInput("Ada"), TextInput("3"), SetBool(True), Submit()))
            assert server_saw(results["alice"].text)["content"] == {
                "name": "Ada",
                "guests": 3,
                "outdoor": True,
            }
            assert server_saw(results["bob"].text)["action"] == "accept"
            if protocol == "legacy":
                await surface.wait_for(lambda: Outcome.COMPLETED in surface.outcomes(link))
                a = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
                b = json.loads((await hub.call_tool("t", "whoami", {}, BOB)).text)
                assert a["caller"] != b["caller"]  # two MCP sessions: one per person


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_2025_06_18_request_without_mode_is_a_form(protocol: str) -> None:
    """No `mode` (as 2025-06-18 servers send) is treated as a form, and its answer is accepted."""
    params = {
        "message": "Pick a colour",
        "requestedSchema": {
            "type": "object",
            "properties": {"c": {"type": "string", "enum": ["red", "blue"]}},
        },
    }
    async with in_process(protocol) as (hub, prompts, surface), anyio.create_task_group() as tg:
        results: list[ToolOutcome] = []
        tg.start_soon(
            lambda: _collect(
                results, hub.call_tool("t", "ask_raw", {"params_json": json.dumps(params)}, ALICE)
            )
        )
        prompt = await surface.next_prompt()
        assert prompt.request.kind is RequestKind.INPUT and prompt.request.prompt == "Pick a colour"
        from mapping import Choose

        prompts.answer(prompt, fill(prompt, Choose(1), Submit()))
    assert server_saw(results[0].text) == {"action": "accept", "content": {"c": "blue"}}


async def test_past_max_open_the_least_recently_used_idle_session_is_closed_and_reopened_on_need() -> None:
    """`sessions.max_open = 1`: Bob's call closes Alice's idle session; hers reopens on her next call, and a
    closed session leaves nothing behind for its person (the hub keeps no entry per past caller)."""
    config = make_config(placeholder(["t"], protocol="legacy"), sessions={"max_open": 1})
    async with running_hub(config, in_process={"t": build_server}) as (hub, _prompts, _surface):
        alice = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        bob = json.loads((await hub.call_tool("t", "whoami", {}, BOB)).text)
        again = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        assert len({alice["connection"], bob["connection"], again["connection"]}) == 3
        await anyio.wait_all_tasks_blocked()  # Bob's evicted session ends in its owner task
        assert list(hub.pool._connecting) == list(
            hub.pool.connections
        )  # only the open session's lock is kept


@pytest.mark.parametrize("ending", ["answered", "expired", "withdrawn"])
async def test_a_card_is_out_for_its_person_and_server_until_it_is_settled(ending: str) -> None:
    """`PromptRegistry.asking` (what holds a call's status message back) is true for exactly the person and
    server whose card is waiting, and false again however the card ended: answered, expired, or withdrawn
    by the server."""
    form = {"schema_json": json.dumps(FORM)}
    tool, args = ("server_cancels", {"timeout_s": 0.2}) if ending == "withdrawn" else ("ask_form", form)
    config = make_config(placeholder(["t"], protocol="legacy"))
    timeout_s = 0.2 if ending == "expired" else 60
    async with (
        running_hub(config, in_process={"t": build_server}, timeout_s=timeout_s) as (hub, prompts, surface),
        anyio.create_task_group() as tg,
    ):
        results: list[Any] = []
        tg.start_soon(lambda: _collect(results, hub.call_tool("t", tool, args, ALICE)))
        prompt = await surface.next_prompt()
        assert prompts.asking(ALICE, "t")
        assert not prompts.asking(BOB, "t") and not prompts.asking(ALICE, "other")
        if ending == "answered":
            prompts.answer(prompt, fill(prompt, TextInput("Ada"), TextInput("2"), SetBool(False), Submit()))
    assert surface.outcomes(prompt) == [
        {"answered": Outcome.ANSWERED, "expired": Outcome.EXPIRED, "withdrawn": Outcome.SERVER_CANCELLED}[
            ending
        ]
    ]
    assert not prompts.asking(ALICE, "t")


async def test_an_idle_session_is_closed_after_its_timeout_but_one_waiting_on_a_person_is_kept() -> None:
    """`sessions.idle_timeout_s`: a session nobody used for that long is closed and the next call opens a
    fresh one; a session whose call is waiting for its person's answer is kept, however long that takes."""
    config = make_config(placeholder(["t"], protocol="legacy"), sessions={"idle_timeout_s": 0.2})
    async with (
        running_hub(config, in_process={"t": build_server}) as (hub, prompts, surface),
        anyio.create_task_group() as tg,
    ):
        alice = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        (idle,) = hub.pool.connections.values()
        results: list[Any] = []
        tg.start_soon(
            lambda: _collect(results, hub.call_tool("t", "ask_form", {"schema_json": json.dumps(FORM)}, BOB))
        )
        prompt = await surface.next_prompt(BOB)
        with anyio.fail_after(10):
            await idle.finished.wait()  # the sweep (once a second at most) closed it
        (waiting,) = hub.pool.connections.values()
        assert waiting is not idle and not waiting.finished.is_set()
        prompts.answer(prompt, fill(prompt, TextInput("Ada"), TextInput("2"), SetBool(False), Submit()))
        again = json.loads((await hub.call_tool("t", "whoami", {}, ALICE)).text)
        assert again["connection"] != alice["connection"]
    assert results[0].status is CallStatus.OK


async def test_a_consented_link_is_out_until_its_call_ends_without_a_completion() -> None:
    """2025-11-25: a link consented to but never reported complete holds the call's status back while the
    call runs; once every call on the session has ended it is settled as done, and no longer out."""
    from mapping import Answer

    async with in_process("legacy") as (hub, prompts, surface):
        async with anyio.create_task_group() as tg:
            results: list[Any] = []
            tg.start_soon(
                lambda: _collect(results, hub.call_tool("t", "ask_url", {"complete": False}, ALICE))
            )
            prompt = await surface.next_prompt()
            prompts.answer(prompt, Answer(prompt.request.id, ok=True))
        assert surface.outcomes(prompt) == [Outcome.ANSWERED, Outcome.COMPLETED]
        assert not prompts.asking(ALICE, "t")
    assert server_saw(results[0].text)["action"] == "accept"

"""Hostile input through the whole bridge: generated (valid, odd, broken) elicitations from a real MCP server,
markup injection, huge and degenerate forms, dangerous URLs, forged taps, strangers and unknown chats.

Properties run against one long-lived hub per protocol (fast bulk) and one long-lived Telegram scene (fewer
examples): whatever a server sends, it gets an answer or a JSON-RPC error, and Telegram never sees a 400.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver import MCPServer

from bot.core import CallStatus, Prompt, PromptRegistry
from bot.servers.hub import Hub
from mapping import (
    Answer,
    Ask,
    BoolField,
    ChoiceField,
    Choose,
    Done,
    Finished,
    Keep,
    MultiChoiceField,
    NumberField,
    Review,
    SetBool,
    Skip,
    Submit,
    TextField,
    TextFormat,
    TextInput,
    Toggle,
    answer_to_elicit_result,
    apply,
    check_url,
    start,
)
from tests.fakes.servers.elicit import build_server
from tests.fakes.surface import ALICE, RecordingSurface, make_config, placeholder
from tests.fakes.telegram import FakeUser, Msg
from tests.mapping.test_properties import KEYWORDS, inputs, junk, schemas
from tests.telegram.harness import Chat, bot_scene, is_result, result_body

pytestmark = pytest.mark.anyio

BULK = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
CALL_BUDGET_S = 10
"""Generous: every prompt here is answered at once, so a call that takes this long is stuck."""

# -- generated elicitations --------------------------------------------------------------------------------

names = st.text(max_size=6) | st.sampled_from(["", "a:b", "<b>", "x" * 300, "\u202e\u200b", "__proto__"])


@st.composite
def odd_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """Valid forms with things the spec does not forbid: stray keywords, unknown required names, odd names."""
    schema = draw(schemas())
    props = schema["properties"]
    for name in draw(st.lists(names, max_size=2)):
        props[name] = draw(st.sampled_from(list(props.values()) or [{"type": "string"}]))
    schema["required"] = schema["required"] + draw(st.lists(names, max_size=2))
    schema.update(
        draw(
            st.dictionaries(st.sampled_from([*KEYWORDS, "$schema", "additionalProperties"]), junk, max_size=2)
        )
    )
    if draw(st.booleans()):
        schema.pop("type", None)
    return schema


broken_schemas = (
    junk
    | st.dictionaries(st.sampled_from(KEYWORDS), junk, max_size=5)
    | st.builds(
        lambda props: {"type": "object", "properties": props}, st.dictionaries(names, junk, max_size=3)
    )
)
requested_schemas = schemas() | schemas() | odd_schemas() | broken_schemas

raw_params = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["form", "url", "", "wizard"]) | junk,
        "message": st.text(max_size=40) | junk,
        "requestedSchema": requested_schemas,
        "url": st.sampled_from(
            [
                "https://example.com/login",
                "http://127.0.0.1/x",
                "https://xn--80ak6aa92e.com/",
                "javascript:alert(1)",
                "tg://resolve?domain=x",
                "https:///nohost",
                "",
            ]
        )
        | st.text(max_size=20)
        | junk,
        "elicitationId": st.text(max_size=8) | junk,
    },
)


@dataclass(frozen=True, slots=True)
class Elicitation:
    """One tool call on the test server that makes it ask something."""

    tool: str
    arguments: dict[str, Any]


def forms(schema: st.SearchStrategy[Any]) -> st.SearchStrategy[Elicitation]:
    return st.builds(
        lambda schema, message: Elicitation(
            "ask_form", {"schema_json": json.dumps(schema), "message": message}
        ),
        schema,
        st.text(max_size=60),
    )


elicitations = forms(requested_schemas) | st.builds(
    lambda params: Elicitation("ask_raw", {"params_json": json.dumps(params)}), raw_params
)
mostly_forms = forms(schemas()) | elicitations
"""For the slower Telegram scene: half of the examples are forms a person can actually walk through."""


# -- a person who answers at once ----------------------------------------------------------------------------


@dataclass
class AnsweringSurface(RecordingSurface):
    """Records like `RecordingSurface`, and answers each prompt as soon as it is shown, as `respond` says."""

    prompts: PromptRegistry | None = None
    respond: Callable[[Prompt], Answer] | None = None
    answers: dict[str, Answer] | None = None

    async def show_prompt(self, prompt: Prompt) -> None:
        await super().show_prompt(prompt)
        assert self.prompts is not None and self.respond is not None and self.answers is not None
        answer = self.respond(prompt)
        self.answers[prompt.token] = answer
        assert self.prompts.answer(prompt, answer)


@dataclass(frozen=True, slots=True)
class Person:
    """How a generated person answers: some random taps and typing first, then a sensible walk to the end;
    drawn up front, because a draw inside the bot's tasks would unwind them (hypothesis stops with BaseException).
    """

    first: str
    """"walk" (fill the form in), or an immediate "declined" / "cancelled"."""
    fiddles: tuple[Any, ...]
    skips_optional: bool
    url_answer: str
    gives_up: str

    def respond(self, prompt: Prompt) -> Answer:
        request = prompt.request
        if prompt.form is None:
            ok = self.url_answer == "accept"
            return Answer(request.id, ok=ok, reason=None if ok else self.url_answer)
        if self.first != "walk":
            return Answer(request.id, ok=False, reason=self.first)
        state = start(prompt.form)
        for sent in self.fiddles:
            state = apply(state, sent)
        for _ in range(4 * len(prompt.form.fields) + 4):
            if isinstance(state.step, Finished):
                return Answer(request.id, ok=True, data=dict(state.step.content))
            state = apply(state, self._sensible(state.step))
        return Answer(request.id, ok=False, reason=self.gives_up)

    def _sensible(self, step: Ask | Review) -> Any:
        if isinstance(step, Review):
            return Submit()
        field, selected = step.field, step.selected
        if step.current is not None and not step.error:
            return Keep()
        if not field.required and self.skips_optional:
            return Skip()
        match field:
            case BoolField():
                return SetBool(True)
            case ChoiceField():
                return Choose(0)
            case MultiChoiceField() if len(selected) < (field.min_items or 0):
                return Toggle(next(i for i, o in enumerate(field.options) if o.value not in selected))
            case MultiChoiceField():
                return Done()
            case NumberField():
                low = 0 if field.minimum is None else max(0, field.minimum)
                value = low if field.maximum is None else min(low, field.maximum)
                if field.integer:
                    value = (
                        math.ceil(value)
                        if field.maximum is None or math.ceil(value) <= field.maximum
                        else math.floor(value)
                    )
                return TextInput(str(value))
            case TextField(format=TextFormat() as fmt):
                return TextInput(TYPICAL[fmt])
            case TextField(pattern=str() as pattern):
                return TextInput(PATTERN_EXAMPLES.get(pattern, "x"))
            case TextField():
                return TextInput("x" * max(1, field.min_length or 1))
        return Skip()


TYPICAL = {
    TextFormat.EMAIL: "ada@example.com",
    TextFormat.URI: "https://example.com/a",
    TextFormat.DATE: "2025-06-18",
    TextFormat.DATE_TIME: "2025-06-18T14:30:00Z",
}
PATTERN_EXAMPLES = {
    "^[A-Z]{3}$": "ABC",
    "[0-9]": "7",
    "^[a-z]+(-[a-z]+)*$": "ab-cd",
    r"^\d{3}-\d{4}$": "123-4567",
    "x": "x",
    "^(ab|cd)+$": "abcd",
}

people = st.builds(
    Person,
    st.sampled_from(["walk", "walk", "declined", "cancelled"]),
    st.lists(inputs, max_size=6).map(tuple),
    st.booleans(),
    st.sampled_from(["accept", "declined", "cancelled"]),
    st.sampled_from(["declined", "cancelled"]),
)


# -- the bulk: the hub over a recording surface ----------------------------------------------------------------


@dataclass(repr=False)
class Bridge:
    """A running hub and registry over an answering surface (one per protocol, shared by all examples)."""

    hub: Hub
    prompts: PromptRegistry
    surface: AnsweringSurface

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"<Bridge {len(self.surface.shown)} prompts shown>"


@pytest.fixture(params=["legacy", "auto"])
async def bridge(request: pytest.FixtureRequest) -> AsyncIterator[Bridge]:
    surface = AnsweringSurface()
    prompts = PromptRegistry(surface, timeout_s=CALL_BUDGET_S)
    surface.prompts = prompts
    config = make_config(placeholder(["t"], protocol=request.param))
    async with Hub(config, prompts, transport=lambda _server: build_server()) as hub:
        yield Bridge(hub, prompts, surface)


@BULK
@given(elicitation=elicitations, person=people)
async def test_whatever_a_server_asks_it_gets_an_answer_or_an_error_and_the_bridge_keeps_running(
    bridge: Bridge, elicitation: Elicitation, person: Person
) -> None:
    """Generated questions (valid, odd, broken) from a real server: the call ends promptly with the server's
    view of our answer, a JSON-RPC error or a tool error; never a crash of ours, a lost session or a hang."""
    surface = bridge.surface
    surface.respond, surface.answers = person.respond, {}
    shown, reported = len(surface.shown), len(surface.unsupported)
    with anyio.fail_after(CALL_BUDGET_S):
        outcome = await bridge.hub.call_tool("t", elicitation.tool, elicitation.arguments, ALICE)
    assert outcome.status in (CallStatus.OK, CallStatus.TOOL_ERROR, CallStatus.FAILED), outcome
    event(f"{outcome.status.value}, {'a prompt' if len(surface.shown) > shown else 'no prompt'}")
    assert "failed to handle" not in outcome.text  # our callback never raised
    if "unsupported elicitation" in outcome.text:  # refused by us: the person is told why
        assert len(surface.unsupported) == reported + 1
    prompts = surface.shown[shown:]
    for prompt in prompts:
        assert surface.outcomes(prompt), "every prompt is settled"
    if outcome.status is CallStatus.OK:
        seen = json.loads(outcome.text)
        if prompts:
            (prompt,) = prompts
            expected = answer_to_elicit_result(surface.answers[prompt.token])
            assert seen["action"] == expected["action"]
            event(f"server saw {seen['action']}")
            if prompt.form is not None and expected["action"] == "accept":
                assert seen["content"] == expected["content"]
        else:  # only a refused link is answered without a prompt, and the person is told
            assert seen["action"] == "decline" and len(surface.unsupported) == reported + 1
    with anyio.fail_after(CALL_BUDGET_S):
        alive = await bridge.hub.call_tool("t", "whoami", {}, ALICE)
    assert alive.status is CallStatus.OK


# -- fewer examples through the whole Telegram scene ---------------------------------------------------------

SCENE = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

moves = st.lists(
    st.one_of(
        st.tuples(st.just("press"), st.integers(0, 30)),
        st.tuples(
            st.just("reply"),
            st.sampled_from(
                ["1", "yes", "no", "2025-06-18", "ada@example.com", "https://example.com", "x", "0"]
            )
            | st.text(min_size=1, max_size=12).filter(lambda t: t.strip() and not t.startswith("/")),
        ),
    ),
    max_size=5,
)


PEOPLE = range(20_000, 30_000)
"""Allowed users for the long-lived scene: each example gets its own private chat (its own flood bucket)."""


@dataclass(repr=False)
class Stage:
    """One running bot for all examples of a test, and a fresh person (private chat) per example."""

    scene: Chat
    _next: int = 0

    def person(self) -> FakeUser:
        self._next += 1
        return self.scene.fake.user(id=PEOPLE[self._next], first_name=f"P{self._next}")

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"<Stage {self._next} people>"


@pytest.fixture
async def stage() -> AsyncIterator[Stage]:
    async with bot_scene(protocol="legacy", allowed=list(PEOPLE)) as s:
        yield Stage(s)


CANCEL_REPLY = re.compile(r"Cancelled \d+ pending question\(s\) and call\(s\)\.|Nothing to cancel here\.")
"""The answer to /cancel (a settled card also says "Cancelled", so match the whole reply)."""


def is_card(msg: Msg) -> bool:
    return any(b.callback_data for row in msg.reply_markup for b in row)


@SCENE
@given(elicitation=mostly_forms, script=moves)
async def test_whatever_a_server_asks_telegram_never_sees_a_400(
    stage: Stage, elicitation: Elicitation, script: list[tuple[str, Any]]
) -> None:
    """The same generated questions shown in Telegram, tapped and answered at random, then /cancel: the call
    ends, no card is left live, and the fake Bot API never had to refuse a request."""
    fake, person = stage.scene.fake, stage.person()
    call = await person.send(f"/call t {elicitation.tool} {json.dumps(elicitation.arguments)}")

    def finished() -> bool:
        return any(is_result(m, call) for m in fake.messages(person, from_bot=True))

    def live_cards() -> list[Msg]:
        return [
            m for m in fake.messages(person, from_bot=True) if m.message_id > call.message_id and is_card(m)
        ]

    def moved_on(reply: Msg, card: Msg) -> Callable[[Msg], bool]:
        """Something came after `reply` in its chat, or `card` stopped being a card, or the call ended."""
        return lambda m: (
            (m.chat_id == reply.chat_id and m.message_id > reply.message_id)
            or not is_card(card)
            or finished()
        )

    await fake.wait_for(lambda _m: finished() or bool(live_cards()), timeout=CALL_BUDGET_S)
    event("a card" if live_cards() else "no card")
    for move, arg in script:
        if finished() or not live_cards():
            break
        card = live_cards()[-1]
        if move == "press":
            taps = [b.text for row in card.reply_markup for b in row if b.callback_data]
            await person.press(card, taps[arg % len(taps)])
        else:
            reply = await person.send(arg, reply_to=card)
            await fake.wait_for(moved_on(reply, card))
    await person.send("/cancel")
    await fake.wait_for(lambda m: is_result(m, call), timeout=CALL_BUDGET_S)
    await fake.wait_for(lambda m: m.chat_id == person.id and CANCEL_REPLY.fullmatch(m.text) is not None)
    await fake.wait_for(lambda _m: not any("asks" in m.text for m in live_cards()))  # all settled, eventually
    assert not fake.unexpected_errors, fake.unexpected_errors


# -- fixed cases ---------------------------------------------------------------------------------------------

INJECTION = '<b>b</b> <a href="https://e.vil">x</a> &amp; <tg-spoiler>s</tg-spoiler> </i> *m* _i_ [l](tg://x)'
"""HTML that Telegram would parse, broken tags, an entity, and Markdown: all must show as typed."""
FOREIGN_ENTITIES = {"text_link", "spoiler", "underline", "strikethrough", "pre", "text_mention"}


def ask_form(schema: dict[str, Any], message: str = "Please fill in the form") -> str:
    return "/call t ask_form " + json.dumps({"schema_json": json.dumps(schema), "message": message})


def ask_url(url: str, message: str = "Please sign in") -> str:
    return "/call t ask_url " + json.dumps({"url": url, "message": message})


def server_saw(result: Msg) -> dict[str, Any]:
    """The test server's report of the answer it got (the result message's body)."""
    saw: dict[str, Any] = json.loads(result_body(result))
    return saw


def tap_data(card: Msg, row: int = 0, column: int = 0) -> str:
    data = card.reply_markup[row][column].callback_data
    assert data is not None
    return data


async def run(s: Chat, command: str, chat: int | None = None) -> Msg:
    """Alice sends a /call; returns her message (`result_of` finds the call's result after it)."""
    return await s.alice.send(command, chat=chat)


async def result_of(s: Chat, call: Msg) -> Msg:
    return await s.fake.wait_for(lambda m: is_result(m, call), timeout=10)


async def test_markup_in_every_server_string_is_shown_literally() -> None:
    """Message, titles, descriptions, option titles and defaults carrying HTML or Markdown arrive as plain
    text: escaped in the HTML, no foreign formatting, and the answer still reaches the server intact."""
    schema = {
        "type": "object",
        "properties": {
            "pick": {
                "type": "string",
                "title": INJECTION,
                "description": INJECTION,
                "oneOf": [{"const": INJECTION, "title": INJECTION}, {"const": "b", "title": "<i>B</i>"}],
            },
            "note": {"type": "string", "title": INJECTION, "description": INJECTION, "default": INJECTION},
        },
        "required": ["pick", "note"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema, message=INJECTION))
        card = await s.fake.wait_for(lambda m: "asks" in m.text and bool(m.buttons))
        assert card.text.count(INJECTION) == 3  # message, title, description
        assert html.escape(INJECTION, quote=False) in card.html
        assert not {e["type"] for e in card.entities} & FOREIGN_ENTITIES
        assert card.buttons[:2] == [INJECTION[:39] + "…", "<i>B</i>"]
        await s.alice.press_data(card, tap_data(card))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        assert INJECTION[:50] in review.text  # values are clipped in the review, never interpreted
        assert not {e["type"] for e in review.entities} & FOREIGN_ENTITIES
        await s.alice.press_data(review, tap_data(review, 1, 1))  # edit the note: its default is offered
        card = await s.fake.wait_for(lambda m: m is card and "Keep:" in " ".join(m.buttons))
        assert card.text.count(INJECTION) == 3 and not {e["type"] for e in card.entities} & FOREIGN_ENTITIES
        await s.alice.press(card, lambda label: label.startswith("Keep:"))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        result = await result_of(s, call)
        assert server_saw(result)["content"] == {"pick": INJECTION, "note": INJECTION}
        assert not {e["type"] for e in result.entities} & FOREIGN_ENTITIES
        assert not {e["type"] for e in card.entities} & FOREIGN_ENTITIES and not card.buttons

        url = 'https://example.com/<b>x</b>?q="1"&amp;r=<tg-spoiler>'
        call = await run(s, ask_url(url, message=INJECTION))
        link = await s.fake.wait_for(lambda m: "open a link" in m.text and bool(m.buttons))
        assert INJECTION in link.text and check_url(url).href in link.text  # the link as a browser reads it
        assert not {e["type"] for e in link.entities} & FOREIGN_ENTITIES
        await s.alice.press(link, "Open example.com")
        assert server_saw(await result_of(s, call))["action"] == "accept"


async def test_ten_thousand_character_strings_are_clipped_never_refused() -> None:
    """A 10,000-character message, title, description and option title: the card fits Telegram's limits,
    the person can answer, and so can a 10,000-character link card."""
    huge = "x" * 9_990 + " the end"
    schema = {
        "type": "object",
        "properties": {
            "size": {"type": "string", "title": huge, "description": huge, "enum": [huge, "small"]},
        },
        "required": ["size"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema, message=huge))
        card = await s.fake.wait_for(lambda m: "asks" in m.text and bool(m.buttons))
        assert len(card.text) <= 4096 and "…" in card.text
        await s.alice.press_data(card, tap_data(card))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        result = await result_of(s, call)  # 10,000 characters of answer come back split over messages
        assert result.text.split("\n", 1)[1].startswith('{"action": "accept", "content": {"size": "xxx')
        await s.fake.wait_for(lambda m: m.chat_id == s.alice.id and 'the end"}}' in m.text)

        call = await run(s, ask_url("https://example.com/" + "p" * 10_000, message=huge))
        link = await s.fake.wait_for(lambda m: "open a link" in m.text and bool(m.buttons))
        assert len(link.text) <= 4096
        await s.alice.press(link, "Decline")
        assert server_saw(await result_of(s, call))["action"] == "decline"
        assert all(len(m.text) <= 4096 for m in s.fake.messages(s.alice, from_bot=True))


async def test_a_thousand_options_are_paged_and_the_last_one_can_be_picked() -> None:
    """1,000 options: pages of a few buttons with Previous/Next; the last page holds the last option."""
    values = [f"option-{i:04d}" for i in range(1000)]
    schema = {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": values}},
        "required": ["pick"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema))
        card = await s.fake.wait_for(lambda m: "Page 1 of" in m.text and bool(m.buttons))
        pages = int(card.text.split("Page 1 of ", 1)[1].split()[0])
        assert pages > 1 and "option-0000" in card.buttons and "‹ Previous" not in card.buttons
        await s.alice.press(card, "Next ›")
        await s.fake.wait_for(lambda m: m is card and "Page 2 of" in m.text)
        await s.alice.press(card, "‹ Previous")
        await s.fake.wait_for(lambda m: m is card and "Page 1 of" in m.text)
        # Jump to the end the way the Next button would get there, page by page, just in one press.
        kind, token, version, _action, _page = (card.button("Next ›").callback_data or "").split(":")
        await s.alice.press_data(card, f"{kind}:{token}:{version}:g:{pages - 1}")
        last = await s.fake.wait_for(lambda m: m is card and f"Page {pages} of {pages}" in m.text)
        assert "option-0999" in last.buttons and "Next ›" not in last.buttons
        await s.alice.press(last, "option-0999")
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        assert server_saw(await result_of(s, call))["content"] == {"pick": "option-0999"}


@pytest.mark.parametrize("protocol", ["legacy", "auto"])
async def test_a_choice_without_options_is_refused_with_an_error_never_a_card(protocol: str) -> None:
    """An enum with no options cannot be answered: no card, and the server gets an error."""
    schema = {"type": "object", "properties": {"pick": {"type": "string", "enum": []}}, "required": ["pick"]}
    async with bot_scene(protocol=protocol) as s:
        call = await run(s, ask_form(schema))
        result = await result_of(s, call)
        assert "✅" not in result.text
        assert not any(m.buttons for m in s.fake.messages(s.alice, from_bot=True))


async def test_duplicate_option_values_are_offered_once_and_answer_with_their_value() -> None:
    """Repeated values in enum, enumNames, oneOf and multi-select never break the card: each value is offered
    once (a oneOf value that two options share would fail oneOf, so it is not offered), and a pick sends it."""
    schema = {
        "type": "object",
        "properties": {
            "plain": {"type": "string", "enum": ["a", "a", "b"]},
            "named": {"type": "string", "enum": ["x", "x"], "enumNames": ["First x", "Second x"]},
            "titled": {
                "type": "string",
                "oneOf": [{"const": "y", "title": "Y"}, {"const": "y", "title": "Y again"}, {"const": "z"}],
            },
            "multi": {"type": "array", "items": {"type": "string", "enum": ["m", "m", "n"]}},
        },
        "required": ["plain", "named", "titled", "multi"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema))
        card = await s.fake.wait_for(lambda m: "(1/4)" in m.text and bool(m.buttons))
        assert card.buttons == ["a", "b", "Decline", "Cancel"]
        await s.alice.press(card, "a")
        card = await s.fake.wait_for(lambda m: m is card and "(2/4)" in m.text)
        assert card.buttons == ["First x", "Decline", "Cancel"]
        await s.alice.press(card, "First x")
        card = await s.fake.wait_for(lambda m: m is card and "(3/4)" in m.text)
        assert card.buttons == ["z", "Decline", "Cancel"]
        await s.alice.press(card, "z")
        card = await s.fake.wait_for(lambda m: m is card and "(4/4)" in m.text)
        assert card.buttons[:2] == ["☐ m", "☐ n"]
        await s.alice.press(card, "☐ m")
        card = await s.fake.wait_for(lambda m: m is card and "☑ m" in m.buttons)
        await s.alice.press(card, lambda label: label.startswith("Done"))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        content = server_saw(await result_of(s, call))["content"]
        assert content == {"plain": "a", "named": "x", "titled": "z", "multi": ["m"]}


async def test_huge_defaults_of_the_wrong_type_are_dropped_and_right_ones_clipped() -> None:
    """Defaults of 100,000 characters, or of the wrong type, never reach a label or the server as typed."""
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "title": "N", "default": "9" * 100_000},
            "flag": {"type": "boolean", "title": "Flag", "default": [True] * 10_000},
            "pick": {"type": "string", "title": "Pick", "enum": ["a", "b"], "default": {"a": "b" * 10_000}},
            "long": {"type": "string", "title": "Long", "default": "z" * 100_000},
        },
        "required": ["n", "flag", "pick", "long"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema))
        card = await s.fake.wait_for(lambda m: "<b>N</b> (1/3)" in m.html and bool(m.buttons))
        assert not any(label.startswith("Keep") for label in card.buttons)
        await s.alice.send("7", reply_to=card)
        card = await s.fake.wait_for(lambda m: "<b>Flag</b>" in m.html and bool(m.buttons))
        assert "Keep" not in " ".join(card.buttons)
        await s.alice.press(card, "No")
        card = await s.fake.wait_for(lambda m: m is card and "<b>Pick</b>" in m.html)
        assert "Keep" not in " ".join(card.buttons)
        await s.alice.press(card, "b")
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        assert "• Long: zzz" in review.text and len(review.text) <= 4096  # the fitting default, clipped
        await s.alice.press(review, "✏️ Long")
        card = await s.fake.wait_for(lambda m: m is card and "<b>Long</b>" in m.html)
        keep = next(label for label in card.buttons if label.startswith("Keep"))
        assert len(keep) <= 40
        await s.alice.press(card, keep)
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        result = await result_of(s, call)
        assert '"n": 7' in result.text and '"flag": false' in result.text and '"pick": "b"' in result.text


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(document.cookie)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "tg://resolve?domain=telegram",
        "JaVaScRiPt:alert(1)",
    ],
)
async def test_links_that_are_not_web_addresses_are_refused_and_declined(url: str) -> None:
    """javascript:, data:, file: and tg: links never become a button: the person is warned, the server
    hears decline."""
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_url(url))
        warning = await s.fake.next_message(s.alice, containing="cannot show")
        assert "not a web address" in warning.text and not warning.buttons
        assert server_saw(await result_of(s, call))["action"] == "decline"
        assert not any(m.buttons for m in s.fake.messages(s.alice, from_bot=True))


@pytest.mark.parametrize(
    ("url", "warning", "link_button"),
    [
        ("https://xn--pple-43d.com/login", "Punycode", True),
        ("http://192.168.1.1/login", "bare IP address", True),
        ("https://[2001:db8::1]/login", "bare IP address", False),
        ("https://user@example.com/login", "user name before the host", True),
    ],
)
async def test_suspicious_hosts_are_shown_with_a_warning(url: str, warning: str, link_button: bool) -> None:
    """Punycode, IP-literal and disguised hosts: the card warns; consent still works, and a host Telegram
    cannot link (no dot) is given as text to copy instead of a button."""
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_url(url))
        card = await s.fake.wait_for(lambda m: "open a link" in m.text and bool(m.buttons))
        assert warning in card.text and "⚠️" in card.text
        await s.alice.press(card, lambda label: label.startswith("Open "))
        assert server_saw(await result_of(s, call))["action"] == "accept"
        await s.fake.wait_for(lambda m: m is card and "Done" in m.text)
        consented = card.history[1]  # between consent and the server's completion
        assert "Consent given" in consented.text
        assert any(b.url for row in consented.reply_markup for b in row) is link_button


FORGED = [
    "{kind}:{token}:{later}:y",  # a version the card never had
    "{kind}:{token}:{version}:c:99999999999999999999",  # a choice on a yes/no question
    "{kind}:{token}:{version}:t:3",
    "{kind}:{token}:{version}:e:0",  # edit, but there is no review yet
    "{kind}:{token}:{version}:o",  # consent on a form
    "{kind}:{token}:{version}:f",  # "I've finished" on a form
    "{kind}:{token}:{version}:g:999",  # a page the question does not have
    "{kind}:{token}:{version}:q",  # no such action
    "{kind}:{token}:{version}:c:-1",
    "t:{token}:0:r",  # a tool button with a prompt's token
    "{kind}:{short}:{version}:y",
    "{kind}:töken:{version}:y",
    "p:" + "x" * 62,
    "p::0:y",
    "p:a:b:c:d:e:f",
]


async def test_forged_and_replayed_taps_never_answer_for_the_person_and_never_fail() -> None:
    """Taps with made-up or stale data are answered (an alert, or a note on the card) and never send an
    answer to the server or a 400 to Telegram; the card then still works, and old data stays refused."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "OK?"}}, "required": ["ok"]}
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema))
        card = await s.fake.wait_for(lambda m: "OK?" in m.text and bool(m.buttons))
        for template in FORGED:
            kind, token, version, *_ = tap_data(card).split(":")
            data = template.format(
                kind=kind, token=token, short=token[:-1], version=version, later=int(version) + 1
            )
            await s.alice.press_data(card, data)  # answered in time, or press_data raises
            assert "OK?" in card.text and {"Yes", "No"} <= set(card.buttons), data
        assert not any(is_result(m, call) for m in s.fake.messages(s.alice, from_bot=True))  # still asking
        stale = tap_data(card)
        await s.alice.press(card, "Yes")
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        replay = await s.alice.press_data(review, stale)  # the Yes of the question before the review
        assert replay.show_alert and "outdated" in replay.text
        await s.alice.press(review, "✅ Submit")
        assert server_saw(await result_of(s, call))["content"] == {"ok": True}
        replay = await s.alice.press_data(review, stale)
        assert replay.show_alert and "expired" in replay.text


async def test_strangers_and_other_members_cannot_answer_someone_elses_card() -> None:
    """In a group: Bob's and Mallory's taps get alerts, Bob's reply a note, Mallory's reply and her command
    (her refusal for the minute was the alert) nothing; the card is untouched until Alice answers it."""
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "title": "Name"}},
        "required": ["name"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema), chat=s.group)
        card = await s.fake.wait_for(
            lambda m: m.chat_id == s.group and "<b>Name</b>" in m.html and bool(m.buttons)
        )
        answer = await s.bob.press(card, "Decline")
        assert answer.show_alert and "person who started" in answer.text
        answer = await s.mallory.press(card, "Cancel")
        assert answer.show_alert and str(s.mallory.id) in answer.text
        await s.mallory.send("mallory's name", reply_to=card)
        await s.bob.send("bob's name", reply_to=card)
        await s.fake.wait_for(lambda m: m.chat_id == s.group and "Only the person" in m.text)
        # Mallory's refusal for this minute in this chat was the tap's alert: her command gets none.
        await s.mallory.send("/call t whoami", chat=s.group)
        assert card.edit_count == 0 and not card.deleted
        await s.alice.send("Alice", reply_to=card)
        review = await s.fake.wait_for(
            lambda m: m.chat_id == s.group and "Please review" in m.text and bool(m.buttons)
        )
        await s.alice.press(review, "✅ Submit")
        assert server_saw(await result_of(s, call))["content"] == {"name": "Alice"}
        assert not any(
            "mallory's name" in m.text or "bob's name" in m.text or str(s.mallory.id) in m.text
            for m in s.fake.messages(s.group, from_bot=True)
        )


async def test_a_group_the_bot_never_wrote_to_is_handled_and_commands_still_work() -> None:
    """Chatter and strangers' commands in a new group change nothing; an allowed user's /call works there."""
    async with bot_scene() as s:
        fresh = s.fake.group(-7777, title="New", members=[s.alice, s.mallory], supergroup=True)
        await s.mallory.send("hello bot", chat=fresh)
        await s.alice.send("just chatting <b>here</b>", chat=fresh)
        await s.mallory.send("/call demo echo text=pwned", chat=fresh)
        refusal = await s.fake.next_message(fresh)
        assert str(s.mallory.id) in refusal.text
        await s.alice.send("/call demo echo text=hi there", chat=fresh)
        await s.fake.wait_for(lambda m: m.chat_id == fresh and "hi there" in m.text and "✅" in m.text)
        assert next(m.text for m in s.fake.messages(fresh, from_bot=True)) == refusal.text
        assert not any("pwned" in m.text for m in s.fake.messages(fresh, from_bot=True))


def build_odd_tools() -> MCPServer[Any]:
    """A server whose tool titles are blank or markup."""
    server: MCPServer[Any] = MCPServer("odd-tools")

    @server.tool(title="\xa0")
    def blank() -> str:
        """\xa0"""
        return "blank ran"

    @server.tool(title=INJECTION, description=INJECTION)
    def markup() -> str:
        return INJECTION

    return server


async def test_tool_titles_that_are_blank_or_markup_still_list_and_run() -> None:
    """/tools with a blank and a markup title: a placeholder label, escaped text, and both still run."""
    async with bot_scene(in_process={"odd": build_odd_tools}) as s:
        await s.alice.send("/tools odd")
        listing = await s.fake.next_message(s.alice, containing="tap a tool")
        assert "·" in listing.buttons and INJECTION in listing.text
        assert not {e["type"] for e in listing.entities} & FOREIGN_ENTITIES
        await s.alice.press(listing, "·")
        await s.fake.wait_for(lambda m: "blank ran" in m.text)
        await s.alice.press(listing, INJECTION[:39] + "…")
        result = await s.fake.wait_for(lambda m: "odd · markup" in m.text and "Running" not in m.text)
        assert INJECTION in result.text


async def test_two_replies_typed_in_quick_succession_are_taken_in_turn() -> None:
    """The person sends two answers before the bot has moved the card: the first is refused with the
    reason, the second accepted; each old copy of the card is retired once, and nothing is left behind."""
    async with bot_scene() as s:
        await s.alice.send("/call demo book_table restaurant=X")
        card = await s.fake.wait_for(lambda m: "Party size" in m.text and bool(m.buttons))
        await s.alice.send("13", reply_to=card)
        await s.alice.send("4", reply_to=card)
        await s.fake.next_message(s.alice, containing="must be a whole number between 1 and 12")
        date = await s.fake.wait_for(lambda m: "<b>Date</b>" in m.html and bool(m.buttons))
        await s.fake.wait_for(
            lambda m: (
                m is date
                and len([c for c in s.fake.messages(s.alice, from_bot=True) if "asks" in c.text]) == 1
            )
        )
        await s.alice.press(date, "Cancel")
        await s.fake.wait_for(lambda m: "Booking cancelled" in m.text)


async def test_blank_options_get_a_placeholder_label() -> None:
    """Options that are only (Unicode) whitespace: Telegram would refuse such buttons, so they read "·",
    and a tap still sends the value as the server wrote it."""
    schema = {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": ["\xa0", " \u2003 ", "x"]}},
        "required": ["pick"],
    }
    async with bot_scene(protocol="legacy") as s:
        call = await run(s, ask_form(schema))
        card = await s.fake.wait_for(lambda m: "Choose one" in m.text and bool(m.buttons))
        assert card.buttons[:3] == ["·", "·", "x"]
        await s.alice.press_data(card, tap_data(card, 0, 1))
        review = await s.fake.wait_for(lambda m: m is card and "Please review" in m.text)
        await s.alice.press(review, "✅ Submit")
        assert server_saw(await result_of(s, call))["content"] == {"pick": " \u2003 "}

"""Scripted people: each flow is one `/call` of a bench tool answered at once, as a person would in the chat.

I/O only through the fake Bot API (its users' actions and waits). Every flow checks that the tool's result,
which the server built from the answer it received, carries this person's tag and answer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

import httpx

from bench.scene import SERVER, BenchFake
from bot.web.miniapp import sign_init_data
from tests.fakes.telegram import FakeUser, Msg

SUBMIT: Final = "✅ Submit"
OPEN: Final = "Open example.com"
TIMEOUT_S: Final = 120.0
OPEN_FORM: Final = "📝 Open form"
FORM6_TYPED: Final = (("Name", "Ada"), ("Email", "ada@example.com"), ("Day", "2026-12-24"), ("Guests", "4"))
FORM6_CONTENT: Final = {
    "name": "Ada",
    "email": "ada@example.com",
    "day": "2026-12-24",
    "guests": 4,
    "outdoor": True,
    "size": "medium",
}


class WrongAnswer(AssertionError):
    """The server's result for a call does not carry what this person answered."""


class CallFailed(Exception):
    """The call ended before it asked: the bot showed how it ended (failed, timed out, ...) instead of a card."""


class AnswerLost(Exception):
    """The call ended after its person answered, without the tool's result: the bot showed how (its connection
    broke after the answer, say) instead of the result."""


@dataclass(frozen=True, slots=True)
class Answered:
    """One completed elicitation, as the scripted person lived it."""

    tag: str
    started: float
    """`time.monotonic()` when the person sent `/call`."""
    card_at: float
    """When the card first reached the fake."""
    finished: float
    """When the tool's result was in the chat."""
    taps: int
    typed: int
    submitted: float | None = None
    """When the last tap (Submit) was answered: the answer is on its way to the server."""


def _card_for(tag: str) -> Callable[[Msg], bool]:
    marker = f" for {tag}\n"
    return lambda m: marker in m.text and bool(m.reply_markup)


def _asking(tag: str, title: str) -> Callable[[Msg], bool]:
    """`tag`'s card asking for the field titled `title`."""
    return lambda m: _card_for(tag)(m) and f"<b>{title}</b>" in m.html


def _ended(tool: str) -> Callable[[Msg], bool]:
    """How a call of `tool` ended other than well: "⚠️ server · tool — failed" heads its message."""
    marker = f" · {tool} — "
    return lambda m: marker in m.text.partition("\n")[0]


def _ended_after(tool: str) -> Callable[[Msg], bool]:
    """How a call of `tool` ended other than well, after its person answered: on a message of its own, or on
    the card it was folded into."""
    marker = f" · {tool} — "
    return lambda m: any(marker in line for line in m.text.splitlines())


def _result_for(tag: str) -> Callable[[Msg], bool]:
    marker = f'"tag": "{tag}"'
    return lambda m: marker in m.text and '"action"' in m.text


async def _tap(user: FakeUser, card: Msg, label: str) -> None:
    """Press a button; the bot answers a tap only after it has redrawn the card, so no waiting is needed."""
    answer = await user.press(card, label, timeout=TIMEOUT_S)
    if answer.show_alert:
        raise WrongAnswer(f"tap on {label!r} refused: {answer.text!r}; card: {card!r}")


def _content(result: Msg) -> dict[str, Any]:
    """What the tool returned: the lines after the result's head ("✅ server · tool"), which is the first line
    of its own message, or below the answered card it was folded into."""
    lines = result.text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("✅ ") and " · " in line)
    content: dict[str, Any] = json.loads("\n".join(lines[head + 1 :]))
    return content


async def hello(fake: BenchFake, user: FakeUser, tag: str) -> None:
    """A call without a question: opens this person's MCP session."""
    await user.send(f"/call {SERVER} hello tag={tag}")
    await fake.until(user.id, lambda m: m.text.endswith(f"\nhello {tag}"), TIMEOUT_S)


async def start_pick(fake: BenchFake, user: FakeUser, tag: str) -> tuple[float, Msg]:
    """Send the `/call` and wait for the single-choice card; returns (when sent, the card).

    Raises:
        CallFailed: the call ended before its question came (its connection to the server broke, say).
    """
    started = time.monotonic()
    await user.send(f"/call {SERVER} pick tag={tag}")
    card, ended = _card_for(tag), _ended("pick")
    shown = await fake.until(user.id, lambda m: card(m) or ended(m), TIMEOUT_S)
    if not card(shown):
        raise CallFailed(shown.text)
    return started, shown


async def finish_pick(
    fake: BenchFake, user: FakeUser, tag: str, choice: str, started: float, card: Msg
) -> Answered:
    """Choose (a tap), Submit on the review card (a second tap), wait for the result and check it.

    Raises:
        AnswerLost: the call ended after the answer without its result (its connection broke, say).
    """
    await _tap(user, card, choice)
    await _tap(user, card, SUBMIT)
    submitted = time.monotonic()
    done, ended = _result_for(tag), _ended_after("pick")
    result = await fake.until(user.id, lambda m: done(m) or ended(m), TIMEOUT_S)
    if not done(result):
        raise AnswerLost(result.text)
    if _content(result) != {"tag": tag, "action": "accept", "content": {"colour": choice}}:
        raise WrongAnswer(f"{tag}: {result.text!r}")
    card_at = fake.arrived[(card.chat_id, card.message_id)]
    return Answered(tag, started, card_at, time.monotonic(), taps=2, typed=0, submitted=submitted)


async def pick(fake: BenchFake, user: FakeUser, tag: str, choice: str = "green") -> Answered:
    """The single-choice elicitation: `/call`, tap the choice, tap Submit."""
    started, card = await start_pick(fake, user, tag)
    return await finish_pick(fake, user, tag, choice, started, card)


async def form3(fake: BenchFake, user: FakeUser, tag: str) -> Answered:
    """The three-field form: tap a size, reply with a number, tap Yes, tap Submit."""
    started = time.monotonic()
    await user.send(f"/call {SERVER} form3 tag={tag}")
    card = await fake.until(user.id, _card_for(tag), TIMEOUT_S)
    card_at = fake.arrived[(card.chat_id, card.message_id)]
    await _tap(user, card, "medium")
    await user.send("4", reply_to=card)
    # A typed answer moves the card below the reply: the next question comes as a new message.
    card = await fake.until(user.id, lambda m: _card_for(tag)(m) and "Yes" in m.buttons, TIMEOUT_S)
    await _tap(user, card, "Yes")
    await _tap(user, card, SUBMIT)
    result = await fake.until(user.id, _result_for(tag), TIMEOUT_S)
    expected = {"size": "medium", "guests": 4, "outdoor": True}
    if _content(result) != {"tag": tag, "action": "accept", "content": expected}:
        raise WrongAnswer(f"{tag}: {result.text!r}")
    return Answered(tag, started, card_at, time.monotonic(), taps=3, typed=1)


async def consent(fake: BenchFake, user: FakeUser, tag: str) -> Answered:
    """URL consent: tap Open (the consent); the link itself is opened outside the chat."""
    started = time.monotonic()
    await user.send(f"/call {SERVER} consent tag={tag}")
    card = await fake.until(user.id, _card_for(tag), TIMEOUT_S)
    await _tap(user, card, OPEN)
    result = await fake.until(user.id, _result_for(tag), TIMEOUT_S)
    if _content(result) != {"tag": tag, "action": "accept", "content": None}:
        raise WrongAnswer(f"{tag}: {result.text!r}")
    card_at = fake.arrived[(card.chat_id, card.message_id)]
    return Answered(tag, started, card_at, time.monotonic(), taps=2, typed=0)  # Open form, Submit


async def form6(fake: BenchFake, user: FakeUser, tag: str) -> Answered:
    """The six-field form in the chat: reply to four questions, tap Yes, tap a size, tap Submit."""
    started = time.monotonic()
    await user.send(f"/call {SERVER} form6 tag={tag}")
    card = await fake.until(user.id, _card_for(tag), TIMEOUT_S)
    card_at = fake.arrived[(card.chat_id, card.message_id)]
    for title, text in FORM6_TYPED:
        card = await fake.until(user.id, _asking(tag, title), TIMEOUT_S)
        await user.send(text, reply_to=card)
    card = await fake.until(user.id, lambda m: _card_for(tag)(m) and "Yes" in m.buttons, TIMEOUT_S)
    await _tap(user, card, "Yes")
    await _tap(user, card, "medium")
    await _tap(user, card, SUBMIT)
    await _check(fake, user, tag, FORM6_CONTENT)
    return Answered(tag, started, card_at, time.monotonic(), taps=3, typed=len(FORM6_TYPED))


async def form6_page(fake: BenchFake, user: FakeUser, tag: str, *, port: int) -> Answered:
    """The six-field form on the Mini App page: the page loads the form and posts every value with the launch
    data Telegram signs (played here with the bot's token), as one submit."""
    started = time.monotonic()
    await user.send(f"/call {SERVER} form6 tag={tag}")
    card = await fake.until(user.id, lambda m: _card_for(tag)(m) and OPEN_FORM in m.buttons, TIMEOUT_S)
    card_at = fake.arrived[(card.chat_id, card.message_id)]
    url = card.button(OPEN_FORM).web_app
    assert url is not None
    user_json = json.dumps({"id": user.id, "first_name": user.first_name}, separators=(",", ":"))
    launch = {"query_id": f"bench-{tag}", "user": user_json, "auth_date": str(int(time.time()))}
    init_data = sign_init_data(launch, fake.token)
    page = f"http://127.0.0.1:{port}{urlsplit(url).path}"
    values: dict[str, Any] = {
        **dict(zip(("name", "email", "day", "guests"), (v for _, v in FORM6_TYPED), strict=True))
    }
    values.update(outdoor=True, size="medium")
    async with httpx.AsyncClient(trust_env=False, timeout=TIMEOUT_S) as client:
        (await client.post(f"{page}/form", json={"initData": init_data})).raise_for_status()
        body = {"initData": init_data, "action": "accept", "values": values}
        (await client.post(f"{page}/answer", json=body)).raise_for_status()
    await _check(fake, user, tag, FORM6_CONTENT)
    return Answered(tag, started, card_at, time.monotonic(), taps=2, typed=0)  # Open form, Submit


async def _check(fake: BenchFake, user: FakeUser, tag: str, expected: dict[str, Any]) -> None:
    result = await fake.until(user.id, _result_for(tag), TIMEOUT_S)
    if _content(result) != {"tag": tag, "action": "accept", "content": expected}:
        raise WrongAnswer(f"{tag}: {result.text!r}")

"""The access gate end to end: a stranger's update stops at the gate whatever refusing them does, and refusals
are rationed. Real PTB against the fake Bot API; a recording MCP server shows that nothing reached a server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import anyio
import pytest

from bot.demo_server import build_server as build_demo
from bot.telegram.access import REFUSAL_PERIOD_S, REFUSALS_PER_CHAT
from tests.fakes.servers.recorder import Recorder
from tests.fakes.telegram import Msg
from tests.telegram.harness import ALICE_ID, MALLORY_ID, Chat, bot_scene, is_result

pytestmark = pytest.mark.anyio

SENDING = frozenset(
    {"sendmessage", "editmessagetext", "editmessagereplymarkup", "deletemessage", "answercallbackquery"}
)
"""Bot API methods that show something to someone."""

Kind = Literal["command", "tap", "plain"]


@dataclass(frozen=True)
class Fault:
    """How the refusal's Bot API call fails: an HTTP status, or no answer at all (the client times out)."""

    status: int
    hang: bool = False

    def __str__(self) -> str:
        return "timeout" if self.hang else str(self.status)


FAULTS = [Fault(403), Fault(400), Fault(500), Fault(504, hang=True)]
CASES = [
    ("command", "private"),
    ("command", "group"),
    ("tap", "private"),
    ("tap", "group"),
    ("plain", "private"),
]


class VirtualClock:
    """The time refusals are rationed by; moves only when a test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sent_since(s: Chat, start: int, *, but_to: int | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Calls that showed something, made after the `start`-th call (those to chat `but_to` left out)."""
    return [
        (method, params)
        for method, params in s.fake.calls[start:]
        if method.lower() in SENDING and (but_to is None or params.get("chat_id") != but_to)
    ]


async def settle(s: Chat) -> None:
    """Wait until whatever the bot does with updates it got before this is done: Alice's own call to another
    server runs to its result after them."""
    call = await s.alice.send("/call demo echo text=settled")
    await s.fake.wait_for(lambda m: is_result(m, call) and "settled" in m.text, timeout=10)


async def tool_button(s: Chat, chat: int) -> Msg:
    """Alice's /tools listing of the recording server in `chat`: a message with a tool's button on it."""
    await s.alice.send("/tools rec", chat=chat)
    return await s.fake.wait_for(lambda m: m.chat_id == chat and "tap a tool" in m.text)


@pytest.mark.parametrize("fault", FAULTS, ids=str)
@pytest.mark.parametrize(("kind", "where"), CASES, ids=lambda v: str(v))
async def test_a_strangers_update_stops_at_the_gate_whatever_the_refusal_meets(
    kind: Kind, where: str, fault: Fault
) -> None:
    """The refusal answered with 403, 400, 500 or never: the stranger's command, tap or message reaches no MCP
    server, and nothing but the one refusal is sent."""
    recorder, clock = Recorder(), VirtualClock()
    async with bot_scene(in_process={"rec": recorder.build, "demo": build_demo}, clock=clock) as s:
        chat = s.group if where == "group" else s.mallory.id
        target: Msg | None = None
        if kind == "tap":
            listing = await tool_button(s, s.group if where == "group" else s.alice.id)
            data = listing.reply_markup[0][0].callback_data
            assert data is not None
            if where == "group":
                target = listing
            else:  # a button in Mallory's own chat: under the bot's refusal of her earlier command
                await s.mallory.send("/start")
                target = await s.fake.next_message(s.mallory, containing=str(MALLORY_ID))
                clock.now += REFUSAL_PERIOD_S + 1
        method = "answerCallbackQuery" if kind == "tap" else "sendMessage"
        connections, start = recorder.connections, len(s.fake.calls)
        s.fake.fail_next(method, fault.status, hang=fault.hang)
        async with anyio.create_task_group() as tg:
            if kind == "tap":
                assert target is not None
                tg.start_soon(s.mallory.press_data, target, data)  # never answered: the answer fails
            elif kind == "command":
                await s.mallory.send("/call rec ping text=pwned", chat=chat)
            else:
                await s.mallory.send("hello bot", chat=chat)
            await s.fake.wait_for_call(method, lambda p: str(MALLORY_ID) in str(p.get("text")))
            if fault.hang:
                await s.fake.wait_for_abandoned(method)
            await settle(s)
            tg.cancel_scope.cancel()
        assert recorder.connections == connections and recorder.calls == []
        [(sent, params)] = sent_since(s, start, but_to=ALICE_ID)
        assert sent.lower() == method.lower() and str(MALLORY_ID) in params["text"]


async def test_a_strangers_chatter_in_a_group_gets_no_answer_and_runs_nothing() -> None:
    """A plain message from a stranger in a group (a reply to the bot included) is not answered at all."""
    recorder = Recorder()
    async with bot_scene(in_process={"rec": recorder.build, "demo": build_demo}) as s:
        listing = await tool_button(s, s.group)
        start = len(s.fake.calls)
        await s.mallory.send("hello bot", chat=s.group)
        await s.mallory.send("ping", reply_to=listing)
        await settle(s)
        assert recorder.calls == [] and recorder.connections == 1  # Alice's listing's
        assert sent_since(s, start, but_to=ALICE_ID) == []


@pytest.mark.parametrize("where", ["private", "group"])
async def test_a_stranger_repeating_commands_is_refused_once_a_minute_per_chat(where: str) -> None:
    """Three commands in a minute get one refusal; a minute later the next command gets another."""
    recorder, clock = Recorder(), VirtualClock()
    async with bot_scene(in_process={"rec": recorder.build, "demo": build_demo}, clock=clock) as s:
        chat = s.group if where == "group" else s.mallory.id

        def refusals() -> list[Msg]:
            return [m for m in s.fake.messages(chat, from_bot=True) if str(MALLORY_ID) in m.text]

        for n in range(3):
            await s.mallory.send(f"/call rec ping text={n}", chat=chat)
        await s.fake.wait_for(lambda m: m.chat_id == chat and str(MALLORY_ID) in m.text)
        await settle(s)
        assert len(refusals()) == 1
        clock.now += REFUSAL_PERIOD_S - 1
        await s.mallory.send("/tools", chat=chat)
        await settle(s)
        assert len(refusals()) == 1
        clock.now += 2
        await s.mallory.send("/tools", chat=chat)
        await s.fake.wait_for(lambda m: len(refusals()) == 2)
        assert recorder.connections == 0


async def test_forty_strangers_commands_in_a_group_do_not_hold_up_an_allowed_persons_card() -> None:
    """Forty strangers' commands in one group get a few refusals, not forty; Alice's card arrives after them
    at once instead of queueing behind the group's 20 messages a minute."""
    recorder = Recorder()
    async with bot_scene(in_process={"rec": recorder.build, "demo": build_demo}) as s:
        strangers = [s.fake.user(id=7000 + n, first_name=f"Stranger {n}") for n in range(40)]
        crowd = s.fake.group(-8008, title="Crowd", members=[s.alice, *strangers])
        for stranger in strangers:
            await stranger.send("/call rec ping text=crowd", chat=crowd)
        await s.alice.send("/call demo deploy", chat=crowd)
        card = await s.fake.wait_for(
            lambda m: m.chat_id == crowd and "Where should web be deployed?" in m.text
        )
        refusals = [m for m in s.fake.messages(crowd, from_bot=True) if "private" in m.text]
        assert 1 <= len(refusals) <= REFUSALS_PER_CHAT
        assert all(m.message_id < card.message_id for m in refusals)
        assert recorder.connections == 0

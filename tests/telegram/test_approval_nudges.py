"""Approval reminders and escalation end to end: the real bot against the fake Bot API, a real MCP server that
writes down its calls, a SQLite store, and the approvals' waits (reminder, batch, escalation) released by the
test instead of by time: nothing sleeps for real."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest

from tests.fakes.servers.ledger import Ledger
from tests.fakes.telegram import Msg
from tests.telegram.harness import bot_scene
from tests.telegram.test_approvals import CAROL_ID, DAVE_ID, DEPLOY, OPS

pytestmark = pytest.mark.anyio

ERIN_ID = 3005
WAIT_S = 5.0


@dataclass
class Waits:
    """The approvals' sleeps, each held until `release` lets the oldest ones go."""

    held: list[tuple[float, anyio.Event]] = field(default_factory=list)
    _changed: anyio.Event = field(default_factory=anyio.Event)

    async def sleep(self, seconds: float) -> None:
        woken = anyio.Event()
        self.held.append((seconds, woken))
        changed, self._changed = self._changed, anyio.Event()
        changed.set()
        await woken.wait()

    async def release(self, count: int) -> list[float]:
        """Once `count` sleeps are held, let them go; how long each would have slept."""
        with anyio.fail_after(WAIT_S):
            while len(self.held) < count:
                await self._changed.wait()
        released, self.held = self.held[:count], self.held[count:]
        for _seconds, woken in released:
            woken.set()
        return [seconds for seconds, _woken in released]


def reminders(m: Msg) -> bool:
    return "Waiting for your approval" in m.text


def card_of(chat_id: int, version: str) -> Callable[[Msg], bool]:
    """A live approval card in `chat_id` for the deploy of `version`."""
    return lambda m: m.chat_id == chat_id and version in m.text and bool(m.reply_markup)


async def test_three_requests_remind_each_approver_once_then_escalate_to_erin_who_decides(
    tmp_path: Path,
) -> None:
    """Three deploys wait for Carol and Dave (2 of 2, privately); Carol approves the first. At the reminder each
    gets one message: Carol's lists the 2 she has not voted on, Dave's all 3. At the escalation Erin (who may not
    use the bot) gets a card for each, Carol's cards say Erin joined, and Erin's approval runs the first deploy,
    once."""
    waits = Waits()
    ledger = Ledger()
    rule = {
        "servers": ["prod"],
        "tools": ["deploy*"],
        "approvers": [CAROL_ID, DAVE_ID],
        "quorum": 2,
        "timeout_s": 1800,
        "remind_after_s": 300,
        "escalate_after_s": 600,
        "escalate_to": [ERIN_ID],
    }
    async with bot_scene(
        in_process={"prod": ledger.build},
        storage=f"sqlite:///{tmp_path / 'bot.db'}",
        approvals=[rule],
        approval_sleep=waits.sleep,
    ) as s:
        carol = s.fake.user(id=CAROL_ID, first_name="Carol")
        dave = s.fake.user(id=DAVE_ID, first_name="Dave")
        erin = s.fake.user(id=ERIN_ID, first_name="Erin")
        ops = s.fake.group(OPS, title="On-call", members=[s.alice, carol, dave, erin])
        for person in (carol, dave, erin):  # so the bot knows their names
            await person.send("here", chat=ops)
        for n in range(3):
            await s.alice.send(DEPLOY.replace("1.2.3", f"1.2.{n}"), chat=s.group)
            await s.fake.wait_for(card_of(DAVE_ID, f"1.2.{n}"))
        carols = [m for m in s.fake.messages(CAROL_ID, from_bot=True) if m.reply_markup]
        first = next(m for m in carols if "1.2.0" in m.text)
        await carol.press(first, "✅ Approve")

        slept = await waits.release(3)  # the reminders fall due
        assert all(290 < seconds <= 300 for seconds in slept)
        assert await waits.release(1) == [15.0]  # the batch goes out
        told_carol = await s.fake.wait_for(lambda m: m.chat_id == CAROL_ID and reminders(m))
        told_dave = await s.fake.wait_for(lambda m: m.chat_id == DAVE_ID and reminders(m))

        await waits.release(3)  # the escalations fall due
        ernis = [await s.fake.wait_for(card_of(ERIN_ID, f"1.2.{n}")) for n in range(3)]
        await s.fake.wait_for(lambda m: m is first and "Erin joined" in m.text)
        answer = await erin.press(ernis[0], "✅ Approve")
        await s.fake.wait_for(lambda m: "deployed web 1.2.0" in m.text)
        sent_carol = [m for m in s.fake.messages(CAROL_ID, from_bot=True) if reminders(m)]
        sent_dave = [m for m in s.fake.messages(DAVE_ID, from_bot=True) if reminders(m)]
        assert s.fake.unexpected_errors == []
    assert len(sent_carol) == 1 and len(sent_dave) == 1
    assert "(2):" in told_carol.text and "(3):" in told_dave.text
    assert "Alice: deploy on prod" in told_dave.text and "card above in this chat" in told_dave.text
    assert not answer.show_alert and answer.text == "Approved (2 of 2)."
    assert ledger.calls == [("deploy", {"service": "web", "version": "1.2.0"})]

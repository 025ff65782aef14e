"""FloodLimiter with an outbox: requests made `kept_for` a person are written down before they wait for their
turn, marked sent once answered (or refused, or withdrawn as moot), and left for the person's new owner when this
process no longer acts for them (docs/fleet.md "What is lost where")."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from telegram.error import BadRequest

from bot.telegram.flood import Elsewhere, FloodLimiter, Withdrawn, kept_for, resending, unless

pytestmark = pytest.mark.anyio

ALICE = 1001


class Kept:
    """The outbox's other side (`bot.telegram.flood.Outbox`), in memory: what is kept and what was marked."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[int, str, dict[str, Any]]] = {}
        self.marked: list[int] = []
        self.owns = True

    async def acts_for(self, user_id: int) -> bool:
        return self.owns

    async def keep(self, user_id: int, method: str, params: str) -> int:
        key = len(self.rows) + 1
        self.rows[key] = (user_id, method, json.loads(params))
        return key

    def sent(self, key: Any) -> None:
        self.marked.append(key)


def limiter(outbox: Kept) -> FloodLimiter:
    return FloodLimiter(chat_burst=1, chat_period_s=60, outbox=outbox)


async def test_a_kept_request_is_written_down_before_it_waits_and_marked_once_answered() -> None:
    """The second message to a chat waits for its bucket: it is in the outbox meanwhile, unmarked; the first,
    answered, is marked; a request made outside `kept_for` is not kept."""
    outbox, sent = Kept(), []
    flood = limiter(outbox)

    async def send(text: str) -> bool:
        sent.append(text)
        return True

    with kept_for(ALICE):
        await flood.process_request(
            send, ("one",), {}, "sendMessage", {"chat_id": ALICE, "text": "one"}, None
        )
        with anyio.move_on_after(0.2) as waited:  # the bucket lets the next one go only after a minute
            await flood.process_request(
                send, ("two",), {}, "sendMessage", {"chat_id": ALICE, "text": "two"}, None
            )
    assert waited.cancelled_caught
    assert sent == ["one"]
    assert outbox.rows == {
        1: (ALICE, "sendMessage", {"chat_id": ALICE, "text": "one"}),
        2: (ALICE, "sendMessage", {"chat_id": ALICE, "text": "two"}),
    }
    assert outbox.marked == [1]  # the one cancelled while waiting stays kept: the next owner sends it
    await flood.process_request(send, ("plain",), {}, "editMessageText", {"chat_id": ALICE}, None)
    assert len(outbox.rows) == 2


async def test_a_kept_request_refused_by_telegram_or_withdrawn_as_moot_is_marked_and_not_sent_again() -> None:
    outbox = Kept()
    flood = limiter(outbox)

    async def refused() -> None:
        raise BadRequest("Message to edit not found")

    async def never() -> None:
        raise AssertionError("a withdrawn request was sent")

    with kept_for(ALICE), pytest.raises(BadRequest):
        await flood.process_request(refused, (), {}, "editMessageText", {"chat_id": ALICE}, None)
    with kept_for(ALICE), unless(lambda: True), pytest.raises(Withdrawn):
        await flood.process_request(never, (), {}, "editMessageText", {"chat_id": ALICE}, None)
    assert outbox.marked == [1, 2]


async def test_a_kept_request_whose_person_went_to_another_instance_while_it_waited_is_left_kept() -> None:
    """Kept while this process acted for the person; its turn comes once it no longer does: not sent, not marked
    (`Elsewhere`), left for the new owner."""
    outbox = Kept()
    flood = limiter(outbox)
    keep = outbox.keep

    async def keep_then_lose_her(user_id: int, method: str, params: str) -> int:
        key = await keep(user_id, method, params)
        outbox.owns = False  # taken over while the request waits for its turn
        return key

    outbox.keep = keep_then_lose_her  # type: ignore[method-assign]

    async def never() -> bool:
        raise AssertionError("sent for a person this process no longer acts for")

    with kept_for(ALICE), pytest.raises(Elsewhere):
        await flood.process_request(never, (), {}, "editMessageText", {"chat_id": ALICE}, None)
    assert outbox.marked == []
    assert list(outbox.rows) == [1]


async def test_a_request_sent_again_from_the_outbox_is_not_kept_twice_and_is_marked_once_answered() -> None:
    outbox = Kept()
    flood = limiter(outbox)

    async def send() -> bool:
        return True

    with resending(ALICE, 41):
        await flood.process_request(send, (), {}, "sendMessage", {"chat_id": ALICE}, None)
    outbox.owns = False
    with resending(ALICE, 42), pytest.raises(Elsewhere):  # not this process's person (any more): left kept
        await flood.process_request(send, (), {}, "sendMessage", {"chat_id": 2002}, None)
    assert outbox.rows == {}
    assert outbox.marked == [41]

"""The process alone as a fleet (`ALONE`) and the relay in memory (`LocalRelay`, `LocalSignIns`): the same
guarantees as the fleet's rows: one claim, a take-back that a late claim cannot undo, a sign-in's return taken
only while its flow waits."""

from __future__ import annotations

import anyio
import pytest

from bot.core.fleet import ALONE
from bot.core.relay import LocalRelay, LocalSignIns, SignInOutcome, state_key

pytestmark = pytest.mark.anyio

WAIT_S = 5.0
"""Bounded waits: each of these ends as soon as its event comes, far sooner."""


async def test_alone_owns_everyone_fences_no_write_and_has_nobody_to_wake() -> None:
    """A process alone acts for everyone, refuses none of its writes and publishes to nobody."""
    heard: list[str] = []
    ALONE.bus.subscribe("miniapp", heard.append, lambda: heard.append("connected"))
    await ALONE.bus.publish(object(), "miniapp", "an id")
    assert ALONE.owns(12345) and await ALONE.acts_for(12345)
    assert ALONE.fence.refused(object(), [(), ("q1",), ("q2", "q3")]) == set()
    assert not ALONE.bus.shared and heard == [] and ALONE.owned_count() is None


async def test_an_item_is_claimed_once_and_its_outcome_reaches_the_sender() -> None:
    """The holder serving the relay claims an item once (a second claim gets nothing) and its outcome is what
    the sender waits for."""
    relay: LocalRelay[str, bool] = LocalRelay()
    claims: list[str | None] = []

    async def holder(key: str) -> None:
        claims.append(await relay.claim(key))
        claims.append(await relay.claim(key))
        await relay.settle(key, True)

    async with anyio.create_task_group() as tg:
        await tg.start(relay.serve, holder)
        assert await relay.send("a", "the answer")
        assert not await relay.send("a", "again")  # a key carries one item
        with anyio.fail_after(WAIT_S):
            assert await relay.outcome("a", WAIT_S, take_back=True) is True
        tg.cancel_scope.cancel()
    assert claims == ["the answer", None]


async def test_an_item_nobody_claimed_in_time_is_taken_back_and_a_late_claim_finds_nothing() -> None:
    """Told that nobody took it, the sender can rely on it: the holder coming late claims nothing."""
    relay: LocalRelay[str, bool] = LocalRelay()
    assert await relay.send("a", "the answer")
    assert await relay.outcome("a", 0.01, take_back=True) is None
    assert await relay.peek("a") is None and await relay.claim("a") is None


async def test_without_take_back_a_late_claim_still_settles_for_a_later_look() -> None:
    """A sign-in's page gives up waiting, but the return stays for its flow: claimed later, settled later."""
    relay: LocalRelay[str, bool] = LocalRelay()
    assert await relay.send("a", "the answer")
    assert await relay.outcome("a", 0.01) is None
    assert await relay.claim("a") == "the answer"
    await relay.settle("a", False)
    assert await relay.outcome("a", WAIT_S) is False


async def test_a_sign_in_return_is_taken_only_while_its_flow_waits() -> None:
    """Unknown, closed or expired sign-ins take no return; an open one takes one, once."""
    signins = LocalSignIns(clock=lambda: 1000.0)
    params = {"state": "s1", "code": "c"}
    assert not await signins.send(state_key("s1"), params)  # never opened
    await signins.opened("s1", 7, "demo", expires=2000.0)
    await signins.opened("s2", 7, "demo", expires=2000.0)
    await signins.opened("old", 7, "demo", expires=999.0)
    assert not await signins.send(state_key("old"), {"state": "old"})  # expired
    await signins.closed("s2")
    assert not await signins.send(state_key("s2"), {"state": "s2"})  # its flow is over
    assert await signins.send(state_key("s1"), params)
    assert not await signins.send(state_key("s1"), params)  # a replay
    assert await signins.claim(state_key("s1")) == params
    await signins.settle(state_key("s1"), SignInOutcome(True, ""))
    assert await signins.outcome(state_key("s1"), WAIT_S) == SignInOutcome(True, "")

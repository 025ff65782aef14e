"""A fleet of bots on one PostgreSQL (docs/fleet.md, issue 32): what holds with N processes behind a load balancer.

Real parts only (`tests.fleet.scene`): the installed `toolnexus-bot` command twice (or three times) with one
config, webhook mode, the fake Bot API delivering to a round-robin proxy in front of them, the durable MCP server
in its own process (2026-07-28 as `d`, 2025-era as `l`), a real PostgreSQL. Every call's arrival is counted at
the server (`stamp` writes each call down) and every result in the chat.

The people are split between the instances by partition (`bot.store.fleet`): a tap landing on the instance that
does not own its person is handled by the owner; a killed (SIGKILL) or stalled (SIGSTOP) instance's questions are
taken over by the other one, and a stalled one's late writes are refused.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.fleet.proxy import REFUSED, Delivery
from tests.fleet.scene import BOB, Fleet, fleet_scene, results, stamps
from tests.telegram.harness import is_result, result_body

pytestmark = pytest.mark.anyio

OPS, CAROL = -7001, 3003
APPROVALS = (
    f'[[approvals]]\nservers = ["d"]\ntools = ["stamp"]\napprovers = [{BOB}, {CAROL}]\nquorum = 1\n'
    f"chat = {OPS}\n"
)
"""Bob or Carol approves each `stamp` call on `d` in the Ops group (calls on `l` need no approval)."""
WAIT_S = 60
"""For a result under load: several bot processes, PostgreSQL and the MCP server share 2 cores."""
DEADLINE_S = 45
"""A question's deadline where a test waits past it: longer than a takeover (`bot.store.fleet.TAKEOVER_S`) and an
answer through the other instance take on a loaded machine."""


def stamp_results(fake: FakeTelegram, user: FakeUser) -> Counter[int]:
    """How often each `stamp n` result stands in `user`'s chat."""
    shown: Counter[int] = Counter()
    for m in results(fake, user):
        shown.update(
            int(line.removeprefix("stamp ")) for line in m.text.split("\n") if line.startswith("stamp ")
        )
    return shown


async def until(fake: FakeTelegram, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109 - like wait_for
    """Wait until `condition` holds, re-checked at every change the fake sees."""
    with anyio.fail_after(timeout):
        while not condition():
            await fake.next_change()


async def call(fleet: Fleet, user: FakeUser, server: str, n: int) -> Msg:
    """`/call <server> stamp n=<n>`, and its result in the chat."""
    sent = await user.send(f"/call {server} stamp n={n}")
    result = await fleet.fake.wait_for(
        lambda m: is_result(m, sent) and f"stamp {n}" in m.text, timeout=WAIT_S
    )
    assert result_body(result).strip() == f"stamp {n}"
    return result


async def half_filled(fleet: Fleet, user: FakeUser, server: str, action: str) -> tuple[Msg, Msg]:
    """Through instance 0: `user`'s `/call <server> confirm action=<action>`, its card answered up to Submit; the
    `/call` and the card."""
    fleet.proxy.send_next_to(0)
    sent = await user.send(f"/call {server} confirm action={action}")
    card = await fleet.fake.wait_for(
        lambda m: f"Really {action}?" in m.text and bool(m.buttons), timeout=WAIT_S
    )
    fleet.proxy.send_next_to(0)
    await user.press(card, "Yes", timeout=WAIT_S)  # its redraw comes after the card's place was kept
    await fleet.fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons), timeout=WAIT_S)
    return sent, card


async def test_a_stream_of_calls_over_two_instances_is_answered_once_each(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Twenty calls by two people, delivered in turn to both instances: each reaches the server once and each
    result stands once in its chat; both instances handled some."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        for n in range(1, 21):
            await (fleet.alice if n % 2 else fleet.bob).send(f"/call {'d' if n % 4 < 2 else 'l'} stamp n={n}")
        await until(fleet.fake, lambda: len(stamp_results(fleet.fake, fleet.alice)) == 10)
        await until(fleet.fake, lambda: len(stamp_results(fleet.fake, fleet.bob)) == 10)
        assert sorted(stamps(fleet)) == list(range(1, 21))
        shown = stamp_results(fleet.fake, fleet.alice) + stamp_results(fleet.fake, fleet.bob)
        assert shown == Counter(range(1, 21))
        handled = {d.instance for d in fleet.proxy.deliveries if d.status == 200}
        assert handled == {0, 1}
        assert not fleet.fake.unexpected_errors, fleet.fake.unexpected_errors


def answered_by(instance: int) -> Callable[[Delivery], bool]:
    return lambda d: d.instance == instance and d.update_id is not None


async def test_an_update_delivered_to_both_instances_at_once_is_handled_once(
    tmp_path: Path, postgresql_url: str
) -> None:
    """The proxy sends one `/call` to both instances at the same moment (a load balancer retrying a request it
    thought lost): both answer 200, one of them handles it; the call reaches the server once. Two later calls,
    one through each instance, show both had finished with it."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        fleet.proxy.duplicate_next()
        first = await fleet.alice.send("/call d stamp n=1")
        await fleet.fake.wait_for(lambda m: is_result(m, first), timeout=WAIT_S)
        for instance in (
            0,
            1,
        ):  # a delivery is recorded once answered: the slower one may come after the result
            await fleet.proxy.wait_for(answered_by(instance), timeout=WAIT_S)
        doubled = [d for d in fleet.proxy.deliveries if d.status == 200 and d.update_id is not None]
        assert sorted(d.instance for d in doubled) == [0, 1]
        assert len({d.update_id for d in doubled}) == 1
        for n, instance in ((2, 0), (3, 1)):  # each instance's queue has moved past the doubled update
            fleet.proxy.send_next_to(instance)
            await call(fleet, fleet.alice, "d", n)
        assert stamps(fleet) == [1, 2, 3]
        assert stamp_results(fleet.fake, fleet.alice) == Counter([1, 2, 3])


async def test_a_rolling_restart_under_a_stream_of_calls_loses_and_repeats_nothing(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Two people call without pause (2026-07-28 and 2025-era) while each instance in turn is stopped with
    SIGTERM (it drains and exits 0; deliveries meanwhile go to the other) and started again; calls are answered
    while each one is down. At the end: every call reached the server once, every result stands once."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        sent: Counter[str] = Counter()
        going = True

        async def stream(user: FakeUser, server: str, base: int) -> None:
            n = base
            while going:
                n += 1
                sent[server] += 1
                await call(fleet, user, server, n)

        def answered() -> int:
            return len(stamps(fleet))

        async def answered_more(count: int) -> None:
            target = answered() + count
            await until(fleet.fake, lambda: answered() >= target)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stream, fleet.alice, "d", 0)
            tg.start_soon(stream, fleet.bob, "l", 10_000)
            for bot in fleet.bots:
                await answered_more(2)
                assert await bot.stop() == 0
                await bot.logged("draining: done")
                await answered_more(4)  # the other instance answers alone
                await bot.start()
                await answered_more(4)
            going = False
        numbers = stamps(fleet)
        assert len(numbers) == len(set(numbers)) == sum(sent.values())
        assert sorted(n for n in numbers if n < 10_000) == list(range(1, sent["d"] + 1))
        assert sorted(n for n in numbers if n > 10_000) == list(range(10_001, 10_001 + sent["l"]))
        assert stamp_results(fleet.fake, fleet.alice) + stamp_results(fleet.fake, fleet.bob) == Counter(
            numbers
        )
        refused = [d for d in fleet.proxy.deliveries if d.status in (503, REFUSED)]
        assert {d.instance for d in refused} == {0, 1}, "each instance was down for a while"
        assert not fleet.fake.unexpected_errors, fleet.fake.unexpected_errors


async def test_a_tap_landing_on_the_other_instance_answers_the_question(
    tmp_path: Path, postgresql_url: str
) -> None:
    """A 2026-07-28 question asked by instance 0; the person's taps on its card are delivered to instance 1: the
    card goes on (the tap reaches the question's owner), and Submit runs the call once."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        fleet.proxy.send_next_to(0)
        sent = await fleet.alice.send("/call d confirm action=deploy")
        card = await fleet.fake.wait_for(
            lambda m: "Really deploy?" in m.text and bool(m.buttons), timeout=WAIT_S
        )
        fleet.proxy.send_next_to(1)
        answer = await fleet.alice.press(card, "Yes", timeout=WAIT_S)
        assert not answer.show_alert, answer.text
        await fleet.fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons), timeout=WAIT_S)
        fleet.proxy.send_next_to(1)
        await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)
        result = await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
        assert "deploy: done" in result_body(result)
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]


async def test_questions_of_a_killed_instance_are_taken_over_by_the_other(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 holds a half-answered 2026-07-28 question and a 2025-era one when it is SIGKILLed: the other
    instance takes them over without a restart. Submit on the old card runs the call once; the legacy question
    ends with Run again; nothing is asked twice."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        sent, card = await half_filled(fleet, fleet.alice, "d", "deploy")
        _, legacy = await half_filled(fleet, fleet.bob, "l", "rollback")
        await fleet.bots[0].kill()
        answer = await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)  # only instance 1 is left
        assert not answer.show_alert, answer.text
        result = await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
        assert "deploy: done" in result_body(result)
        await fleet.fake.wait_for(
            lambda m: m is legacy and "the server's question was lost" in m.text and bool(m.buttons),
            timeout=WAIT_S,
        )
        assert legacy.buttons == ["🔁 Run again"]
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        asked = [m for m in fleet.fake.messages(fleet.alice, from_bot=True) if "Really deploy?" in m.text]
        assert asked == [card]


async def test_a_paused_instance_loses_its_questions_and_its_late_writes_are_refused(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 asks a 2026-07-28 question and is paused (SIGSTOP: its connections and locks stay open) for
    longer than the takeover time: instance 1 takes the question over and Submit on the card runs the call. Once
    instance 0 goes on (SIGCONT) it answers new work again, but what it held is no longer its own: the call ran
    once, its result stands once."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        sent, card = await half_filled(fleet, fleet.alice, "d", "deploy")
        fleet.bots[0].pause()
        try:
            fleet.proxy.send_next_to(1)
            answer = await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)
            assert not answer.show_alert, answer.text
            await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
        finally:
            fleet.bots[0].resume()
        fleet.proxy.send_next_to(0)
        await call(fleet, fleet.alice, "d", 1)  # instance 0 runs again, past whatever it had pending
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        done = [m for m in fleet.fake.messages(fleet.alice, from_bot=True) if "deploy: done" in m.text]
        assert len(done) == 1


async def test_a_woken_instance_does_nothing_for_the_people_it_lost_while_it_was_stopped(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 asks Alice a 2026-07-28 question and is stopped (SIGSTOP) until after the question's deadline;
    meanwhile instance 1 takes her over and she answers through it. Woken (SIGCONT), instance 0 finds it lost her
    and drops what it held for her: the server got her answer once (no `cancel` after it), her card is not edited
    back to "expired", no second result comes; instance 0 runs on."""
    config = f"[elicitation]\ntimeout_s = {DEADLINE_S}\n"
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=config) as fleet:
        sent, card = await half_filled(fleet, fleet.alice, "d", "deploy")
        due = time.time() + DEADLINE_S  # the card was shown before now: its deadline is sooner
        woken = fleet.bots[0]
        woken.pause()
        try:
            fleet.proxy.send_next_to(1)
            answer = await fleet.alice.press(card, "✅ Submit", timeout=WAIT_S)
            assert not answer.show_alert, answer.text
            await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
            answered = list(card.versions)
            before = fleet.fake.messages(fleet.alice, from_bot=True)
            await anyio.sleep(
                due + 1 - time.time()
            )  # the question's deadline passes while instance 0 is stopped
        finally:
            woken.resume()
        await woken.logged("lost the lock session")
        fleet.proxy.send_next_to(0)
        await call(fleet, fleet.alice, "d", 1)  # through instance 0 (to her owner): it runs, past its wake-up
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert card.versions == answered, card.text
        after = fleet.fake.messages(fleet.alice, from_bot=True)[len(before) :]
        assert [result_body(m).strip() for m in after] == ["stamp 1"]
        assert [m for m in fleet.fake.messages(fleet.alice, from_bot=True) if "deploy" in m.text] == [
            m for m in before if "deploy" in m.text
        ]
        assert woken.alive
        await woken.logged("dropped 1 call(s)")


async def test_an_approval_given_through_the_other_instance_runs_the_call_once(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Alice's call, needing Bob's approval, reaches instance 0; Bob's tap on the approval card reaches instance
    1: the call runs once and its result reaches Alice once; two later calls, one through each instance, come
    after it. (Whether instance 0's own waiter runs the call again at the approval's deadline, issue 32 says it
    would, is not waited for here: that deadline is the approval's timeout.)"""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=APPROVALS) as fleet:
        carol = fleet.fake.user(id=CAROL, first_name="Carol")
        fleet.fake.group(OPS, title="On-call", members=[fleet.alice, fleet.bob, carol])
        fleet.proxy.send_next_to(0)
        sent = await fleet.alice.send("/call d stamp n=1")
        card = await fleet.fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=WAIT_S)
        fleet.proxy.send_next_to(1)
        answer = await fleet.bob.press(card, "✅ Approve", timeout=WAIT_S)
        assert not answer.show_alert, answer.text
        taps = [d.instance for d in fleet.proxy.deliveries if d.kind == "callback_query" and d.status == 200]
        assert taps == [1]
        await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
        for n, instance in ((2, 0), (3, 1)):
            fleet.proxy.send_next_to(instance)
            await call(fleet, fleet.alice, "l", n)
        assert stamps(fleet) == [1, 2, 3]
        assert stamp_results(fleet.fake, fleet.alice) == Counter([1, 2, 3])


async def test_a_killed_instance_s_half_filled_form_and_pending_approval_are_carried_on_by_the_other(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 holds Bob's half-filled 2026-07-28 form and Alice's call waiting for approval when it is
    SIGKILLed (the call's waiter dies with it). Bob approves through instance 1, before or after it took Alice
    over: her new owner runs the call, once; its result reaches Alice once, and the approval card says who
    approved. Bob's form is finished on its old card: its tool runs once, nothing is asked twice."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, config=APPROVALS) as fleet:
        carol = fleet.fake.user(id=CAROL, first_name="Carol")
        fleet.fake.group(OPS, title="On-call", members=[fleet.alice, fleet.bob, carol])
        asked, form = await half_filled(fleet, fleet.bob, "d", "deploy")
        fleet.proxy.send_next_to(0)
        sent = await fleet.alice.send("/call d stamp n=1")
        card = await fleet.fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=WAIT_S)
        await fleet.bots[0].kill()
        answer = await fleet.bob.press(card, "✅ Approve", timeout=WAIT_S)  # only instance 1 is left
        assert not answer.show_alert, answer.text
        result = await fleet.fake.wait_for(lambda m: is_result(m, sent), timeout=WAIT_S)
        assert result_body(result).strip() == "stamp 1"
        await fleet.fake.wait_for(lambda m: m is card and "Bob" in m.text and not m.buttons, timeout=WAIT_S)
        answer = await fleet.bob.press(form, "✅ Submit", timeout=WAIT_S)
        assert not answer.show_alert, answer.text
        done = await fleet.fake.wait_for(lambda m: is_result(m, asked), timeout=WAIT_S)
        assert "deploy: done" in result_body(done)
        await call(fleet, fleet.alice, "l", 2)
        assert stamps(fleet) == [1, 2]
        assert stamp_results(fleet.fake, fleet.alice) == Counter([1, 2])
        assert fleet.received("confirm") == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert [m for m in fleet.fake.messages(fleet.bob, from_bot=True) if "Really deploy?" in m.text] == [
            form
        ]

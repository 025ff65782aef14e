"""FloodLimiter: Telegram's buckets (overall, per group, per private chat) and 429s waited out, in order."""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol, cast

import anyio
import pytest
from telegram.error import RetryAfter

from bot.telegram.flood import (
    CARDS_QUIET_S,
    FLEET_LATE_S,
    FLEET_MOST_PER_S,
    FLEET_SENT_LATE_S,
    RETRY_MARGIN_S,
    FloodLimiter,
    Withdrawn,
    after_cards,
    card_first,
    unless,
)
from bot.telegram.request import report_written

pytestmark = pytest.mark.anyio


async def test_a_private_chat_gets_a_burst_then_new_messages_wait() -> None:
    """After the burst, a further sendMessage to the same chat waits; other chats, edits and groups do not."""
    limiter = FloodLimiter(chat_burst=3, chat_period_s=60)
    await limiter.initialize()
    sent: list[tuple[str, int]] = []

    async def request(endpoint: str, chat_id: int) -> None:
        async def callback() -> bool:
            sent.append((endpoint, chat_id))
            return True

        await limiter.process_request(callback, (), {}, endpoint, {"chat_id": chat_id}, None)

    for _ in range(3):
        await request("sendMessage", 1001)
    with anyio.move_on_after(0.2) as waited:  # the bucket would release the next one only after ~20 s
        await request("sendMessage", 1001)
    assert waited.cancelled_caught
    await request("sendMessage", 1002)
    await request("editMessageText", 1001)
    await request("sendMessage", -5001)
    assert sent == [("sendMessage", 1001)] * 3 + [
        ("sendMessage", 1002),
        ("editMessageText", 1001),
        ("sendMessage", -5001),
    ]
    await limiter.shutdown()


class VirtualTime:
    """A clock that only moves when every task is asleep, straight to the next wake-up: waits are exact and
    take no real time. Drive it with `run`."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []
        self._sleepers: list[tuple[float, int, anyio.Event]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        woken = anyio.Event()
        heapq.heappush(self._sleepers, (self.now + seconds, len(self.slept), woken))
        await woken.wait()

    async def run(self, *jobs: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start `jobs` one after another (each once the ones before are blocked), then run time forward."""
        async with anyio.create_task_group() as tg:
            for job in jobs:
                tg.start_soon(job)
                await anyio.wait_all_tasks_blocked()
            while True:
                await anyio.wait_all_tasks_blocked()
                if not self._sleepers:
                    break
                wake, _, woken = heapq.heappop(self._sleepers)
                self.now = max(self.now, wake)
                woken.set()


class Request(Protocol):
    """`recorder`'s request: through `limiter` to `endpoint` (for `chat_id`), failing `fail` times first."""

    def __call__(
        self, limiter: FloodLimiter, endpoint: str, chat_id: object = None, fail: int = 0
    ) -> Coroutine[Any, Any, None]: ...


def recorder(time: VirtualTime) -> tuple[list[tuple[str, object, float]], Request]:
    sent: list[tuple[str, object, float]] = []

    async def request(limiter: FloodLimiter, endpoint: str, chat_id: object = None, fail: int = 0) -> None:
        failures = iter(range(fail))

        async def callback() -> bool:
            if next(failures, None) is not None:
                raise RetryAfter(dt.timedelta(seconds=3))
            sent.append((endpoint, chat_id, time.now))
            return True

        data = {} if chat_id is None else {"chat_id": chat_id}
        await limiter.process_request(callback, (), {}, endpoint, data, None)

    return sent, request


async def test_overall_requests_are_spaced_after_a_burst_and_those_without_a_chat_are_not_counted() -> None:
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, overall_burst=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    edits = [functools.partial(request, limiter, "editMessageText", 1000 + chat) for chat in range(6)]
    await time.run(*edits, functools.partial(request, limiter, "answerCallbackQuery"))
    start = 1000.0
    assert ("answerCallbackQuery", None, start) in sent  # not held up by the edits waiting their turn
    edit_times = sorted(at for endpoint, _, at in sent if endpoint == "editMessageText")
    assert edit_times == [start] * 4 + [start + 0.25, start + 0.5]


async def test_a_group_gets_its_own_slower_bucket_and_a_channel_name_counts_as_one() -> None:
    time = VirtualTime()
    limiter = FloodLimiter(
        overall_per_s=0, group_burst=2, group_period_s=60, clock=time.clock, sleep=time.sleep
    )
    sent, request = recorder(time)
    chats = (-5, -5, -5, "@news", "@news", "@news", 42)
    await time.run(*(functools.partial(request, limiter, "sendMessage", chat) for chat in chats))
    assert sorted((at - 1000.0, str(chat)) for _, chat, at in sent) == [
        (0.0, "-5"),
        (0.0, "-5"),
        (0.0, "42"),
        (0.0, "@news"),
        (0.0, "@news"),
        (30.0, "-5"),
        (30.0, "@news"),
    ]


async def test_a_chat_waiting_for_its_own_bucket_holds_up_no_other_chat() -> None:
    """The overall place is booked only when a chat's own wait is over (else one busy chat stalls all)."""
    time = VirtualTime()
    limiter = FloodLimiter(
        chat_burst=1, chat_period_s=60, overall_burst=10, clock=time.clock, sleep=time.sleep
    )
    sent, request = recorder(time)
    await time.run(*(functools.partial(request, limiter, "sendMessage", chat) for chat in (1001, 1001, 1002)))
    assert sent == [
        ("sendMessage", 1001, 1000.0),
        ("sendMessage", 1002, 1000.0),
        ("sendMessage", 1001, 1060.0),
    ]


@pytest.mark.parametrize("refusals", [1, 2])
async def test_a_429_pauses_every_request_for_its_retry_after_then_the_refused_one_is_sent_again(
    monkeypatch: pytest.MonkeyPatch, refusals: int
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=0, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    await time.run(
        functools.partial(request, limiter, "sendMessage", 7, refusals),
        functools.partial(request, limiter, "answerCallbackQuery"),  # arrives during the first pause
    )
    resumed = 1000.0 + refusals * (3 + RETRY_MARGIN_S)  # each 429 pauses everyone again
    assert sent == [("sendMessage", 7, resumed), ("answerCallbackQuery", None, resumed)]


async def test_a_request_refused_more_often_than_max_retries_fails_with_the_429(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    time = VirtualTime()
    limiter = FloodLimiter(max_retries=2, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    with pytest.raises(ExceptionGroup) as failed:
        await time.run(functools.partial(request, limiter, "sendMessage", 7, 3))
    assert failed.group_contains(RetryAfter)
    assert sent == []
    assert len(time.slept) == 2  # waited out the first two 429s; the third is the caller's


async def test_a_call_that_asks_for_no_retries_gets_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """`rate_limit_args=0` means: fail on the first 429, not the limiter's default number of retries."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    time = VirtualTime()
    limiter = FloodLimiter(max_retries=8, clock=time.clock, sleep=time.sleep)
    tries: list[float] = []

    async def refused() -> bool:
        tries.append(time.now)
        raise RetryAfter(dt.timedelta(seconds=3))

    async def request() -> None:
        await limiter.process_request(refused, (), {}, "sendMessage", {"chat_id": 7}, 0)

    with pytest.raises(ExceptionGroup) as failed:
        await time.run(request)
    assert failed.group_contains(RetryAfter)
    assert tries == [1000.0]
    assert time.slept == []


def card(request: Request) -> Callable[..., Coroutine[Any, Any, None]]:
    """`request` made as a new card (inside `card_first`)."""

    async def sent_as_card(*args: Any) -> None:
        with card_first():
            await request(*args)

    return sent_as_card


async def test_new_cards_go_before_other_chats_waiting_results() -> None:
    """Under a backlog, cards that arrive after results to other chats are sent first; the results follow in
    their own order."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    results = [functools.partial(request, limiter, "editMessageText", chat) for chat in (1, 2, 3)]
    cards = [functools.partial(card(request), limiter, "sendMessage", chat) for chat in (11, 12, 13)]
    await time.run(*results, *cards)
    assert [(chat, at - 1000.0) for _, chat, at in sent] == [
        (1, 0.0),  # room at once: nothing waits for it
        (11, 0.25),
        (12, 0.5),
        (13, 0.75),
        (2, 1.0),
        (3, 1.25),
    ]


async def test_cards_overtake_a_waiting_request_at_most_max_overtaken_times() -> None:
    """A flood of cards cannot starve a result: once `max_overtaken` cards went before it, it goes next."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, max_overtaken=2, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    results = [functools.partial(request, limiter, "editMessageText", chat) for chat in (1, 2)]
    cards = [functools.partial(card(request), limiter, "sendMessage", 10 + n) for n in range(5)]
    await time.run(*results, *cards)
    assert [chat for _, chat, _ in sent] == [1, 10, 11, 2, 12, 13, 14]
    assert [at - 1000.0 for _, _, at in sent] == [0.25 * n for n in range(7)]


async def test_a_card_never_overtakes_a_waiting_request_to_its_own_chat() -> None:
    """Within one chat, order is kept: a card for a chat with a request still waiting goes after it (a card
    for another chat still goes first)."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    await time.run(
        functools.partial(request, limiter, "editMessageText", 1),
        functools.partial(request, limiter, "editMessageText", 2),  # waits: the bucket has no room
        functools.partial(card(request), limiter, "sendMessage", 2),
        functools.partial(card(request), limiter, "sendMessage", 3),
    )
    assert [(endpoint, chat) for endpoint, chat, _ in sent] == [
        ("editMessageText", 1),
        ("sendMessage", 3),
        ("editMessageText", 2),
        ("sendMessage", 2),
    ]


class StatusAndCard:
    """Chat 1's status message, sent `unless` its card is out, and that card."""

    def __init__(self, limiter: FloodLimiter, request: Request) -> None:
        self.limiter = limiter
        self.request = request
        self.card_out = False
        self.withdrawn: list[str] = []

    async def status(self) -> None:
        with unless(lambda: self.card_out):
            try:
                await self.request(self.limiter, "sendMessage", 1)
            except Withdrawn:
                self.withdrawn.append("status")

    async def card(self) -> None:
        self.card_out = True
        await card(self.request)(self.limiter, "sendMessage", 1)


async def test_a_request_made_moot_by_a_card_gives_way_and_is_not_sent() -> None:
    """A request made `unless(moot)` (a status message) is passed by a card to its own chat, and is not sent
    at all when `moot()` holds once its turn comes: `Withdrawn` instead."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    chat1 = StatusAndCard(limiter, request)

    await time.run(
        functools.partial(request, limiter, "editMessageText", 2),  # fills the bucket: the status waits
        chat1.status,
        chat1.card,
    )
    assert sent == [
        ("editMessageText", 2, 1000.0),
        ("sendMessage", 1, 1000.25),
    ]  # the card, in the next place
    assert chat1.withdrawn == ["status"]


async def test_a_request_made_moot_before_its_turn_books_no_place_the_next_one_takes_it() -> None:
    """A status made moot while it waited leaves the queue without booking: the request behind it is sent in
    the place it would have wasted."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    chat1 = StatusAndCard(limiter, request)

    await time.run(
        functools.partial(request, limiter, "editMessageText", 2),  # fills the bucket: the others wait
        chat1.status,
        functools.partial(request, limiter, "editMessageText", 3),
        chat1.card,
    )
    assert [(chat, at - 1000.0) for _, chat, at in sent] == [(2, 0.0), (1, 0.25), (3, 0.5)]
    assert chat1.withdrawn == ["status"]


async def test_no_place_is_booked_for_a_moot_request_that_may_be_overtaken_no_more() -> None:
    """Once a moot status may be overtaken no more, the next card books no place for it: the card goes
    next, and so does the request waiting behind the status."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, max_overtaken=1, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    chat1 = StatusAndCard(limiter, request)

    await time.run(
        functools.partial(request, limiter, "editMessageText", 2),  # fills the bucket: the others wait
        chat1.status,
        functools.partial(request, limiter, "editMessageText", 3),
        chat1.card,
        functools.partial(card(request), limiter, "sendMessage", 4),
    )
    assert [(chat, at - 1000.0) for _, chat, at in sent] == [(2, 0.0), (1, 0.25), (4, 0.5), (3, 0.75)]
    assert chat1.withdrawn == ["status"]


def busiest_second(times: list[float]) -> int:
    """The most requests sent within one second (a half-open window, as Telegram's is counted)."""
    times = sorted(times)
    return max(sum(1 for t in times if end - 1.0 < t <= end) for end in times)


async def test_requests_whose_places_passed_while_the_loop_was_held_up_keep_to_the_rate_in_every_second() -> (
    None
):
    """After the event loop was held up, the cards whose places (booked as they came) passed meanwhile go no
    faster than the overall bucket allows in one second, counted when they are sent; none is dropped."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)

    async def held_up() -> None:
        await time.sleep(0.1)
        time.now += 1.0  # the loop ran something else for a second: no request could go meanwhile

    cards = [functools.partial(card(request), limiter, "sendMessage", chat) for chat in range(8)]
    await time.run(*cards, held_up)
    assert sorted(cast(int, chat) for _, chat, _ in sent) == list(range(8))
    assert busiest_second([at for _, _, at in sent]) == 4


class LateTime(VirtualTime):
    """`VirtualTime` whose sleepers are woken a little after their time, as a busy event loop wakes them."""

    LATE = 0.01

    async def sleep(self, seconds: float) -> None:
        await super().sleep(seconds + self.LATE)


async def test_requests_woken_a_little_late_keep_the_overall_rate() -> None:
    """Requests waiting overall that are each woken a little late still go at the bucket's rate: a late one
    does not push every place after it back (and still no second holds more than the rate)."""
    time = LateTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    sent, request = recorder(time)
    edits = [functools.partial(request, limiter, "editMessageText", chat) for chat in range(9)]
    await time.run(*edits)
    times = [at - 1000.0 for _, _, at in sent]
    assert times[-1] == pytest.approx(8 * 0.25 + LateTime.LATE)
    assert busiest_second(times) == 4


async def test_a_request_counts_overall_from_when_its_body_was_written() -> None:
    """The HTTP client writes a body a loop pass after the request was made (tens of ms under load): the
    request is counted from then, so the next second's requests wait for it, and no second as Telegram
    counts (when requests arrive) holds more than the rate."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep)
    written: list[float] = []

    async def edit(chat_id: int, late_s: float) -> None:
        async def callback() -> bool:
            if late_s:
                await time.sleep(late_s)
            report_written()  # what the HTTP client's trace hook calls
            written.append(time.now - 1000.0)
            return True

        await limiter.process_request(callback, (), {}, "editMessageText", {"chat_id": chat_id}, None)

    jobs = [functools.partial(edit, 0, 0.3)] + [functools.partial(edit, chat, 0.0) for chat in range(1, 6)]
    await time.run(*jobs)
    assert len(written) == 6
    assert busiest_second(written) == 4
    assert written[-2] == pytest.approx(0.3 + 1.0)  # the fifth waited a second from the first's writing


class BusyFleet:
    """The fleet's shared overall bucket (`FleetBudget`) while other instances keep it busy: this one gets a
    place a second, on the virtual clock."""

    def __init__(self, time: VirtualTime) -> None:
        self._time = time
        self._next = 0.0

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        place = max(self._time.now, self._next)
        self._next = place + 1.0
        return place - self._time.now

    async def pause(self, seconds: float) -> None:
        raise AssertionError("no 429 here")


async def test_in_a_fleet_a_new_card_still_goes_before_results_waiting_for_the_fleets_places() -> None:
    """The fleet gives this instance a place a second, slower than its own bucket (4/s): the results waiting
    for those places wait in this instance's queue, so a card arriving later goes before them, after only the
    one result that holds the fleet's next place already (a place is booked in the fleet one at a time, once
    a request's turn came here)."""
    time = VirtualTime()
    limiter = FloodLimiter(overall_per_s=4, clock=time.clock, sleep=time.sleep, fleet=BusyFleet(time))
    sent, request = recorder(time)

    async def card_later() -> None:
        await time.sleep(1.5)
        await card(request)(limiter, "sendMessage", 9)

    results = [functools.partial(request, limiter, "editMessageText", chat) for chat in range(1, 5)]
    await time.run(*results, card_later)
    assert [(chat, at - 1000.0) for _, chat, at in sent] == [(1, 0.0), (2, 1.0), (3, 2.0), (9, 3.0), (4, 4.0)]


class PacedFleet:
    """The fleet's shared overall bucket on the virtual clock, this instance alone in it: each place an interval
    after the one before (or now), moved back by what the booking says this instance's sends went late, as the
    database keeps it. Records each booking's `late_s`."""

    def __init__(self, time: VirtualTime) -> None:
        self._time = time
        self._next = 0.0
        self.late: list[float] = []

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        self.late.append(late_s)
        place = max(self._time.now, self._next + late_s)
        self._next = place + interval_s
        return place - self._time.now

    async def pause(self, seconds: float) -> None:
        raise AssertionError("no 429 here")


async def test_in_a_fleet_a_send_answered_late_moves_the_fleets_next_places_back() -> None:
    """Telegram answers each send 0.1 s after it was written (the way there and back: no lateness), but one
    0.31 s later than that (Telegram held up reading it) while nineteen more are waiting. The first booking
    after that answer tells the fleet to move its places back by the lateness past `FLEET_SENT_LATE_S`, and from
    that place on the sends go that much later; sends answered in the usual time tell nothing."""
    time = VirtualTime()
    fleet = PacedFleet(time)
    limiter = FloodLimiter(clock=time.clock, sleep=time.sleep, fleet=fleet)
    written: dict[int, float] = {}

    async def send(chat_id: int, held_up_s: float = 0.0) -> None:
        async def callback() -> bool:
            report_written()  # what the HTTP client's trace hook calls
            written[chat_id] = time.now - 1000.0
            await time.sleep(0.1 + held_up_s)
            return True

        await limiter.process_request(callback, (), {}, "editMessageText", {"chat_id": chat_id}, None)

    await time.run(functools.partial(send, 100))  # answered in the usual time: the quickest round trip
    del written[100]
    await time.run(
        functools.partial(send, 0, 0.31), *(functools.partial(send, chat) for chat in range(1, 20))
    )
    correction = 0.31 - FLEET_SENT_LATE_S
    told = [i for i, late in enumerate(fleet.late) if late]
    assert len(fleet.late) == 21 and len(told) == 1
    assert fleet.late[told[0]] == pytest.approx(correction)
    interval = (1 + FLEET_LATE_S) / FLEET_MOST_PER_S
    times = sorted(written.values())
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # The bookings after the first one (send 100's) are those of these sends, in order.
    assert gaps == pytest.approx([interval + (correction if i + 2 == told[0] else 0.0) for i in range(19)])


class DownFleet:
    """The fleet's shared buckets while the database cannot be reached."""

    def __init__(self) -> None:
        self.paused: list[float] = []

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        return None

    async def pause(self, seconds: float) -> None:
        self.paused.append(seconds)


async def test_in_a_fleet_whose_buckets_cannot_be_reached_this_instances_own_buckets_decide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nothing is held up, and nothing goes faster than on a single instance: a group's own bucket (2 a
    minute here) and the overall one (4/s) space the sends; a 429 still pauses this instance, and is passed on."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")
    time = VirtualTime()
    fleet = DownFleet()
    limiter = FloodLimiter(
        overall_per_s=4, group_burst=2, group_period_s=60, clock=time.clock, sleep=time.sleep, fleet=fleet
    )
    sent, request = recorder(time)
    jobs = [functools.partial(request, limiter, "sendMessage", -5001) for _ in range(3)]
    await time.run(*jobs, functools.partial(request, limiter, "editMessageText", 1, fail=1))
    assert [chat for _, chat, _ in sent] == [-5001, -5001, 1, -5001]
    # The edit is refused once (retry_after 3), then every request waits; the third to the group waits for its
    # bucket (2 a minute: one every 30 s).
    assert [at - 1000.0 for _, _, at in sent] == pytest.approx([0.0, 0.25, 0.5 + 3 + RETRY_MARGIN_S, 30.0])
    assert fleet.paused == [3 + RETRY_MARGIN_S]


async def test_past_the_requests_in_flight_a_freed_slot_goes_to_a_card_first_and_a_moot_request_is_not_sent() -> (
    None
):
    """With one request in flight, a status (made moot meanwhile), a result to another chat and a card wait for
    the slot: the card goes first, the result next, and the moot status is withdrawn."""
    limiter = FloodLimiter(overall_per_s=0, group_burst=0, chat_burst=0, in_flight=1)
    release, order = anyio.Event(), []
    moot = False

    async def send(name: str) -> str:
        if name == "first":
            await release.wait()
        order.append(name)
        return name

    async def request(name: str, chat: int, *, card: bool = False, status: bool = False) -> None:
        data = {"chat_id": chat}
        try:
            if card:
                with card_first():
                    await limiter.process_request(send, (name,), {}, "sendMessage", data, None)
            elif status:
                with unless(lambda: moot):
                    await limiter.process_request(send, (name,), {}, "sendMessage", data, None)
            else:
                await limiter.process_request(send, (name,), {}, "sendMessage", data, None)
        except Withdrawn:
            order.append(f"{name} withdrawn")

    with anyio.fail_after(5):  # a card never woken would hang: fail instead
        async with anyio.create_task_group() as tg:
            tg.start_soon(request, "first", 1)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(functools.partial(request, "status", 2, status=True))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(request, "result", 3)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(functools.partial(request, "card", 2, card=True))
            await anyio.wait_all_tasks_blocked()
            moot = True
            release.set()
    assert order == ["first", "card", "status withdrawn", "result"]


async def test_a_courtesy_request_is_withdrawn_while_a_card_is_on_its_way_and_goes_once_none_went_for_a_while() -> (
    None
):
    """`after_cards`: a status made while a card is out (here: sent and not yet answered), or less than
    `CARDS_QUIET_S` after one was answered, is withdrawn at its turn, unsent, so that a flood of cards is not slowed
    by statuses; once no card went for that long, the same request goes."""
    now = 100.0
    limiter = FloodLimiter(overall_per_s=0, group_burst=0, chat_burst=0, clock=lambda: now)
    answered, sent = anyio.Event(), []

    async def send(name: str) -> str:
        if name == "card":
            await answered.wait()
        sent.append(name)
        return name

    async def card() -> None:
        with card_first():
            await limiter.process_request(send, ("card",), {}, "sendMessage", {"chat_id": 1}, None)

    async def status() -> None:
        with after_cards():
            await limiter.process_request(send, ("status",), {}, "sendMessage", {"chat_id": 2}, None)

    with anyio.fail_after(5):
        await status()  # no card went yet
        async with anyio.create_task_group() as tg:
            tg.start_soon(card)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(Withdrawn):
                await status()
            answered.set()
        now += CARDS_QUIET_S - 0.01
        with pytest.raises(Withdrawn):
            await status()
        now += 0.01
        await status()
    assert sent == ["status", "card", "status"]

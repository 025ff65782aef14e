"""Flood control: Telegram's limits applied before sending, and 429s waited out so nothing is dropped.

Telegram lets a bot send about 30 messages a second overall, 20 a minute to one group, and to one private
chat a short burst, then about one a second. Each limit is a bucket here; a request is sent once every bucket
that applies to it has room, in the order requests arrive, except that a new card (sent inside `card_first()`:
someone is waiting to be asked) may overtake, overall, requests to other chats that are still waiting, up to
MAX_OVERTAKEN times each; a request made `unless(withdraw)` that is moot when its turn comes books no place,
and one made `after_cards()` (a courtesy) is withdrawn while cards are going out.
Overall, requests are also counted as they go, so that no second holds more than the bucket allows in one
even after the event loop was held up. A 429 all the same (Telegram keeps its own count) pauses every
request for its `retry_after`; then the refused request is sent again, up to MAX_RETRIES times. At most
IN_FLIGHT requests are in flight at once (the HTTP pool's connections): a burst past that (the end of a 429's
pause, a bot whose overall limit is off) waits here, cards first, rather than in the pool, unordered and with
its wait bounded by the pool's timeout.

In a fleet (several instances of one bot on PostgreSQL, webhook mode) Telegram still counts the bot's messages,
not each instance's: the overall rate and the group buckets are then booked in the database as well (`fleet`,
`bot.store.budget.TelegramBudget`: one short statement per send, the database's clock deciding), and a 429 seen
by one instance pauses all of them. The fleet's places leave room for a send that reaches Telegram a little late
in the 2 more a second Telegram allows than an instance books (`FLEET_LATE_S`: 27.8 a second, no second over
30), and a send Telegram answered later than that moves the fleet's later places back, through its instance's
next booking. A process alone has a budget that books nothing (`ALONE_BUDGET`): its own buckets decide, with no round trip and no wait added. Private chats' buckets and the order within one instance (cards first) stay
here: the fleet's overall place is booked only once a request's turn came here, one at a time, so what waits
for the fleet waits in this instance's own queue. When the database cannot be reached, these buckets alone
decide until it is back.

A request made `kept_for(user_id)` (a call's result, the edit that settles a card, an approval's outcome) must
reach its person: with an outbox (`bot.store.outbox.OutboxStore`) it is written there before it waits for its
turn, and marked sent once Telegram answered it (or refused it for good, or it was withdrawn as moot). A kept
request whose person this process no longer acts for once its turn came (another instance took them over) is not
sent here (`Elsewhere`): the new owner sends what the outbox holds (`bot.telegram.outbox`), as a bot started again
after a kill does. (A request for someone the process did not own to begin with goes unkept, as its caller chose.)

Ours rather than PTB's `AIORateLimiter` because that one has no bucket for a private chat's own limit (about
one message a second); with room in its buckets, a request here costs a few comparisons.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
from telegram import TelegramObject
from telegram.constants import FloodLimit
from telegram.error import RetryAfter, TelegramError
from telegram.ext import BaseRateLimiter

from bot.errors import ToolnexusError
from bot.store.budget import ALONE_BUDGET
from bot.telegram.request import on_written

logger = logging.getLogger(__name__)

OVERALL_PER_S: Final = 28
"""A margin under Telegram's ~30/s: a bucket at exactly 30 still trips its sliding window, and every 429
pauses all sending for its retry_after."""
OVERALL_BURST: Final = 1
"""No burst overall: a sliding window of one second holds a bucket's burst plus a second's worth of requests,
so any burst would have to come out of the rate, and the rate is what a flood of prompts waits on."""
OVERALL_LATE_SHARE: Final = 0.5
"""How late (a share of the interval between two places overall) a request may go without pushing the places
after it back. Two requests may then go closer together than the interval, but never more in one second than
the bucket allows (requests are also counted as they go)."""
MAX_OVERTAKEN: Final = 280
"""How many new cards may go before a waiting request overall (about ten seconds of sending): a flood of
prompts reaches everyone first, and a result or a redraw still goes within a bounded wait."""
GROUP_BURST: Final = int(FloodLimit.MESSAGES_PER_MINUTE_PER_GROUP)
GROUP_PERIOD_S: Final = 60.0
CHAT_BURST: Final = 10
"""New messages one private chat may get at once; after that about one per `CHAT_PERIOD_S / CHAT_BURST`."""
CHAT_PERIOD_S: Final = 10.0
MAX_RETRIES: Final = 8
RETRY_MARGIN_S: Final = 0.1
"""Added to a 429's retry_after, which Telegram rounds down to whole seconds."""
IN_FLIGHT: Final = 32
"""Requests in flight at once: the Bot API client's pool has as many connections (`bot.telegram.bot`)."""
CARDS_QUIET_S: Final = 1.0
"""How long after the last card went a request made `after_cards` is still withdrawn: in a flood of questions
the cards come one after another, with moments between them when none is out."""
_BUCKETED: Final = frozenset({"sendMessage", "sendPhoto", "sendDocument", "copyMessage", "forwardMessage"})
"""What counts against a private chat's bucket: new messages (edits and tap answers count only overall)."""
FLEET_OVER: Final = 2
"""How many more than `overall_per_s` sends a second of a fleet may hold, as Telegram receives them: Telegram's
30 against the 28 an instance books. A single instance counts its sends as they go (`_within_second`) and
leaves these 2 for what its count cannot see; an instance cannot count another's, so in a fleet they are the
room for lateness instead (`FLEET_LATE_S`)."""
FLEET_MOST_PER_S: Final = OVERALL_PER_S + FLEET_OVER
"""What a fleet keeps to: no second holds more than 30 of the bot's sends as Telegram receives them, as long as
each reaches Telegram within `FLEET_LATE_S` of its place."""
FLEET_LATE_S: Final = 0.08
"""How late after its place a send in a fleet may reach Telegram and still count at its place. The places are
`(1 + FLEET_LATE_S) / FLEET_MOST_PER_S` apart (36 ms, 27.8 a second): the sends Telegram receives in one
second, each within FLEET_LATE_S of its place, have their places within 1.08 s, which holds at most 30 of
them. Until now every place was spaced for a send 100 ms late and a second of at most 28, an instance's own
rate rather than Telegram's: 25.5 a second, 1.18x of 30.

Whether a send kept to it is known afterwards, from Telegram's answer: Telegram received it at the latest
when its answer came, less the quickest round trip of the instance's latest sends (`FLEET_TRIPS`: the way
there and back is never quicker). A send answered later than FLEET_LATE_S after its place by that measure (its
process held up, the network, or Telegram itself: in bench f, the fake Bot API, a process busy with its 300
people, now and then reads nothing for 100 ms to 0.8 s, then everything that came at once) tells the fleet in
its instance's next booking (`late_s`, in the same statement), and every place booked from then on, by any
instance, moves back by its lateness past `FLEET_SENT_LATE_S`: the second it landed in holds that many fewer
places after it, with the way's share of the margin kept spare. A delay that several instances saw moves the
places once (`bot.store.budget`). What cannot move are the sends already on their way when the late one was
answered: a second may hold more than 30 when Telegram reads nothing for longer than the margin, and its 429
then pauses the fleet as ever."""
FLEET_SENT_LATE_S: Final = 0.035
"""How late after its place an instance may write a send's body, of `FLEET_LATE_S` (the other 45 ms are the
way to Telegram, which no instance sees). A place counts from when it was asked for (the database took it a
moment later, and its answer may be read later still), so the wait for that answer counts too. A request woken
later than this after its place books again (a place wasted: never more in a second); one woken in time but
written late is corrected as above, from its answer."""
FLEET_TRIPS: Final = 16
"""How many of its latest round trips to Telegram (written to answered) an instance in a fleet takes the
quickest of: about a second of its sends in a flood, so that a way slower for a while (Telegram busy for
seconds, every answer later alike) soon counts as the way, while a stall shorter than that stands out; a way
that is slow alike for every send delays them all, and bunches none."""
FLEET_REBOOKS: Final = 2
"""How many times a request woken late books again before it goes all the same."""
_FORGET_AFTER: Final = 1024
"""Group and chat buckets kept before the refilled ones are forgotten (a refilled bucket is a new one)."""

_CARD: ContextVar[bool] = ContextVar("flood_card", default=False)
_UNLESS: ContextVar[Callable[[], bool] | None] = ContextVar("flood_unless", default=None)
_AFTER_CARDS: ContextVar[bool] = ContextVar("flood_after_cards", default=False)


@dataclass(frozen=True, slots=True)
class _Kept:
    user_id: int
    key: Any = None
    """The request's row when it is kept already (sent again from the outbox by the person's new owner)."""


_KEPT: ContextVar[_Kept | None] = ContextVar("flood_kept", default=None)


class FleetBudget(Protocol):
    """Buckets shared by every instance of the bot (`bot.store.budget.TelegramBudget`; alone, `ALONE_BUDGET`)."""

    async def book(
        self, group: int | str | None, interval_s: float, period_s: float, *, late_s: float = 0.0
    ) -> float | None:
        """Book the next place in a group's bucket (its chat id or @name), or the overall one (None): the
        seconds to wait for it, or None when nothing shared was booked (a process alone, or the shared buckets
        out of reach: this instance's own decide). `late_s`: how far the places from now on are to move
        back for a send of this instance's that reached Telegram late, since its last booking."""
        ...

    async def pause(self, seconds: float) -> None:
        """Pause every instance's sending for `seconds` (a 429)."""
        ...


class Outbox(Protocol):
    """Where requests that must reach their person are kept until Telegram answered (`bot.store.outbox`)."""

    async def acts_for(self, user_id: int) -> bool:
        """Whether this process may send for `user_id` now (in a fleet, it owns them and its hold is fresh)."""
        ...

    async def keep(self, user_id: int, method: str, params: str) -> Any:
        """Write a request down before it waits (`params` as JSON); its key, or None when it could not be."""
        ...

    def sent(self, key: Any) -> None:
        """The request was answered, or will never go: nobody is to send it again."""
        ...


class Withdrawn(ToolnexusError):
    """A request made inside `unless(withdraw)` whose `withdraw()` held when its turn came: it was not sent."""


class Elsewhere(Withdrawn):
    """A request made `kept_for` a person this process no longer acts for: not sent here, and left in the outbox
    for the person's owner."""


@contextmanager
def card_first() -> Iterator[None]:
    """Requests made inside this block send a new card: they go before other chats' waiting requests."""
    token = _CARD.set(True)
    try:
        yield
    finally:
        _CARD.reset(token)


@contextmanager
def unless(withdraw: Callable[[], bool]) -> Iterator[None]:
    """Requests made inside this block are not sent when `withdraw()` holds once their turn comes (they raise
    `Withdrawn`), and a card to their chat may go before them: what a card makes moot (a status message a
    card arrived to stand for) gives way to it."""
    token = _UNLESS.set(withdraw)
    try:
        yield
    finally:
        _UNLESS.reset(token)


@contextmanager
def kept_for(user_id: int) -> Iterator[None]:
    """Requests made inside this block must reach `user_id` (a result, a settling edit, an approval's outcome):
    kept in the outbox until Telegram answered them, so that whoever owns the person after a kill sends them;
    not sent by a process that no longer acts for the person (`Elsewhere`)."""
    token = _KEPT.set(_Kept(user_id))
    try:
        yield
    finally:
        _KEPT.reset(token)


@contextmanager
def resending(user_id: int, key: Any) -> Iterator[None]:
    """The request made inside this block is one the outbox kept as `key` (another process's, not marked sent):
    sent as `kept_for` would, and marked sent once Telegram answered it."""
    token = _KEPT.set(_Kept(user_id, key))
    try:
        yield
    finally:
        _KEPT.reset(token)


@contextmanager
def after_cards() -> Iterator[None]:
    """Requests made inside this block are withdrawn (`Withdrawn`, as with `unless`) when, at their turn, cards
    are on their way (made inside `card_first()` and not yet answered) or one went less than `CARDS_QUIET_S`
    ago: a courtesy such as a call's "Running" status is not worth a card's wait, nor the bot's time in a flood
    of them; its caller tries again later."""
    token = _AFTER_CARDS.set(True)
    try:
        yield
    finally:
        _AFTER_CARDS.reset(token)


class _Bucket:
    """`burst` requests at once, refilled evenly over `period_s`.

    Kept as the time the bucket would be empty again (the generic cell rate algorithm): booking a request is
    one addition, and the time a request may go is known when it arrives, so requests go in arrival order.
    """

    __slots__ = ("_full_at", "_interval", "_late", "_tolerance")

    def __init__(self, burst: int, period_s: float, *, late_share: float = 0.0) -> None:
        self._interval = period_s / burst
        self._tolerance = period_s - self._interval
        self._late = late_share * self._interval
        """How late a request may go and leave the places after it where they were (a share of the
        interval): a sleeper is woken a little after its time, and each such delay would otherwise push
        every later place back, so the rate would fall short of the bucket's."""
        self._full_at = 0.0

    def earliest(self, now: float) -> float:
        """When a request arriving `now` may be sent."""
        return max(now, self._full_at - self._tolerance)

    def book(self, at: float) -> None:
        """Count a request sent at `at` (not before `earliest`)."""
        on_time = at <= self._full_at + self._late  # or only a little late: the places after it stay
        self._full_at = (self._full_at if on_time else at) + self._interval

    def refilled(self, now: float) -> bool:
        return self._full_at <= now

    def hold(self, at: float) -> None:
        """Book no place before `at` (the fleet's place for this instance's latest request)."""
        self._full_at = max(self._full_at, at + self._tolerance)


class _InFlight:
    """At most `limit` requests in flight: a slot freed goes to a waiting card first (unless its chat has other
    requests waiting, which keep their order), then to the others in arrival order. A slot is handed from the
    request that frees it to the one it wakes, so nothing arriving meanwhile takes it."""

    __slots__ = ("_cards", "_free", "_others", "_waiting_chats")

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._cards: deque[anyio.Event] = deque()
        self._others: deque[tuple[anyio.Event, object]] = deque()
        self._waiting_chats: Counter[object] = Counter()
        """The chats of the waiting requests a card must not overtake (None for those a card may)."""

    async def acquire(self, card: bool, chat: object) -> None:
        """Wait for a slot; `chat` is None for a request a card to its chat may overtake."""
        if self._free:  # a slot freed while requests wait is handed to one of them, never left free
            self._free -= 1
            return
        event = anyio.Event()
        first = card and not self._waiting_chats[chat]
        if first:
            self._cards.append(event)
        else:
            self._others.append((event, chat))
            if chat is not None:
                self._waiting_chats[chat] += 1
        try:
            await event.wait()
        except BaseException:
            if event.is_set():  # handed a slot as it was cancelled: pass it on
                self.release()
            elif first:
                self._cards.remove(event)
            else:
                self._others.remove((event, chat))
                self._unwait(chat)
            raise

    def release(self) -> None:
        if self._cards:
            self._cards.popleft().set()
        elif self._others:
            event, chat = self._others.popleft()
            self._unwait(chat)
            event.set()
        else:
            self._free += 1

    def _unwait(self, chat: object) -> None:
        if chat is None:
            return
        self._waiting_chats[chat] -= 1
        if not self._waiting_chats[chat]:
            del self._waiting_chats[chat]


class _Went:
    """When a request counted overall went: when its turn came, then (called) when its body was written."""

    __slots__ = ("_clock", "at")

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.at = clock()

    def __call__(self) -> None:
        self.at = self._clock()


class FloodLimiter(BaseRateLimiter[int]):
    """Telegram's flood limits for every Bot API call except getUpdates (PTB never limits that one).

    Requests with a `chat_id` count overall; those to a group or channel (a negative id or an `@name`) also
    count against that chat's bucket, and new messages to a private chat against that chat's. A limit of 0
    turns its buckets off. `rate_limit_args`, where PTB passes it, overrides `max_retries` for one call.
    `clock` and `sleep` are the time it goes by (tests pass in a virtual one). `fleet` shares the overall and
    group buckets with the bot's other instances (alone, `ALONE_BUDGET` books nothing). `in_flight` caps the requests
    sent and not yet answered (0: no cap).

    Overall, a card (`card_first`) books its place when it arrives; any other request waits in one queue, in
    arrival order, and books its place only when the bucket has room at once (no card is waiting for it), or
    once `max_overtaken` cards have booked since it arrived; from then on, a card arriving books the next
    place for the queue's first request before its own. A card joins that queue instead when its chat has
    requests in it (within one chat, order is kept). The same order holds for the requests whose turn came
    while `in_flight` were out: a freed slot goes to a card first.
    """

    def __init__(
        self,
        *,
        overall_per_s: int = OVERALL_PER_S,
        overall_burst: int = OVERALL_BURST,
        group_burst: int = GROUP_BURST,
        group_period_s: float = GROUP_PERIOD_S,
        chat_burst: int = CHAT_BURST,
        chat_period_s: float = CHAT_PERIOD_S,
        max_retries: int = MAX_RETRIES,
        max_overtaken: int = MAX_OVERTAKEN,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        fleet: FleetBudget = ALONE_BUDGET,
        in_flight: int = IN_FLIGHT,
        outbox: Outbox | None = None,
    ) -> None:
        self._overall = (
            _Bucket(overall_burst, overall_burst / overall_per_s, late_share=OVERALL_LATE_SHARE)
            if overall_per_s
            else None
        )
        self._sent: deque[_Went] = deque(maxlen=max(1, overall_burst - 1 + overall_per_s))
        """When the latest requests counted overall went, as many as the bucket allows in one second."""
        self._second_lock = anyio.Lock(fast_acquire=True)
        self._group_limit = (group_burst, group_period_s) if group_burst else None
        self._chat_limit = (chat_burst, chat_period_s) if chat_burst else None
        self._groups: dict[int | str, _Bucket] = {}
        self._chats: dict[int, _Bucket] = {}
        self._max_retries = max_retries
        self._clock = clock
        self._sleep = sleep
        self._resume_at = 0.0
        """After a 429: no request is sent before this."""
        self._max_overtaken = max_overtaken
        self._cards_booked = 0
        """Cards booked overall so far (a waiting request counts how many went before it)."""
        self._queue_tail = 0
        self._queue_head = 0
        """Tickets of the requests waiting overall: the head's turn is `_queue_head`, the next ticket `_tail`."""
        self._queue_moved = anyio.Event()
        self._queued_chats: Counter[object] = Counter()
        self._abandoned: set[int] = set()
        self._queued_since: dict[int, int] = {}
        """Each waiting ticket: `_cards_booked` when it arrived."""
        self._granted: dict[int, float] = {}
        """Places booked by a card for the queue's first request, once it may be overtaken no more."""
        self._withdraws: dict[int, Callable[[], bool]] = {}
        """The waiting tickets made `unless(withdraw)`: whether each is moot now."""
        self._in_flight = _InFlight(in_flight) if in_flight else None
        self._cards_out = 0
        """Cards (`card_first`) on their way: waiting here or sent and not yet answered (`after_cards`)."""
        self._card_went_at = -CARDS_QUIET_S
        """When the last card was answered."""
        self._fleet = fleet
        self._fleet_interval = (1 + FLEET_LATE_S) / (overall_per_s + FLEET_OVER) if overall_per_s else 0.0
        self._fleet_late = 0.0
        """How far the fleet's places are to move back for a send of this instance's that Telegram may have
        received later than `FLEET_LATE_S` after its place, since its last booking overall (0: none)."""
        self._fleet_trips: deque[float] = deque(maxlen=FLEET_TRIPS)
        """The round trips (written to answered) of this instance's latest sends in a fleet."""
        self._fleet_gate = anyio.Lock(fast_acquire=True)
        """One request at a time books the fleet's overall place and waits for it: the others wait here, in
        this instance's order, and the fleet's places go to the instances in turn."""
        self._outbox = outbox
        """Where requests made `kept_for` are kept until answered (None: nowhere, e.g. no database)."""

    async def initialize(self) -> None:
        """Nothing to set up: buckets are made as chats appear."""

    async def shutdown(self) -> None:
        """Nothing to release."""

    async def process_request(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
    ) -> Any:
        kept, outbox = _KEPT.get(), self._outbox
        if kept is None or outbox is None:
            return await self._process(callback, args, kwargs, endpoint, data, rate_limit_args)
        key = kept.key
        if not await outbox.acts_for(kept.user_id):
            if key is not None:
                raise Elsewhere(endpoint)  # the person's owner sends it
            # Not this process's person (an agent's call waiting here): sent unkept, as its caller chose to.
            return await self._process(callback, args, kwargs, endpoint, data, rate_limit_args)
        if key is None:
            params = _json(data)
            key = None if params is None else await outbox.keep(kept.user_id, endpoint, params)
        if key is None:  # not kept (the database out of reach, parameters not JSON): sent all the same
            return await self._process(callback, args, kwargs, endpoint, data, rate_limit_args)
        try:
            answer = await self._process(
                callback, args, kwargs, endpoint, data, rate_limit_args, kept.user_id
            )
        except Elsewhere:
            raise  # the person's owner sends it from the outbox
        except (Withdrawn, TelegramError):
            outbox.sent(key)  # moot, or refused for good: nobody is to send it again
            raise
        outbox.sent(key)
        return answer

    async def _process(
        self,
        callback: Callable[..., Coroutine[Any, Any, Any]],
        args: Any,
        kwargs: dict[str, Any],
        endpoint: str,
        data: dict[str, Any],
        rate_limit_args: int | None,
        owner: int | None = None,
    ) -> Any:
        """The request once its turn came; `owner`: it is kept for this person, and goes only while this
        process acts for them (`Elsewhere`)."""
        card, withdraw = _CARD.get(), _UNLESS.get()
        if _AFTER_CARDS.get():
            withdraw = self._after_cards(withdraw)
        chat_id = data.get("chat_id")
        retries = self._max_retries if rate_limit_args is None else rate_limit_args
        refused = 0
        # A card counts as going out (`after_cards`) while it waits here or is in flight.
        self._cards_out += card
        try:
            while True:
                shared_group = await self._fleet_group(chat_id)
                buckets = self._buckets(endpoint, chat_id, group=not shared_group)
                overall = self._overall is not None and bool(buckets) and buckets[-1] is self._overall
                try:
                    await self._turn(buckets, chat_id, card, withdraw)
                except Withdrawn:
                    raise Withdrawn(endpoint) from None
                place = await self._fleet_turn() if overall else None
                slots = self._in_flight
                if slots is not None:
                    await slots.acquire(card, chat_id if withdraw is None else None)
                try:
                    if withdraw is not None and withdraw():  # looked at once more after the wait for a slot
                        raise Withdrawn(endpoint)
                    if (
                        owner is not None
                        and self._outbox is not None
                        and not await self._outbox.acts_for(owner)
                    ):
                        raise Elsewhere(endpoint)
                    if not overall:
                        return await callback(*args, **kwargs)
                    with on_written(went := await self._within_second()):
                        answer = await callback(*args, **kwargs)
                    if place is not None:
                        self._answered(place, went.at)
                    return answer
                except RetryAfter as exc:
                    refused += 1
                    if refused > retries:
                        logger.error(
                            "%s refused with 429 %d times in a row; giving up on it", endpoint, refused
                        )
                        raise
                    pause = _seconds(exc.retry_after) + RETRY_MARGIN_S
                    logger.info(
                        "Telegram asks to wait %.1f s (429 on %s): every request waits", pause, endpoint
                    )
                    self._resume_at = max(self._resume_at, self._clock() + pause)
                    await self._fleet.pause(pause)  # every instance's, from the database's now
                finally:
                    if slots is not None:
                        slots.release()
        finally:
            if card:
                self._cards_out -= 1
                self._card_went_at = self._clock()

    def _after_cards(self, withdraw: Callable[[], bool] | None) -> Callable[[], bool]:
        def cards_going() -> bool:
            return self._cards_out > 0 or self._clock() - self._card_went_at < CARDS_QUIET_S

        if withdraw is None:
            return cards_going
        return lambda: cards_going() or withdraw()

    async def _turn(
        self,
        buckets: list[_Bucket],
        chat_id: object,
        card: bool,
        withdraw: Callable[[], bool] | None = None,
    ) -> None:
        """Wait until this request may go, booking its place in each bucket in turn (the overall one last: a
        chat's own wait can be long, and a place booked overall would hold up every other chat meanwhile).

        Raises:
            Withdrawn: `withdraw()` held when the request's turn came overall (no place was booked there).
        """
        for bucket in buckets:
            if bucket is not self._overall:
                await self._book(bucket)
            elif card and not self._queued_chats[chat_id]:
                if self._starving():  # the queue's first request goes next, then this card
                    self._grant_head(bucket)
                self._cards_booked += 1
                await self._book(bucket)
            else:
                await self._book_queued(bucket, chat_id if withdraw is None else None, withdraw)
        while (pause := self._resume_at - self._clock()) > 0:  # a 429 came: wait it out, then space again
            await self._sleep(pause)
            if buckets:
                await self._book(buckets[-1])

    async def _fleet_group(self, chat_id: object) -> bool:
        """In a fleet, book a group's place in its shared bucket and wait for it; whether it was (False: not a
        group, or nothing shared booked: the local bucket decides)."""
        key = self._group_key(chat_id)
        if key is None or self._group_limit is None:
            return False
        burst, period = self._group_limit
        wait = await self._fleet.book(key, period / burst, period)
        if wait is None:
            return False
        if wait > 0:
            await self._sleep(wait)
        return True

    async def _fleet_turn(self) -> float | None:
        """In a fleet, once this request's turn came here: book its place in the fleet's overall bucket and
        wait for it, one request at a time (see `_fleet_gate`); the place (None: nothing shared was booked).
        A request woken later than `FLEET_SENT_LATE_S` after its place books again (up to `FLEET_REBOOKS`
        times), so that sends stay within the margin. Each booking carries the correction Telegram's answers
        to this instance's sends called for, if any (`_answered`). With the fleet's buckets unreachable
        it goes at once: this instance's own buckets already spaced it (and alone, nothing is booked: no wait,
        no yield)."""
        async with self._fleet_gate:
            place = None
            for _ in range(FLEET_REBOOKS + 1):
                late, self._fleet_late = self._fleet_late, 0.0
                asked = self._clock()
                wait = await self._fleet.book(None, self._fleet_interval, self._fleet_interval, late_s=late)
                if wait is None:
                    return None
                place = asked + wait  # the database took it a moment after: its answer may be read much later
                if self._overall is not None:  # the local queue waits for the fleet too: cards stay first
                    self._overall.hold(place)
                if (left := place - self._clock()) > 0:
                    await self._sleep(left)
                if self._clock() - place <= FLEET_SENT_LATE_S:
                    break
            return place

    def _answered(self, place: float, written: float) -> None:
        """Telegram answered a send booked at the fleet's `place` and written at `written`: it received it at the
        latest now, less the quickest round trip of this instance's latest ones (the way there and back is never
        quicker). If that is later than `FLEET_LATE_S` after its place, this instance's next booking tells the
        fleet to move its places back by its lateness past `FLEET_SENT_LATE_S` (the most of several, not their
        sum: sends held up together went late together)."""
        now = self._clock()
        trips = self._fleet_trips
        trips.append(now - written)
        late = now - min(trips) - place
        if late > FLEET_LATE_S:
            self._fleet_late = max(self._fleet_late, late - FLEET_SENT_LATE_S)

    async def _within_second(self) -> _Went:
        """Wait until sending now keeps every second within what the overall bucket allows in one (its burst
        and a second's worth of its rate), counted when requests go. The bucket spaces the places it books,
        but the requests whose places passed while the event loop was held up would all go at once, more
        than the rate in one second (and Telegram counts them as they come).

        A request counts from now, and from when its body was written once the HTTP client says so (the
        `_Went` returned, called through `request.on_written`): written a loop pass later, tens of
        milliseconds under load, a request would otherwise land in the next second with those sent then."""
        async with self._second_lock:
            sent = self._sent
            while len(sent) == sent.maxlen and (wait := sent[0].at + 1.0 - self._clock()) > 0:
                await self._sleep(wait)  # the oldest may have gone out later than counted: look again
            went = _Went(self._clock)
            sent.append(went)
            return went

    async def _book(self, bucket: _Bucket) -> None:
        now = self._clock()
        at = max(now, self._resume_at, bucket.earliest(now))
        bucket.book(at)
        if at > now:
            await self._sleep(at - now)

    async def _book_queued(
        self, bucket: _Bucket, chat_id: object, withdraw: Callable[[], bool] | None = None
    ) -> None:
        """Book overall in queue order, once the bucket has room now or enough cards went first; a request
        that `withdraw()` has made moot by then leaves the queue without booking (`Withdrawn`), so the place
        goes to the next request instead of to nobody."""
        ticket, self._queue_tail = self._queue_tail, self._queue_tail + 1
        cards_before = self._queued_since[ticket] = self._cards_booked
        self._queued_chats[chat_id] += 1
        if withdraw is not None:
            self._withdraws[ticket] = withdraw
        try:
            while ticket != self._queue_head:
                await self._queue_moved.wait()
            while True:
                now = self._clock()
                granted = self._granted.pop(ticket, None)
                if granted is not None:  # a card booked this place for it
                    at = granted
                    break
                at = max(now, self._resume_at, bucket.earliest(now))
                if at <= now or self._cards_booked - cards_before >= self._max_overtaken:
                    if withdraw is not None and withdraw():
                        raise Withdrawn()
                    bucket.book(at)
                    break
                await self._sleep(at - now)  # cards booked meanwhile push it back; look again then
        finally:
            self._granted.pop(ticket, None)
            self._withdraws.pop(ticket, None)
            del self._queued_since[ticket]
            self._queued_chats[chat_id] -= 1
            if not self._queued_chats[chat_id]:
                del self._queued_chats[chat_id]
            if ticket == self._queue_head:
                self._next_in_queue()
            else:
                self._abandoned.add(ticket)  # cancelled while waiting: its turn is skipped
        if at > now:
            await self._sleep(at - now)

    def _starving(self) -> bool:
        """Whether the request first in the queue has had as many cards go before it as it may (and has no
        place booked for it yet)."""
        head = self._queue_head
        since = self._queued_since.get(head)
        starving = since is not None and self._cards_booked - since >= self._max_overtaken
        withdraw = self._withdraws.get(head)
        moot = withdraw is not None and withdraw()  # it leaves without a place when it next looks
        return starving and head not in self._granted and not moot

    def _grant_head(self, bucket: _Bucket) -> None:
        """Book the next place for the queue's first request (it takes it when it next looks)."""
        now = self._clock()
        at = max(now, self._resume_at, bucket.earliest(now))
        bucket.book(at)
        self._granted[self._queue_head] = at

    def _next_in_queue(self) -> None:
        self._queue_head += 1
        while self._queue_head in self._abandoned:
            self._abandoned.remove(self._queue_head)
            self._queue_head += 1
        moved, self._queue_moved = self._queue_moved, anyio.Event()
        moved.set()

    def _buckets(self, endpoint: str, chat_id: object, *, group: bool = True) -> list[_Bucket]:
        """The local buckets a request counts against (without its group's when `group` is False: the fleet's
        shared one counted it)."""
        if chat_id is None:
            return []
        buckets = []
        chat = _int(chat_id)
        key = self._group_key(chat_id)
        if key is not None:
            if self._group_limit is not None and group:
                buckets.append(self._bucket(self._groups, key, self._group_limit))
        elif chat is not None and endpoint in _BUCKETED and self._chat_limit is not None:
            buckets.append(self._bucket(self._chats, chat, self._chat_limit))
        if self._overall is not None:
            buckets.append(self._overall)
        return buckets

    @staticmethod
    def _group_key(chat_id: object) -> int | str | None:
        """A group's or channel's key (a negative id, or an `@name`); None for a private chat or no chat."""
        if chat_id is None:
            return None
        chat = _int(chat_id)
        if chat is not None and chat >= 0:
            return None
        return chat if chat is not None else str(chat_id)

    def _bucket(self, buckets: dict[Any, _Bucket], key: Any, limit: tuple[int, float]) -> _Bucket:
        bucket = buckets.get(key)
        if bucket is None:
            if len(buckets) >= _FORGET_AFTER:
                now = self._clock()
                for stale in [k for k, b in buckets.items() if b.refilled(now)]:
                    del buckets[stale]
            bucket = buckets[key] = _Bucket(*limit)
        return bucket


def _json(data: dict[str, Any]) -> str | None:
    """A request's parameters as JSON for the outbox; None when one of them is not JSON (a file to upload)."""
    try:
        return json.dumps(data, default=_plain, ensure_ascii=False, separators=(",", ":"))
    except TypeError:
        return None


def _plain(value: object) -> Any:
    if isinstance(value, TelegramObject):
        return value.to_dict()
    raise TypeError(type(value).__name__)


def _seconds(delay: dt.timedelta | float) -> float:
    return delay.total_seconds() if isinstance(delay, dt.timedelta) else float(delay)


def _int(value: object) -> int | None:
    if not isinstance(value, int | float | str):
        return None
    try:
        return int(value)
    except ValueError:
        return None

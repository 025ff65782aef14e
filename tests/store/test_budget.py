"""The fleet's Telegram budget in the database (`bot.store.budget`): GCRA bookings and the 429 pause, as the
database computes them, and which bots share it (a fleet only: PostgreSQL and webhook mode)."""

from __future__ import annotations

import pytest

from bot.config import Config, parse_config
from bot.store import open_engine
from bot.store.budget import ALONE_BUDGET, TelegramBudget, fleet_budget

pytestmark = pytest.mark.anyio


def config(mode: str) -> Config:
    return parse_config(
        {
            "telegram": {"token": "123456:TEST", "mode": mode, "webhook_secret": "s3cret"},
            "web": {"public_url": "https://bot.example.com"},
            "servers": {"demo": {"command": "python"}},
        },
        {},
    )


@pytest.mark.parametrize("mode", ["webhook", "polling"])
async def test_only_a_fleet_on_postgresql_in_webhook_mode_shares_the_budget(
    store_url: str, mode: str
) -> None:
    """A single instance (SQLite, or polling) gets no shared budget: no database round trip per send."""
    engine = await open_engine(store_url)
    try:
        shared = fleet_budget(config(mode), engine)
    finally:
        await engine.dispose()
    assert isinstance(shared, TelegramBudget) == (mode == "webhook" and store_url.startswith("postgresql"))
    assert fleet_budget(config(mode), None) is ALONE_BUDGET


async def test_a_bucket_gives_its_burst_at_once_then_one_place_an_interval_apart(postgresql_url: str) -> None:
    """A bucket of 3 a minute (an interval of 20 s): three bookings go at once, the fourth waits about 20 s,
    the fifth about 40; another bucket, and another bot's, are not touched."""
    engine = await open_engine(postgresql_url)
    try:
        budget = TelegramBudget(engine, 1)
        waits = [await budget.book(-5, 20.0, 60.0) for _ in range(5)]
        assert waits[:3] == [0.0, 0.0, 0.0]
        assert waits[3] is not None and 19 < waits[3] <= 20
        assert waits[4] is not None and 39 < waits[4] <= 40
        assert await budget.book(-6, 20.0, 60.0) == 0.0
        assert await TelegramBudget(engine, 2).book(-5, 20.0, 60.0) == 0.0
    finally:
        await engine.dispose()


async def test_a_pause_holds_every_booking_of_the_bot_until_it_ends(postgresql_url: str) -> None:
    """After a 429's pause of 30 s (stored by one instance), the overall bucket's next place, booked by
    another, is about 30 s away; a shorter pause stored later does not shorten it."""
    engine, other = await open_engine(postgresql_url), await open_engine(postgresql_url)
    try:
        assert await TelegramBudget(other, 1).book(None, 0.04, 0.04) == 0.0
        await TelegramBudget(engine, 1).pause(30.0)
        await TelegramBudget(engine, 1).pause(1.0)
        wait = await TelegramBudget(other, 1).book(None, 0.04, 0.04)
        assert wait is not None and 29 < wait <= 30
        assert await TelegramBudget(other, 2).book(None, 0.04, 0.04) == 0.0
    finally:
        await engine.dispose()
        await other.dispose()


async def test_a_booking_that_reports_a_late_send_moves_the_fleets_next_places_back_once(
    postgresql_url: str,
) -> None:
    """Places 0.1 s apart, booked back to back by two instances: each 0.1 s after the one before. A booking that
    reports a send 0.5 s late gets its place 0.5 s further on, and the places after it (any instance's) keep the
    interval from there. The other instance reporting the same delay (0.4 s: it saw less of it) from before
    that move moves nothing more; a later delay of its own, seen after the move, moves the places again."""
    engine, other = await open_engine(postgresql_url), await open_engine(postgresql_url)
    try:
        here, there = TelegramBudget(engine, 1), TelegramBudget(other, 1)
        first = [await here.book(None, 0.1, 0.1), await there.book(None, 0.1, 0.1)]
        late = await here.book(None, 0.1, 0.1, late_s=0.5)
        same_delay = await there.book(None, 0.1, 0.1, late_s=0.4)
        own_delay = await there.book(None, 0.1, 0.1, late_s=0.2)
    finally:
        await engine.dispose()
        await other.dispose()
    assert first[0] == 0.0
    assert first[1] is not None and 0.05 < first[1] <= 0.1
    assert late is not None and 0.65 < late <= 0.7  # its place: 0.2 s on, and 0.5 s more
    assert same_delay is not None and 0.75 < same_delay <= 0.8
    assert own_delay is not None and 1.05 < own_delay <= 1.1

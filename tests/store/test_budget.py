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


async def test_a_booking_that_reports_late_sends_moves_the_fleets_next_places_back_by_that_much(
    postgresql_url: str,
) -> None:
    """Places 0.1 s apart, booked back to back: each 0.1 s after the one before. A booking that reports its
    instance's sends went 0.5 s later than their places allowed gets its place 0.5 s further on, and the places
    after it (any instance's) keep the interval from there: the correction is made once."""
    engine, other = await open_engine(postgresql_url), await open_engine(postgresql_url)
    try:
        here, there = TelegramBudget(engine, 1), TelegramBudget(other, 1)
        waits = [await here.book(None, 0.1, 0.1) for _ in range(3)]
        late = await here.book(None, 0.1, 0.1, late_s=0.5)
        after = await there.book(None, 0.1, 0.1)
    finally:
        await engine.dispose()
        await other.dispose()
    assert waits[0] == 0.0
    assert waits[2] is not None and 0.15 < waits[2] <= 0.2
    assert late is not None and 0.75 < late <= 0.8  # its place: 0.3 s on, and 0.5 s more
    assert after is not None and 0.85 < after <= 0.9

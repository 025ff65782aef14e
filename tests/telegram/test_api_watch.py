"""Tests for bot/telegram/api_watch.py: counts per method, and when `reachable()` asks Telegram again.

Real PTB (the bot's own `build_bot`) against the fake Bot API; the watch's clock is a virtual one.
"""

from __future__ import annotations

import logging

import pytest
from telegram.error import Conflict

from bot.telegram.api_watch import CONFLICT_EVERY_S, FRESH_S, ApiWatch
from bot.telegram.bot import build_bot
from bot.telegram.flood import FloodLimiter
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.anyio


def get_me_calls(fake: FakeTelegram) -> int:
    return sum(method == "getMe" for method, _ in fake.calls)


async def test_a_fresh_answer_vouches_for_telegram_and_a_stale_or_failed_one_is_checked_with_get_me() -> None:
    """No probe while the last answer is fresh; one getMe once it is older than FRESH_S or after a failure."""
    now = [1000.0]
    watch = ApiWatch(FloodLimiter(), clock=lambda: now[0])
    async with FakeTelegram() as fake:
        bot = build_bot(fake.token, fake.base_url, watch)
        async with bot:  # initialize() calls getMe: the first answer
            assert watch.answered is True
            before = get_me_calls(fake)
            now[0] += FRESH_S - 1
            assert await watch.reachable(bot)
            assert get_me_calls(fake) == before

            now[0] += 2
            assert await watch.reachable(bot)
            assert get_me_calls(fake) == before + 1

            fake.fail_next("sendMessage", 500)
            with pytest.raises(Exception, match="Internal Server Error"):
                await bot.send_message(1, "x")
            assert watch.answered is False
            assert await watch.reachable(bot)  # getMe answers: Telegram is back
            assert get_me_calls(fake) == before + 2

            fake.fail_next("getMe", 502)
            watch.answered = None
            assert not await watch.reachable(bot)
    assert watch.calls["sendMessage"] == 1 and watch.refused["sendMessage"] == 0


async def test_429s_are_counted_per_method_and_every_attempt_is_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 waited out and retried by the flood limiter: two calls, one refusal, and Telegram answered."""
    monkeypatch.setenv("PTB_TIMEDELTA", "true")  # as build_application sets it (else PTB warns on a 429)
    watch = ApiWatch(FloodLimiter())
    async with FakeTelegram() as fake:
        fake.user(id=1001, first_name="Alice")
        bot = build_bot(fake.token, fake.base_url, watch)
        async with bot:
            fake.fail_next("sendChatAction", 429, retry_after=1)
            await bot.send_chat_action(1001, "typing")
    assert watch.calls["sendChatAction"] == 2
    assert watch.refused == {"sendChatAction": 1}
    assert watch.answered is True


async def test_a_run_of_409_conflicts_once_polling_is_one_warning_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two bots on one token end each other's polls every few seconds: once this bot has polled, that is one
    warning per CONFLICT_EVERY_S counting the 409s, not a line each; before its first poll, a stop signal."""
    now = [1000.0]
    watch = ApiWatch(FloodLimiter(), clock=lambda: now[0])
    conflict = Conflict("Conflict: terminated by other getUpdates request")
    async with FakeTelegram() as fake:
        bot = build_bot(fake.token, fake.base_url, FloodLimiter(), on_polled=watch.polled)
        async with bot:
            await bot.get_updates(timeout=0)
    with caplog.at_level(logging.WARNING, logger="bot.telegram.api_watch"):
        for _ in range(5):
            watch.poll_failed(conflict)
            now[0] += 5
        now[0] += CONFLICT_EVERY_S
        watch.poll_failed(conflict)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("polling for updates: 1 x 409 Conflict")
    assert warnings[1].startswith("polling for updates: 5 x 409 Conflict")
    assert not watch.another_poller.is_set()
    first = ApiWatch(FloodLimiter())
    first.poll_failed(conflict)
    assert first.another_poller.is_set()

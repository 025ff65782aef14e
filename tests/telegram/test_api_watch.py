"""Tests for bot/telegram/api_watch.py: counts per method, and when `reachable()` asks Telegram again.

Real PTB (the bot's own `build_bot`) against the fake Bot API; the watch's clock is a virtual one.
"""

from __future__ import annotations

import pytest

from bot.telegram.api_watch import FRESH_S, ApiWatch
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

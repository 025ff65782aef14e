"""The bot process the bench measures: exactly `toolnexus-bot --config PATH`, with two bench-only switches.

`--unthrottled` replaces the bot's client-side flood control (PTB's rate limiter: ~30 requests/s overall and a
per-chat bucket) by a limiter with no limits, so scenarios that measure the bridge's own cost are not paced by
Telegram's rate. `--profile PATH` arms cProfile: SIGUSR1 starts it, SIGUSR2 stops it and writes the stats to
PATH, so a profile covers exactly the window the bench measures.
"""

from __future__ import annotations

import argparse
import cProfile
import signal
import sys
from typing import Any


def _unthrottle() -> None:
    from telegram.ext import AIORateLimiter, ApplicationBuilder

    original = ApplicationBuilder.rate_limiter

    def rate_limiter(self: Any, limiter: Any) -> Any:
        # Same code path (a limiter is still consulted per request), no limits: 0 disables both buckets.
        return original(self, AIORateLimiter(overall_max_rate=0, group_max_rate=0))

    ApplicationBuilder.rate_limiter = rate_limiter  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.botproc")
    parser.add_argument("--unthrottled", action="store_true")
    parser.add_argument("--profile", metavar="PATH")
    args, bot_args = parser.parse_known_args(argv)
    if args.unthrottled:
        _unthrottle()
    from bot.cli import main as bot_main

    if args.profile is not None:
        _arm_profiler(args.profile)
    return bot_main(bot_args)


def _arm_profiler(path: str) -> None:
    # Wall-clock timer: CPU-time timers cost a system call per event and distort far more. Idle time shows
    # up as `select.epoll.poll`; subtract it when reading shares.
    profiler = cProfile.Profile()

    def start(signum: int, frame: Any) -> None:
        profiler.enable()

    def stop(signum: int, frame: Any) -> None:
        profiler.disable()
        profiler.dump_stats(path)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)


if __name__ == "__main__":
    sys.exit(main())

"""The bot process the bench measures: exactly `toolnexus-bot --config PATH`, with bench-only switches.

`--unthrottled` turns the limits of the bot's client-side flood control (`bot.telegram.flood`: 25 requests/s overall,
per-group and per-chat buckets) off, keeping only a cap on requests in flight, so scenarios that measure the
bridge's own cost are not paced by Telegram's rate. `--client httpx` puts PTB's own `HTTPXRequest` under the bot
instead of the shipped aiohttp client, to compare the two. `--profile PATH` arms cProfile: SIGUSR1 starts it,
SIGUSR2 stops it and writes the stats to PATH, so a profile covers exactly the window the bench measures.
"""

from __future__ import annotations

import argparse
import cProfile
import signal
import sys
from typing import Any


def _unthrottle() -> None:
    import bot.compose.telegram
    from bot.store.budget import ALONE_BUDGET
    from bot.telegram.flood import FloodLimiter

    class Unthrottled(FloodLimiter):
        """The shipped flood control with every limit off (429s still waited out): only its cap on requests
        in flight (`bot.telegram.flood.IN_FLIGHT`, cards first) is left."""

        def __init__(self, fleet: Any = ALONE_BUDGET, outbox: Any = None) -> None:
            super().__init__(overall_per_s=0, group_burst=0, chat_burst=0, fleet=fleet, outbox=outbox)

    bot.compose.telegram.FloodLimiter = Unthrottled  # type: ignore[attr-defined,assignment]


def _no_store() -> None:
    """The bot without its database (no audit log, no kept questions): what the store costs is the difference."""
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    import bot.compose.process
    from bot.store import Store

    @asynccontextmanager
    async def none(config: Any, *, claim: bool = False, fleet: Any = None) -> AsyncIterator[Store | None]:
        yield None

    bot.compose.process.open_configured_store = none  # type: ignore[attr-defined]


def _use_httpx() -> None:
    from telegram.request import HTTPXRequest

    import bot.telegram.bot
    from bot.telegram.access import Access
    from bot.telegram.request import POOL_TIMEOUT_S
    from bot.telegram.updates import Lean

    def httpx_request(*, connections: int, written_hook: bool = True) -> HTTPXRequest:
        """PTB's own client with the pool the aiohttp client gets (and its pool timeout); it has no hook for
        the flood limiter's `on_written` either way."""
        return HTTPXRequest(connection_pool_size=connections, pool_timeout=POOL_TIMEOUT_S)

    class HttpxUpdates(HTTPXRequest):
        """The getUpdates client on httpx, cutting the updates as the aiohttp one does (a like-for-like count)."""

        def __init__(self, access: Access | None, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.lean = Lean(access or Access())

        def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]  # as UpdatesRequest
            decoded = super().parse_json_payload(payload)
            for update in decoded.get("result") or []:
                self.lean(update)
            return decoded

    def httpx_updates(
        *, connections: int, written_hook: bool = True, access: Access | None = None
    ) -> HTTPXRequest:
        return HttpxUpdates(access, connection_pool_size=connections, pool_timeout=POOL_TIMEOUT_S)

    bot.telegram.bot.AiohttpRequest = httpx_request  # type: ignore[attr-defined,assignment]
    bot.telegram.bot.UpdatesRequest = httpx_updates  # type: ignore[attr-defined,assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.botproc")
    parser.add_argument("--unthrottled", action="store_true")
    parser.add_argument("--client", choices=("aiohttp", "httpx"), default="aiohttp")
    parser.add_argument("--no-store", action="store_true")
    parser.add_argument("--profile", metavar="PATH")
    parser.add_argument("--memory", metavar="PATH")
    args, bot_args = parser.parse_known_args(argv)
    if args.unthrottled:
        _unthrottle()
    if args.client == "httpx":
        _use_httpx()
    if args.no_store:
        _no_store()
    if args.memory is not None:
        _arm_tracemalloc(args.memory)
    from bot.cli import main as bot_main

    if args.profile is not None:
        _arm_profiler(args.profile)
    return bot_main(bot_args)


def _arm_tracemalloc(path: str) -> None:
    """SIGUSR1 takes a snapshot, SIGUSR2 another and writes what grew in between, by allocating line."""
    import tracemalloc

    tracemalloc.start(12)
    before: list[Any] = []

    def first(signum: int, frame: Any) -> None:
        before[:] = [tracemalloc.take_snapshot()]

    def second(signum: int, frame: Any) -> None:
        from collections import Counter

        from bench.shares import layer

        after = tracemalloc.take_snapshot()
        stats = after.compare_to(before[0], "traceback")
        tracemalloc.stop()
        allocator: Counter[str] = Counter()
        caller: Counter[str] = Counter()
        for stat in stats:
            frames = list(stat.traceback)  # most recent call last
            allocator[layer(frames[-1].filename, "")] += stat.size_diff
            ours = [f for f in frames if "/bot/" in f.filename or "/mapping/" in f.filename]
            where = f"{layer(ours[-1].filename, '')}:{ours[-1].lineno}" if ours else "(no frame of ours)"
            caller[where] += stat.size_diff
        with open(path, "w") as out:
            out.write(f"total {sum(s.size_diff for s in stats) / 1024:.1f} KiB\n# by allocating layer\n")
            out.writelines(f"{v / 1024:10.1f} KiB  {k}\n" for k, v in allocator.most_common(25))
            out.write("# by the innermost frame of ours on the stack\n")
            out.writelines(f"{v / 1024:10.1f} KiB  {k}\n" for k, v in caller.most_common(25))

    signal.signal(signal.SIGUSR1, first)
    signal.signal(signal.SIGUSR2, second)


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

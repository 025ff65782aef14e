"""`python -m bench.shares PROFILE [N]`: where a cProfile of the bot spends its busy time. Reads a file, prints.

Own time (tottime) is summed per layer (a site-packages distribution, a file of ours, the stdlib, the import
system), idle waiting (`epoll.poll`) is left out, and each layer's share of the busy time is shown; then the
N functions of ours with the most cumulative time. cProfile counts each resumption of a coroutine as a call.
"""

from __future__ import annotations

import pstats
import sys
from collections import Counter

_IDLE = "<method 'poll' of 'select.epoll' objects>"


def layer(file: str, function: str) -> str:
    """A short name for where a profiled function lives."""
    if "site-packages/" in file:
        return file.split("site-packages/")[1].split("/")[0].removesuffix(".py")
    for ours in ("/bot/", "/mapping/", "/bench/", "/tests/"):
        if ours in file:
            return ours.strip("/") + "/" + file.split(ours, 1)[1]
    if "importlib" in file:
        return "import system (importlib)"
    if file == "~":
        return "builtin: " + function.removeprefix("<").split(" of ")[0][:40]
    return "stdlib: " + file.rsplit("/", 1)[-1]


def shares(path: str) -> tuple[float, list[tuple[str, float]]]:
    """(busy seconds, [(layer, seconds)] most first)."""
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    totals: Counter[str] = Counter()
    for (file, _, function), (_, _, tottime, _, _) in stats.items():
        if function == _IDLE:
            continue
        totals[layer(file, function)] += tottime
    return float(sum(totals.values())), [(name, float(t)) for name, t in totals.most_common()]


def ours(path: str, count: int) -> list[tuple[str, float]]:
    stats = pstats.Stats(path).stats  # type: ignore[attr-defined]
    rows = [
        (f"{layer(file, fn)}:{fn}", cumtime)
        for (file, _, fn), (_, _, _, cumtime, _) in stats.items()
        if "/bot/" in file or "/mapping/" in file
    ]
    return sorted(rows, key=lambda r: -r[1])[:count]


def main(argv: list[str]) -> int:
    path, count = argv[0], int(argv[1]) if len(argv) > 1 else 25
    busy, rows = shares(path)
    print(f"busy {busy:.3f} s (idle waiting excluded)")
    for name, seconds in rows[:count]:
        print(f"{100 * seconds / busy:6.1f}%  {seconds:8.3f} s  {name}")
    print("\nour functions by cumulative time (includes what they await and call):")
    for name, seconds in ours(path, count):
        print(f"{100 * seconds / busy:6.1f}%  {seconds:8.3f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

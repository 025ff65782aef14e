"""Request ids: `elc-<ts36>-<seq>`, unique within a process. Pure but for the clock it reads."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Final

_ALPHABET: Final = "0123456789abcdefghijklmnopqrstuvwxyz"
# next() on itertools.count is atomic under the GIL, so ids stay unique across threads and tasks
# even when many are made in the same millisecond: the sequence, not the clock, makes them unique.
_sequence = itertools.count(1)


def to_base36(n: int) -> str:
    """Render a non-negative integer in lowercase base 36."""
    if n < 0:
        raise ValueError("base 36 takes non-negative integers")
    digits = []
    while True:
        n, rem = divmod(n, 36)
        digits.append(_ALPHABET[rem])
        if n == 0:
            return "".join(reversed(digits))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_request_id(clock_ms: Callable[[], int] = _now_ms) -> str:
    """A fresh `elc-<ts36>-<seq>` id; `clock_ms` (milliseconds since the epoch) is injectable for tests."""
    return f"elc-{to_base36(clock_ms())}-{next(_sequence)}"

"""JSON from a request body, with its nesting bounded. Pure, no I/O.

`json.loads` recurses once per level of nesting: 200 KB of `[[[...` raises `RecursionError`, which is not a
`ValueError`, so a route that only expects the latter answers 500 and logs a traceback. And a document just
shallow enough to parse can still exhaust the stack of whatever walks it next (PTB's `de_json`, a JSON
Schema validator, `json.dumps` into the audit log). `loads` refuses both as malformed: nothing the bot accepts
(a Telegram update, a Mini App request) comes near `MAX_DEPTH`.
"""

from __future__ import annotations

import json
from typing import Any, Final

from bot.errors import ToolnexusError

__all__ = ["MAX_DEPTH", "TooDeep", "loads"]

MAX_DEPTH: Final = 64
"""Levels of arrays and objects; Telegram's updates nest about ten deep."""


class TooDeep(ToolnexusError, ValueError):
    """The document nests deeper than `MAX_DEPTH` (or than Python's parser can follow)."""


def loads(data: bytes | bytearray | str) -> Any:
    """The parsed document.

    Raises:
        TooDeep: nested deeper than `MAX_DEPTH`.
        ValueError: not JSON (or not UTF-8).
    """
    try:
        value = json.loads(data)
    except RecursionError:
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise TooDeep(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests deeper than `limit`; walks with a list, never by recursion."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False

r"""Server-supplied `pattern`s, compiled and matched by RE2 (google-re2): linear time in the text. Pure.

Python's `re` backtracks and has no timeout, so a hostile server's `(a+)+$` would stall the whole bot on a
40-character answer. RE2 never backtracks: every pattern it compiles matches in time linear in the text, so
`(a+)+$` is simply a pattern like any other, and each compiled program's memory is bounded (RE2 refuses one
too big). Why not `re` plus a screen of the pattern's shape: the screen needed CPython's private parser and
refused good patterns it could not prove safe. What RE2 cannot compile is refused with the reason: mostly
backreferences and lookaround, the features that need backtracking.

JSON Schema patterns are ECMA-262 and unanchored: `search` finds them anywhere in the text, as `re.search`
did. RE2's syntax is ECMA-262's for what forms use; where `re` and ECMA-262 differ RE2 mostly sides with
ECMA-262: `\d`, `\w` and `\b` are ASCII, and `$` matches only at the end (not before a final newline).
ECMA-262's `\uXXXX` is written `\x{XXXX}` in RE2; `_to_re2` translates it.
"""

from __future__ import annotations

import functools
from typing import Final, Protocol, cast

import re2

from mapping._phrases import clip

__all__ = ["MAX_PATTERN_LENGTH", "UnsafePattern", "check_pattern", "search"]

MAX_PATTERN_LENGTH: Final = 1000
"""Longer patterns are refused outright."""
_HEX: Final = frozenset("0123456789abcdefABCDEF")
_LACKING: Final = (
    ("(?=", "the pattern uses a lookahead, which is not supported"),
    ("(?!", "the pattern uses a lookahead, which is not supported"),
    ("(?<=", "the pattern uses a lookbehind, which is not supported"),
    ("(?<!", "the pattern uses a lookbehind, which is not supported"),
    ("escape sequence: \\k", "the pattern uses a backreference, which is not supported"),
    *(
        (f"escape sequence: \\{digit}", "the pattern uses a backreference, which is not supported")
        for digit in "123456789"
    ),
    ("too large", "the pattern is too large to compile"),
)
"""RE2's refusals that name a feature it lacks (`invalid perl operator: (?=`), and the reason in words."""


class UnsafePattern(Exception):
    """The pattern is refused; the message says why, for a person."""


class _Compiled(Protocol):
    """What we use of a compiled `re2` pattern (the package has no type hints)."""

    def search(self, text: str) -> object | None: ...


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is reported as UnsafePattern, not printed to stderr
    options.never_capture = True  # only "does it match" is asked: no groups to track
    return options


_OPTIONS: Final = _options()


def _to_re2(pattern: str) -> str:
    r"""ECMA-262's `\uXXXX` escapes as RE2's `\x{XXXX}`; everything else as written."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char != "\\" or i + 1 == len(pattern):
            out.append(char)
            i += 1
            continue
        digits = pattern[i + 2 : i + 6]
        if pattern[i + 1] == "u" and len(digits) == 4 and set(digits) <= _HEX:
            out.append(f"\\x{{{digits}}}")
            i += 6
        else:  # any other escape, `\\` included, stays whole so its second character is not read again
            out.append(pattern[i : i + 2])
            i += 2
    return "".join(out)


@functools.lru_cache(maxsize=128)
def _compile(pattern: str) -> _Compiled:
    """The compiled pattern, kept for the next answer (a refusal raises again, uncached)."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsafePattern(f"the pattern is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        return cast(_Compiled, re2.compile(_to_re2(pattern), _OPTIONS))
    except re2.error as exc:
        raise UnsafePattern(_refusal(exc)) from None
    except UnicodeEncodeError:  # a lone surrogate, which JSON can carry and UTF-8 cannot
        raise UnsafePattern("the pattern is not valid Unicode text") from None


def _refusal(exc: re2.error) -> str:
    """Why RE2 refused a pattern, for a person: the feature it lacks, or RE2's own words."""
    raw = exc.args[0] if exc.args else ""
    detail = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    for marker, reason in _LACKING:
        if marker in detail:
            return reason
    return f"the pattern is not a valid regular expression ({clip(detail)})"  # RE2 quotes the pattern


def check_pattern(pattern: str) -> None:
    """Refuse a pattern RE2 cannot compile (or too long).

    Raises:
        UnsafePattern: with a reason a person can read.
    """
    _compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Does `pattern` match anywhere in `text`? In time linear in `text`.

    Raises:
        UnsafePattern: the pattern is refused (`check_pattern` would have said so).
    """
    try:
        return _compile(pattern).search(text) is not None
    except UnicodeEncodeError:  # a lone surrogate in the text: no pattern can be checked against it
        return False

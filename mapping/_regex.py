r"""A static screen for `pattern` regexes that could backtrack catastrophically. Pure.

Python's `re` backtracks and has no timeout, so a hostile server's `(a+)+$` could stall the whole bot on a
30-character answer. Before a pattern is used we look at its parse tree and refuse two shapes:

- inside a repetition, a variable-length part whose characters could also be eaten by what follows it in
  the next round (or by itself again): `(a+)+`, `(\w+\s?)+`, `(a|a)*`, `(a?a)*`: exponential;
- outside, chains of variable parts that can trade the same characters: `\d*\d*\d*x`; a chain of three
  is allowed when the pattern is anchored with `^` (cubic at worst), of two otherwise (`re.search` adds a
  factor), which the input cap in `values` keeps cheap.

The screen is conservative: when unsure whether two parts can match the same character, it says they can.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from re import _constants as _c  # type: ignore[attr-defined]  # private, but the public sre_parse is deprecated
from re import _parser as _p  # type: ignore[attr-defined]
from typing import Any, Final

MAX_PATTERN_LENGTH: Final = 1000
"""Longer patterns are refused outright."""
_ENUMERABLE: Final = 1024
"""Character ranges up to this size are expanded into sets; bigger ones become predicates."""


class UnsafePattern(Exception):
    """The pattern is refused; the message says why, for a person."""


@dataclass(frozen=True, slots=True)
class _Chars:
    """The characters an element could consume (an over-approximation)."""

    everything: bool = False
    chars: frozenset[str] = frozenset()
    categories: frozenset[str] = frozenset()
    r"""`digit`, `word`, `space`: the classes `\d`, `\w`, `\s`."""
    tests: tuple[Callable[[str], bool], ...] = ()
    """Membership tests for ranges too big to list."""

    def __or__(self, other: _Chars) -> _Chars:
        return _Chars(
            self.everything or other.everything,
            self.chars | other.chars,
            self.categories | other.categories,
            self.tests + other.tests,
        )

    def empty(self) -> bool:
        return not (self.everything or self.chars or self.categories or self.tests)

    def overlaps(self, other: _Chars) -> bool:
        if self.empty() or other.empty():
            return False
        if self.everything or other.everything or self.chars & other.chars:
            return True
        if (self.tests and (other.tests or other.categories)) or (other.tests and self.categories):
            return True  # two predicates: cannot cheaply prove them disjoint
        if any(frozenset((a, b)) not in _DISJOINT for a in self.categories for b in other.categories):
            return True
        mine = self.tests + tuple(_CATEGORY_TESTS[name] for name in self.categories)
        theirs = other.tests + tuple(_CATEGORY_TESTS[name] for name in other.categories)
        return any(t(c) for t in theirs for c in self.chars) or any(t(c) for t in mine for c in other.chars)


_ALL: Final = _Chars(everything=True)
_NONE: Final = _Chars()


def _variants(c: str) -> frozenset[str]:
    # IGNORECASE may be set locally anywhere, so every literal stands for all its case forms
    forms = (c, c.lower(), c.upper(), c.casefold(), c.swapcase())
    return frozenset(ch for form in forms for ch in form)


def _in_range(low: int, high: int) -> Callable[[str], bool]:
    return lambda c: low <= ord(c) <= high


def _any_case(test: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda c: any(test(v) for v in _variants(c))


def check_pattern(pattern: str) -> None:
    """Refuse a pattern that does not compile or could backtrack catastrophically.

    Raises:
        UnsafePattern: with a reason a person can read.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise UnsafePattern(f"the pattern is longer than {MAX_PATTERN_LENGTH} characters")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        raise UnsafePattern(f"the pattern is not a valid regular expression ({exc})") from None
    parsed = _p.parse(pattern)
    screen = _Screen(parsed.state)
    items = screen.flatten(parsed)
    anchored = (
        bool(items)
        and items[0][0] is _c.AT
        and items[0][1] in (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING)
        and not parsed.state.flags & re.MULTILINE
    )
    # `re.search` retries an unanchored pattern at every position: one more factor of the input length
    screen.max_traded = 2 if anchored else 1
    try:
        screen.sequence(items, cyclic=False, in_loop=False)
    except RecursionError:
        raise UnsafePattern("the pattern is nested too deeply") from None


class _Screen:
    def __init__(self, state: Any) -> None:
        self.state = state
        self.max_traded = 1
        # keyed by id(): the parse tree outlives the screen, so ids stay unique meanwhile
        self._chars: dict[int, _Chars] = {}

    def width(self, item: Any) -> tuple[int, int]:
        low, high = _p.SubPattern(self.state, [item]).getwidth()
        return int(low), int(high)

    def variable(self, item: Any) -> bool:
        """Can this element match in more than one way, trading characters with its neighbours?"""
        if item[0] is _c.BRANCH:  # disjoint, non-empty, fixed-width alternatives: the next character decides
            widths = [self.width_of(alt) for alt in item[1][1]]
            empty_or_not = any(low == 0 for low, _ in widths) and any(high > 0 for _, high in widths)
            return self.alternatives_overlap(item) or empty_or_not or any(low != high for low, high in widths)
        low, high = self.width(item)
        return high > low

    def width_of(self, items: Any) -> tuple[int, int]:
        low, high = _p.SubPattern(self.state, list(items)).getwidth()
        return int(low), int(high)

    def alternatives_overlap(self, item: Any) -> bool:
        alts = [(self.union(alt), self.width_of(alt)[0] == 0) for alt in item[1][1]]
        return any(
            a.overlaps(b) or (a_empty and b_empty)
            for j, (a, a_empty) in enumerate(alts)
            for b, b_empty in alts[j + 1 :]
        )

    def chars(self, item: Any) -> _Chars:
        known = self._chars.get(id(item))
        if known is None:
            known = self._chars[id(item)] = self._compute_chars(item)
        return known

    def _compute_chars(self, item: Any) -> _Chars:
        op, av = item
        if op is _c.LITERAL:
            return _Chars(chars=_variants(chr(av)))
        if op in (_c.NOT_LITERAL, _c.ANY, _c.GROUPREF, _c.GROUPREF_EXISTS):
            return _ALL
        if op is _c.IN:
            return self.charset(av)
        if op is _c.BRANCH:
            return self.union(x for alt in av[1] for x in alt)
        if op is _c.SUBPATTERN:
            return self.union(av[-1])
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            return self.union(av[2])
        if op is _c.ATOMIC_GROUP:
            return self.union(av)
        return _NONE  # anchors and lookarounds consume nothing

    def union(self, items: Iterable[Any]) -> _Chars:
        result = _NONE
        for item in items:
            result = result | self.chars(item)
        return result

    def charset(self, items: Sequence[Any]) -> _Chars:
        result = _NONE
        for op, av in items:
            if op is _c.NEGATE:
                return _ALL
            if op is _c.LITERAL:
                result = result | _Chars(chars=_variants(chr(av)))
            elif op is _c.RANGE and av[1] - av[0] < _ENUMERABLE:
                chars = frozenset(ch for code in range(av[0], av[1] + 1) for ch in _variants(chr(code)))
                result = result | _Chars(chars=chars)
            elif op is _c.RANGE:
                result = result | _Chars(tests=(_any_case(_in_range(av[0], av[1])),))
            elif op is _c.CATEGORY and av in _CATEGORY_NAMES:
                result = result | _Chars(categories=frozenset((_CATEGORY_NAMES[av],)))
            else:  # negated categories and anything unforeseen: assume it matches everything
                return _ALL
        return result

    def flatten(self, items: Iterable[Any]) -> list[Any]:
        out: list[Any] = []
        for item in items:
            if item[0] is _c.SUBPATTERN:
                out.extend(self.flatten(item[1][-1]))
            else:
                out.append(item)
        return out

    def sequence(self, items: Sequence[Any], *, cyclic: bool, in_loop: bool) -> None:
        """Check one sequence: `cyclic` when it is a repetition's body (it follows itself), `in_loop` when it
        sits anywhere inside a repetition (then any ambiguity multiplies with every round)."""
        elems = self.flatten(items)
        for item in elems:
            self.inside(item, in_loop=in_loop)
        for i, item in enumerate(elems):
            if in_loop and item[0] is _c.BRANCH and self.alternatives_overlap(item):
                raise UnsafePattern("the pattern repeats alternatives that can match the same text")
            if not self.variable(item):
                continue
            mine = self.chars(item)
            traded = 0
            for step in range(1, len(elems) + (1 if cyclic else 0)):
                if not cyclic and i + step >= len(elems):
                    break
                other = elems[(i + step) % len(elems)]
                theirs = self.chars(other)
                if theirs.empty():
                    continue
                if mine.overlaps(theirs):
                    if in_loop:
                        raise UnsafePattern("the pattern nests repetitions that can match the same text")
                    if self.variable(other):
                        traded += 1
                        if traded > self.max_traded:
                            raise UnsafePattern("the pattern chains repetitions that can match the same text")
                elif self.width(other)[0] >= 1:
                    break  # a mandatory part this one cannot eat: the two cannot trade characters past it

    def inside(self, item: Any, *, in_loop: bool) -> None:
        op, av = item
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT, _c.POSSESSIVE_REPEAT):
            repeated = av[1] > 1
            self.sequence(list(av[2]), cyclic=repeated, in_loop=in_loop or repeated)
        elif op is _c.BRANCH:
            for alt in av[1]:
                self.sequence(list(alt), cyclic=False, in_loop=in_loop)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            self.sequence(list(av[1]), cyclic=False, in_loop=in_loop)
        elif op is _c.ATOMIC_GROUP:
            self.sequence(list(av), cyclic=False, in_loop=in_loop)
        elif op in (_c.GROUPREF, _c.GROUPREF_EXISTS):
            raise UnsafePattern("the pattern uses a backreference, which is not supported")


# what `re` itself tests for \d, \w, \s (the ASCII-flag forms are subsets, so these over-approximate)
_CATEGORY_TESTS: Final[dict[str, Callable[[str], bool]]] = {
    "digit": _any_case(str.isdecimal),
    "word": _any_case(lambda c: c.isalnum() or c == "_"),
    "space": _any_case(str.isspace),
}
_DISJOINT: Final = frozenset({frozenset(("digit", "space")), frozenset(("word", "space"))})
_CATEGORY_NAMES: Final[dict[Any, str]] = {
    _c.CATEGORY_DIGIT: "digit",
    _c.CATEGORY_WORD: "word",
    _c.CATEGORY_SPACE: "space",
}

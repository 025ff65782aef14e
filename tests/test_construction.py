"""Every part of bot/ is whole once built: nothing assigns an attribute of another object afterwards.

A part is given what it needs at construction (`bot.compose.process` builds the process's parts in order);
code that writes `other.attr = value` (or `other.a.b = value`, `other.attr += value`) wires it after the fact,
where a reader of `other`'s class cannot see it. Checked on the syntax tree of every module in bot/: the base of
an attribute target must be `self` or `cls`, or the attribute a public field of a record, a mutable dataclass
of bot/ (a card's state, a waiter's verdict, a connection's health): a record's fields are its interface, and
its owner keeps them up to date. What remains is named in `ALLOWED`, with why it is still there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[1]

OWN: Final = frozenset({"self", "cls"})
"""The names whose attributes a method may write: its own object's (or class's)."""

ALLOWED: Final[Mapping[tuple[str, str], str]] = {
    ("bot/logs.py", "record.msg"): "logging's own record: a filter rewrites it, as the logging docs do",
    ("bot/logs.py", "record.args"): "logging's own record: a filter rewrites it, as the logging docs do",
    ("bot/logs.py", "record.exc_text"): "logging's own record: a filter rewrites it, as the logging docs do",
    ("bot/logs.py", "record.exc_info"): "logging's own record: a filter rewrites it, as the logging docs do",
    (
        "bot/logs.py",
        "record.stack_info",
    ): "logging's own record: a filter rewrites it, as the logging docs do",
    ("bot/servers/oauth/sdk.py", "provider.context.token_expiry_time"): (
        "the SDK has no public way to say 'refresh now' (the function's docstring)"
    ),
}
"""Named exceptions: (module path, assigned target) and why it is still here."""


def record_fields() -> frozenset[str]:
    """The public fields of every mutable dataclass of bot/ (its records)."""
    fields: set[str] = set()
    for path in (ROOT / "bot").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(_mutable_dataclass(d) for d in node.decorator_list):
                fields.update(
                    item.target.id
                    for item in node.body
                    if isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and not item.target.id.startswith("_")
                )
    return frozenset(fields)


def _mutable_dataclass(decorator: ast.expr) -> bool:
    call = decorator if isinstance(decorator, ast.Call) else None
    name = _dotted(call.func if call is not None else decorator)
    if name not in ("dataclass", "dataclasses.dataclass"):
        return False
    frozen = [k.value for k in (call.keywords if call is not None else []) if k.arg == "frozen"]
    return not any(isinstance(v, ast.Constant) and v.value is True for v in frozen)


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` as text, when it is a chain of names; else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _base(node: ast.Attribute) -> ast.expr:
    """The innermost object of an attribute chain (`x` of `x.a.b`, `f()` of `f().a`)."""
    value = node.value
    while isinstance(value, ast.Attribute | ast.Subscript):
        value = value.value
    return value


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _unpacked(target)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        yield from _unpacked(node.target)


def _unpacked(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _unpacked(element)
    elif isinstance(target, ast.Starred):
        yield from _unpacked(target.value)
    else:
        yield target


def foreign_assignments(source: str, records: frozenset[str] = frozenset()) -> list[tuple[int, str]]:
    """(line, target) of every assignment to an attribute of an object other than `self` or `cls`, but to a
    field named in `records`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for target in _targets(node):
            if not isinstance(target, ast.Attribute):
                continue
            base = _base(target)
            if (isinstance(base, ast.Name) and base.id in OWN) or target.attr in records:
                continue
            found.append((target.lineno, _dotted(target) or ast.unparse(target)))
    return found


def assignments_in_bot() -> dict[tuple[str, str], list[int]]:
    """Every foreign attribute assignment in bot/, by (module path, target), with its lines."""
    records = record_fields()
    found: dict[tuple[str, str], list[int]] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for line, target in foreign_assignments(path.read_text(encoding="utf-8"), records):
            found.setdefault((where, target), []).append(line)
    return found


def test_no_module_of_bot_assigns_an_attribute_of_another_object() -> None:
    found = assignments_in_bot()
    unexplained = {key: lines for key, lines in found.items() if key not in ALLOWED}
    assert not unexplained, "\n".join(
        f"{path}:{','.join(map(str, lines))}: {target} = ... (pass it to the constructor instead)"
        for (path, target), lines in sorted(unexplained.items())
    )


def test_every_allowed_assignment_is_still_there() -> None:
    """An exception that is gone leaves the list too, so the list stays the truth."""
    stale = sorted(set(ALLOWED) - set(assignments_in_bot()))
    assert not stale, f"no longer assigned, drop from ALLOWED: {stale}"


def test_the_check_sees_an_assignment_through_a_name_a_chain_and_an_augmented_one_but_a_records_field() -> (
    None
):
    source = """
class A:
    def __init__(self, b):
        self.x = 1
        self.y.z = 2
        cls.count = 0
        b.link = self.x
        b.inner.fence = 3
        b.total += 1
        b[0].kind = 4
        first, b.second = 1, 2
        b.state = 5
"""
    assert [target for _, target in foreign_assignments(source, frozenset({"state"}))] == [
        "b.link",
        "b.inner.fence",
        "b.total",
        "b[0].kind",
        "b.second",
    ]


def test_a_frozen_dataclass_has_no_record_fields_and_a_mutable_one_has_its_public_ones() -> None:
    source = """
@dataclass(frozen=True)
class Parts:
    hub: object

@dataclasses.dataclass
class Card:
    state: int
    _lock: object
"""
    tree = ast.parse(source)
    kinds = [_mutable_dataclass(c.decorator_list[0]) for c in tree.body if isinstance(c, ast.ClassDef)]
    assert kinds == [False, True]
    assert "state" in record_fields() and "form_link" not in record_fields()

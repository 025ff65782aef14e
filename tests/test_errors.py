"""The exception tree: every exception class defined in bot/ descends from `bot.errors.ToolnexusError`, and the
tree drawn in bot/errors.py's docstring is the real one (each class named once, under its real base)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Final

import bot.errors
from bot.errors import ToolnexusError

ROOT = Path(__file__).resolve().parents[1]

STANDALONE: Final = {
    "bot.receipts.BadReceipt": "MCP servers copy bot/receipts.py: it imports nothing of ours"
}
"""Exception classes of bot/ outside the tree, and why (the root's docstring names them too)."""

SKIPPED: Final = ("bot.__main__", "bot.store.migrations")
"""Modules not imported: running them is their effect (the command line; Alembic's environment)."""


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined at the top of a module of bot/, by `module.Name`."""
    found: dict[str, type[BaseException]] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if any(name == skipped or name.startswith(skipped + ".") for skipped in SKIPPED):
            continue
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attribute}"] = value
    return found


def drawing() -> dict[str, str | None]:
    """Class name -> the name drawn as its parent in the root's docstring (None for the root)."""
    doc = bot.errors.__doc__ or ""
    start = doc.index("\nToolnexusError") + 1
    tree = doc[start:].split("\n\n")[0].splitlines()
    parents: dict[str, str | None] = {}
    stack: list[tuple[int, str]] = []
    for line in tree:
        match = re.search(r"[A-Za-z_]\w*", line)
        assert match is not None, f"a line of the tree names no class: {line!r}"
        column, name = match.start(), match.group()
        while stack and stack[-1][0] >= column:
            stack.pop()
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = stack[-1][1] if stack else None
        stack.append((column, name))
    return parents


def test_the_walk_finds_the_exceptions_of_every_layer() -> None:
    """The walk reaches the store, the servers, the hosts and the config (a wrong path would make the tree
    test vacuous)."""
    found = exception_classes()
    for name in (
        "bot.errors.StoreUnavailable",
        "bot.store.errors.Fenced",
        "bot.servers.pool.Unavailable",
        "bot.telegram.fold.IllegalFold",
        "bot.web.bounded_json.TooDeep",
        "bot.receipts.BadReceipt",
    ):
        assert name in found
    assert any(
        issubclass(cls, ToolnexusError) and name.startswith("bot.config.") for name, cls in found.items()
    )


def test_every_exception_class_of_the_bot_descends_from_the_root() -> None:
    """A new exception class joins the tree (or is named in STANDALONE, with the reason)."""
    outside = [
        name
        for name, cls in exception_classes().items()
        if not issubclass(cls, ToolnexusError) and name not in STANDALONE
    ]
    assert not outside, "not under ToolnexusError: " + ", ".join(outside)


def test_the_drawn_tree_names_every_class_under_its_real_base() -> None:
    """The docstring of bot/errors.py draws each class of the tree once, as a child of one of its bases."""
    classes = {cls.__name__: cls for name, cls in exception_classes().items() if name not in STANDALONE}
    assert len(classes) == len(exception_classes()) - len(STANDALONE), "two exception classes share a name"
    parents = drawing()
    assert set(parents) == set(classes), (
        f"drawn but not defined: {sorted(set(parents) - set(classes))}; "
        f"defined but not drawn: {sorted(set(classes) - set(parents))}"
    )
    for name, parent in parents.items():
        bases = [base.__name__ for base in classes[name].__bases__]
        if parent is None:
            assert classes[name] is ToolnexusError
        else:
            assert parent in bases, f"{name} is drawn under {parent}, but its bases are {bases}"


def test_the_classes_outside_the_tree_are_named_in_its_docstring() -> None:
    """The root's docstring says which families stand apart: mapping's, and each of STANDALONE."""
    doc = bot.errors.__doc__ or ""
    assert "MappingError" in doc
    for name in STANDALONE:
        assert name in doc

"""The layers of the code, checked over the real import graph of every module in bot/ and mapping/.

    mapping, errors  <-  core, config, logs, files  <-  servers, store, approvals  <-  telegram, console, web  <-  cli

A module may import from its own unit and from any unit on a lower level; never from a unit above it, and
never from another unit on its own level (servers and store, or telegram, console and web, do not know each
other). Where a lower layer needs something of a higher one, it owns a Protocol that the composition root
(`bot.compose`, in the top unit) fills. Every import counts: at module level, inside a function, or under
`TYPE_CHECKING`. The module graph has no cycle either.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS: Final[tuple[Mapping[str, frozenset[str]], ...]] = (
    {
        "mapping": frozenset({"mapping"}),
        "bot": frozenset({"bot"}),  # the package itself: importing any `bot.x` runs it, so it imports nothing
        "receipts": frozenset({"bot.receipts"}),  # copied by MCP servers: imports nothing of ours
        "errors": frozenset({"bot.errors"}),  # the exception tree's root: every layer may raise its classes
    },
    {
        "core": frozenset({"bot.core"}),
        "config": frozenset({"bot.config"}),
        "logs": frozenset({"bot.logs"}),
        "files": frozenset({"bot.files"}),
    },
    {
        "servers": frozenset({"bot.servers"}),
        "store": frozenset({"bot.store"}),
        "approvals": frozenset({"bot.approvals"}),
    },
    {
        "telegram": frozenset({"bot.telegram"}),
        "console": frozenset({"bot.console"}),
        "web": frozenset({"bot.web"}),
    },
    {
        "cli": frozenset({"bot.cli", "bot.__main__", "bot.compose", "bot.failures", "bot.demo_server"}),
    },
)
"""Units by level, lowest first; a unit is its modules and packages (with everything under them). `config`
(TOML -> frozen Config), `logs` (redacting set-up) and `files` (private folders) import nothing of bot/, and
every layer above may read them; `failures` (start-up errors as one line) knows the store, so it sits with the
command line; the demo server imports only `files` of ours and is an entry point."""

ALLOWED: Final[Mapping[tuple[str, str], str]] = {}
"""Named exceptions to the rule: (importing module, imported module) and why it is still here."""

LIBRARY_HOMES: Final[Mapping[str, frozenset[str]]] = {
    "sqlalchemy": frozenset({"store"}),
    "alembic": frozenset({"store"}),
}
"""Libraries only one unit may import: the store raises its own errors (`StoreUnavailable`), so no layer above
it handles the ORM's."""


def unit_of(module: str) -> tuple[int, str]:
    """The (level, unit) a dotted module name belongs to."""
    for level, units in enumerate(LAYERS):
        for unit, roots in units.items():
            if any(module == root or (root != "bot" and module.startswith(root + ".")) for root in roots):
                return level, unit
    raise LookupError(f"{module} is in no layer: add it to LAYERS")


def modules() -> dict[str, Path]:
    """Every module of bot/ and mapping/, by dotted name."""
    found: dict[str, Path] = {}
    for package in ("bot", "mapping"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(module: str, source: str, known: Mapping[str, object]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for every import of bot/ or mapping/ in `source`, relative ones resolved;
    `from package import name` counts as an import of `package.name` when that is a module."""
    is_package = module in known and str(known[module]).endswith("__init__.py")
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names]
            submodules = [name for name in names if name in known]
            targets = submodules if submodules and len(submodules) == len(names) else [target, *submodules]
        else:
            continue
        for target in targets:
            if target.split(".")[0] in ("bot", "mapping"):
                yield target, node.lineno


def libraries(source: str) -> set[str]:
    """The top-level names of the absolute imports in `source`."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    known = modules()
    return {
        name: {target for target, _ in imports(name, path.read_text(encoding="utf-8"), known)} - {name}
        for name, path in known.items()
    }


def violations(edges: Mapping[str, set[str]]) -> list[str]:
    """Each import that points up a level or across to another unit of the same level, as one line."""
    found: list[str] = []
    for source, targets in sorted(edges.items()):
        level, unit = unit_of(source)
        for target in sorted(targets):
            target_level, target_unit = unit_of(target)
            if target_unit == unit or target_level < level or (source, target) in ALLOWED:
                continue
            where = "up" if target_level > level else "across"
            found.append(f"{source} ({unit}) imports {target} ({target_unit}): {where} a layer")
    return found


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_the_walk_sees_every_layer() -> None:
    """The graph holds modules of every unit and the imports between them (a wrong path would make the
    layer test vacuous)."""
    edges = graph()
    units = {unit_of(name)[1] for name in edges}
    assert units == {unit for layer in LAYERS for unit in layer}
    assert "bot.core" in edges["bot.servers.hub"]
    assert "bot.store" in edges["bot.compose.process"]
    assert "bot.core.approvals" in edges["bot.store.approvals"]


def test_every_module_is_in_a_layer() -> None:
    """A new top-level module or package gets a place in LAYERS before it can be imported."""
    for name in modules():
        unit_of(name)


def test_no_module_imports_from_a_layer_above_or_beside_it() -> None:
    """Imports point only down the layers (the named exceptions aside)."""
    found = violations(graph())
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_only_the_store_imports_the_orm() -> None:
    """SQLAlchemy and Alembic stay inside bot/store/."""
    found = [
        f"{name} imports {library}"
        for name, path in modules().items()
        for library, homes in LIBRARY_HOMES.items()
        if unit_of(name)[1] not in homes and library in libraries(path.read_text(encoding="utf-8"))
    ]
    assert not found, "\n".join(found)


def test_the_named_exceptions_still_exist() -> None:
    """An exception that is no longer needed is taken out of ALLOWED (so it cannot hide a new import)."""
    edges = graph()
    assert [edge for edge in ALLOWED if edge[1] not in edges.get(edge[0], set())] == []


def test_the_module_graph_has_no_cycle() -> None:
    """No module imports, directly or through others, one that imports it."""
    found = cycles(graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


KNOWN = {name: Path(name.replace(".", "/") + ".py") for name in ("bot.web.app", "bot.telegram.surface")} | {
    "bot.web": Path("bot/web/__init__.py"),
    "bot.store": Path("bot/store/__init__.py"),
    "bot.store.tokens": Path("bot/store/tokens.py"),
}


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("bot.web.app", "from bot.telegram.surface import TelegramSurface", ["bot.telegram.surface"]),
        ("bot.web.app", "import bot.telegram.surface as s", ["bot.telegram.surface"]),
        ("bot.web.app", "def f():\n    from bot.telegram import surface\n", ["bot.telegram.surface"]),
        ("bot.web.app", "if TYPE_CHECKING:\n    from bot.telegram import Tap\n", ["bot.telegram"]),
        ("bot.web.app", "from ..telegram.surface import TelegramSurface", ["bot.telegram.surface"]),
        ("bot.web", "from .app import build_app", ["bot.web.app"]),
        ("bot.web.app", "from . import app", ["bot.web.app"]),
        ("bot.web.app", "import json\nfrom telegram import Bot\n", []),
    ],
)
def test_the_walk_resolves_every_form_of_import(module: str, source: str, expected: list[str]) -> None:
    """Absolute, relative, aliased, nested and type-only imports are all seen, and resolved to a module."""
    assert [target for target, _ in imports(module, source, KNOWN)] == expected


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"bot.web.metrics": {"bot.telegram.api_watch"}}, "across"),
        ({"bot.core.events": {"bot.servers.hub"}}, "up"),
        ({"bot.store.tokens": {"bot.servers.oauth"}}, "across"),
        ({"bot.config": {"bot.core"}}, "across"),
        ({"mapping.form": {"bot.core"}}, "up"),
        ({"bot.telegram.app": {"bot.cli"}}, "up"),
    ],
)
def test_the_rule_refuses_upward_and_sideways_imports(edges: dict[str, set[str]], expected: str) -> None:
    """An import up a level, or to a sibling unit of the same level, is a violation."""
    (line,) = violations(edges)
    assert f"{expected} a layer" in line


def test_the_rule_allows_downward_and_inner_imports() -> None:
    """Imports within a unit, down any number of levels, and the named exceptions pass."""
    edges = {
        "bot.cli": {"bot.telegram.app", "bot.config", "mapping"},
        "bot.telegram.app": {"bot.telegram.surface", "bot.servers.hub", "bot.store", "bot.core", "bot.logs"},
    }
    assert violations(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """A loop through three modules is one cycle; a chain is none."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}}) == []

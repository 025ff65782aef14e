"""`python -m bench` after the install bench/README.md names: every module the benchmarks import (and the fakes
they share with the tests) comes with the package and its `bench` extra, not only with the test extra."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OURS = ("bench", "bot", "mapping", "tests")


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _installed_with(requirements: list[str]) -> set[str]:
    """The distributions `requirements` install, with what they require in turn (extras' own deps left out)."""
    found: set[str] = set()
    todo = [r for r in requirements if "extra ==" not in r and "sys_platform == 'win32'" not in r]
    while todo:
        name = _name(todo.pop())
        if name in found:
            continue
        found.add(name)
        try:
            todo += [r for r in requires(name) or [] if "extra ==" not in r]
        except PackageNotFoundError:  # a marker for another platform
            continue
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _third_party_imports_of_the_benchmarks() -> set[str]:
    """Top-level modules outside the repository imported by bench/ and, transitively, by the repository modules
    it imports (the fake Bot API, the ports, the fleet's proxy)."""
    seen: set[Path] = set()
    todo = sorted((REPO / "bench").glob("*.py"))
    outside: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for module in _imports(path):
            top = module.split(".")[0]
            if top in OURS:
                parts = module.split(".")
                for i in range(1, len(parts) + 1):
                    found = _module_file(".".join(parts[:i]))
                    if found is not None:
                        todo.append(found)
            elif top not in sys.stdlib_module_names:
                outside.add(top)
    return outside


def test_the_bench_extra_brings_every_module_the_benchmarks_import() -> None:
    """`pip install -e '.[bench]'` is enough for `python -m bench`: no module of the test extra alone."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    bench_extra = project["optional-dependencies"].get("bench", [])
    installed = _installed_with([*project["dependencies"], *bench_extra])
    providers = packages_distributions()
    missing = {
        module: providers.get(module, ["?"])
        for module in _third_party_imports_of_the_benchmarks()
        if not {_name(d) for d in providers.get(module, [])} & installed
    }
    assert not missing, missing
    assert "pip install -q -e '.[bench]'" in (REPO / "bench" / "README.md").read_text()

"""mapping/ stays pure: no module in it imports the bot, Telegram, MCP, async runtimes, the OS or logging."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MAPPING = Path(__file__).resolve().parents[2] / "mapping"
FORBIDDEN = frozenset(
    {"bot", "telegram", "mcp", "mcp_types", "asyncio", "anyio", "httpx", "httpx2", "os", "logging", "socket"}
)


def forbidden_imports(source: str) -> list[str]:
    """Top-level package names of forbidden absolute imports (and `__import__` calls) in `source`."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if alias.name.split(".")[0] in FORBIDDEN)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in FORBIDDEN:
                found.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            found.append("__import__")
    return found


def test_the_mapping_package_has_modules_to_check() -> None:
    """The walk below sees the package (a wrong path would make the purity test vacuous)."""
    names = {p.name for p in MAPPING.glob("*.py")}
    assert {"__init__.py", "elicitation.py", "schema.py", "values.py", "form.py"} <= names


@pytest.mark.parametrize("path", sorted(MAPPING.glob("*.py")), ids=lambda p: p.name)
def test_no_mapping_module_imports_io_or_hosts(path: Path) -> None:
    """Each mapping module imports none of the forbidden packages."""
    assert forbidden_imports(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "import os",
        "import os.path",
        "from telegram import Bot",
        "from mcp.client import Client",
        "import asyncio as aio",
        "from logging import getLogger",
        "__import__('socket')",
        "def f():\n    import anyio\n",
    ],
)
def test_the_checker_catches_forbidden_imports(source: str) -> None:
    """The checker itself flags every form of forbidden import, even inside a function."""
    assert forbidden_imports(source) != []


def test_the_checker_allows_stdlib_jsonschema_and_relative_imports() -> None:
    """Allowed imports are not flagged (`osmosis` is not `os`)."""
    source = "import re\nimport osmosis\nfrom jsonschema import Draft202012Validator\nfrom . import errors\n"
    assert forbidden_imports(source) == []

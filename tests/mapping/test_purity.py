"""mapping/ stays pure: no module in it imports the bot, Telegram, MCP, async runtimes, the OS or logging, and
beyond the standard library only the three pure libraries it is allowed (jsonschema, ada_url, re2)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

MAPPING = Path(__file__).resolve().parents[2] / "mapping"
FORBIDDEN = frozenset(
    {"bot", "telegram", "mcp", "mcp_types", "asyncio", "anyio", "httpx", "httpx2", "os", "logging", "socket"}
)
ALLOWED_THIRD_PARTY = frozenset({"jsonschema", "ada_url", "re2", "mapping"})
"""Pure libraries (JSON Schema validation; WHATWG URL parsing; RE2 regex matching: none does I/O), and the
package itself."""


def _refused(module: str) -> bool:
    top = module.split(".")[0]
    return top in FORBIDDEN or (top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY)


def forbidden_imports(source: str) -> list[str]:
    """Forbidden absolute imports (and `__import__` calls) in `source`: the I/O and host packages, and any
    package that is neither in the standard library nor allowed."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if _refused(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _refused(node.module):
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
        "import osmosis",
        "import requests",
        "from ada_url_extra import x",
        "import urllib3",
        "import re2x",
        "from re2_extra import x",
    ],
)
def test_the_checker_catches_forbidden_imports(source: str) -> None:
    """The checker itself flags every form of forbidden import, even inside a function."""
    assert forbidden_imports(source) != []


def test_the_checker_allows_stdlib_jsonschema_ada_url_re2_and_relative_imports() -> None:
    """Allowed imports are not flagged: the standard library, jsonschema, ada_url, re2, the package itself."""
    source = (
        "import re\nimport urllib.parse\nfrom jsonschema import Draft202012Validator\nimport ada_url\nimport re2\n"
        "from ada_url import parse_url\nfrom mapping.errors import MappingError\nfrom . import errors\n"
    )
    assert forbidden_imports(source) == []

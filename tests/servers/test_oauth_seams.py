"""The OAuth sign-in meets the SDK through its public API and the store through a protocol: no module of
`bot.servers.oauth` imports `bot.store` (a sibling layer) or a name the SDK does not export, and the provider's
state is set in one place only (`sdk.refresh_first`, which says why)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SERVERS = Path(__file__).resolve().parents[2] / "bot" / "servers"
MCP_PUBLIC_MODULES = frozenset({"mcp.client.auth", "mcp.client.auth.utils", "mcp.shared.auth"})
"""What the sign-in may import of the SDK: the auth package's exports, its discovery helpers, the auth models."""
ALLOWED_WRITES = frozenset({("sdk.py", "refresh_first")})


def oauth_sources() -> list[Path]:
    return sorted(SERVERS.glob("oauth*.py")) + sorted(SERVERS.glob("oauth/*.py"))


def imported(source: str) -> list[str]:
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names if alias.name.startswith("_"))
    return found


def context_writes(source: str) -> list[str]:
    """The functions that assign to an attribute of a `.context` (the SDK provider's state)."""
    found: list[str] = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for target in targets:
                value = getattr(target, "value", None)
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(value, ast.Attribute)
                    and value.attr == "context"
                ):
                    found.append(func.name)
    return found


def test_there_are_oauth_modules_to_check() -> None:
    assert len(oauth_sources()) >= 2


@pytest.mark.parametrize("path", oauth_sources(), ids=lambda p: p.name)
def test_no_oauth_module_imports_the_store_or_sdk_internals(path: Path) -> None:
    names = imported(path.read_text())
    assert [n for n in names if n == "bot.store" or n.startswith("bot.store.")] == []
    sdk = [n for n in names if n.split(".")[0] == "mcp"]
    assert [n for n in sdk if n not in MCP_PUBLIC_MODULES] == []


@pytest.mark.parametrize("path", oauth_sources(), ids=lambda p: p.name)
def test_the_providers_state_is_set_only_where_it_says_why(path: Path) -> None:
    writes = {(path.name, name) for name in context_writes(path.read_text())}
    assert writes <= ALLOWED_WRITES


def test_the_checks_catch_what_they_look_for() -> None:
    source = (
        "from bot.store.tokens import SignInStore\n"
        "from mcp.client.auth.oauth2 import OAuthContext\n"
        "from mcp.client.auth import _hidden\n"
        "def f(p):\n    p.context.token_expiry_time = 1.0\n"
    )
    names = imported(source)
    assert {"bot.store.tokens", "mcp.client.auth.oauth2", "mcp.client.auth._hidden"} <= set(names)
    assert context_writes(source) == ["f"]

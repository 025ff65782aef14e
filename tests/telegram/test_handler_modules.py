"""The handler modules' shape, read from their source: module-level callbacks reading `context.deps`, no
factories of closures (PTB's way: its examples register module-level callbacks)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import bot.telegram.handlers

HANDLERS: Final = Path(bot.telegram.handlers.__file__).parent
WRAPPERS: Final = frozenset({"access.py: allowed_only.checked"})
"""The one nested function kept: the decorator's wrapper around a callback."""

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _modules() -> list[tuple[str, ast.Module]]:
    return [(path.name, ast.parse(path.read_text())) for path in sorted(HANDLERS.glob("*.py"))]


def test_no_handler_module_defines_its_callbacks_inside_another_function() -> None:
    """No function of `bot.telegram.handlers` defines another (the closures of a `handlers(deps)` factory),
    but the access check's wrapper."""
    nested = {
        f"{name}: {outer.name}.{inner.name}"
        for name, module in _modules()
        for outer in ast.walk(module)
        if isinstance(outer, Function)
        for inner in ast.walk(outer)
        if inner is not outer and isinstance(inner, Function)
    }
    assert nested == WRAPPERS


def test_every_callback_is_module_level_with_a_one_line_docstring() -> None:
    """Each `async def verb(update, context)` of the handler modules says what it does in one line."""
    callbacks = {
        f"{name}: {node.name}": ast.get_docstring(node) or ""
        for name, module in _modules()
        for node in module.body
        if isinstance(node, ast.AsyncFunctionDef) and [a.arg for a in node.args.args] == ["update", "context"]
    }
    assert len(callbacks) >= 15  # /help, /servers, /tools, /call, /cancel, /agents, /audit, /2fa, taps, ...
    assert {callback for callback, doc in callbacks.items() if not doc or "\n" in doc} == set()


def test_only_the_deps_module_reads_bot_data() -> None:
    """The callbacks reach their dependencies through the one typed accessor (`context.deps`), never by a key."""
    readers = {
        name
        for name, module in _modules()
        if any(isinstance(node, ast.Attribute) and node.attr == "bot_data" for node in ast.walk(module))
    }
    assert readers == {"deps.py"}

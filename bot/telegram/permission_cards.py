"""An agent's permission prompt as its card shows it: (permission, agent) -> HTML lines. Builds values, awaits
nothing.

What the agent wants to do, readably: a shell command as code, a file edit as a diff (a new file's content as
added lines), a patch as it is, an MCP tool with its arguments, anything else as its tool's name and input; then
the working directory and the session. Every string the agent sent is escaped; long parts are folded (an
expandable quote holds all of it, one tap away) and the card stays inside Telegram's message size.
"""

from __future__ import annotations

import difflib
import html
import json
from collections.abc import Mapping
from typing import Any, Final

from bot.core import clip
from bot.core.permission import Client, Permission

__all__ = ["permission_lines"]

CODE_CHARS: Final = 2500
"""Characters of a command, a diff or arguments shown on the card (Telegram's 4096 minus the rest)."""
FOLD_LINES: Final = 15
"""A block of more lines than this is folded into an expandable quote."""
_CLIENTS: Final = {
    Client.CLAUDE_CODE: "Claude Code",
    Client.CODEX: "Codex",
    Client.PROMPT_TOOL: "Claude Code",
}
_MCP_PREFIX: Final = "mcp__"


def _esc(text: str, limit: int | None = None) -> str:
    return html.escape(clip(text, limit) if limit else text, quote=False)


def _block(text: str, language: str) -> str:
    """Code (or a diff) as a block: folded when it is long; cut past `CODE_CHARS`, saying so."""
    cut = len(text) > CODE_CHARS
    shown = _esc(text[:CODE_CHARS]) + ("\n…" if cut else "")
    more = f"\n<i>(cut: {len(text):,} characters in all)</i>" if cut else ""
    if text.count("\n") + 1 > FOLD_LINES:
        return f"<blockquote expandable>{shown}</blockquote>{more}"
    return f'<pre><code class="language-{language}">{shown}</code></pre>{more}'


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}", lineterm="")
    return "\n".join(lines)


def _what(tool: str, tool_input: Mapping[str, Any]) -> list[str]:
    """What the tool would do, by the tools both agents name."""
    path = _text(tool_input.get("file_path", tool_input.get("path", "")))
    if tool == "Bash" and isinstance(tool_input.get("command"), str):
        lines = ["Run a command:", _block(tool_input["command"], "bash")]
        description = tool_input.get("description")
        if isinstance(description, str) and description.strip():
            lines.append(f"<i>{_esc(description, 300)}</i>")
        return lines
    if tool in ("Edit", "MultiEdit") and path:
        edits = tool_input.get("edits")
        pairs = edits if isinstance(edits, list) else [tool_input]
        diff = "\n".join(
            _diff(path, _text(edit.get("old_string", "")), _text(edit.get("new_string", "")))
            for edit in pairs
            if isinstance(edit, Mapping)
        )
        every = " (every occurrence)" if tool_input.get("replace_all") is True else ""
        return [f"Edit <code>{_esc(path, 300)}</code>{every}:", _block(diff, "diff")]
    if tool == "Write" and path:
        return [
            f"Write <code>{_esc(path, 300)}</code>:",
            _block(_diff(path, "", _text(tool_input.get("content", ""))), "diff"),
        ]
    if tool == "apply_patch":
        patch = tool_input.get("command", tool_input.get("patch", tool_input))
        return ["Apply a patch:", _block(_text(patch), "diff")]
    if tool.startswith(_MCP_PREFIX) and tool.count("__") >= 2:
        server, _, name = tool[len(_MCP_PREFIX) :].partition("__")
        arguments = json.dumps(dict(tool_input), ensure_ascii=False, sort_keys=True, indent=2)
        return [
            f"Call <b>{_esc(name, 64)}</b> on the MCP server <b>{_esc(server, 64)}</b> with:",
            _block(arguments, "json"),
        ]
    arguments = json.dumps(dict(tool_input), ensure_ascii=False, sort_keys=True, indent=2)
    return [f"Use <b>{_esc(tool, 64)}</b> with:", _block(arguments, "json")]


def permission_lines(permission: Permission, agent: str | None) -> list[str]:
    """The card's text above its buttons (HTML): who asks, what for, where."""
    client = _CLIENTS[permission.client]
    who = f"<b>{_esc(agent, 64)}</b> ({client})" if agent else client
    lines = [f"🛡 Your agent {who} asks to:", *_what(permission.tool, permission.input)]
    where = []
    if permission.cwd:
        where.append(f"in <code>{_esc(permission.cwd, 300)}</code>")
    if permission.session:
        where.append(f"session <code>{_esc(permission.session, 80)}</code>")
    if where:
        lines.append("📁 " + " · ".join(where))
    return lines

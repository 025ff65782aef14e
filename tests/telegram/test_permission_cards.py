"""An agent's permission prompt as its card reads: each kind of tool shown as what it does, every agent string
escaped, long parts folded or cut with a note. Pure."""

from __future__ import annotations

import pytest

from bot.core.permission import Client, Permission
from bot.telegram.permission_cards import CODE_CHARS, permission_lines
from bot.telegram.render import fit, visible_len


def card(tool: str, tool_input: dict[str, object], **where: str) -> str:
    return "\n".join(permission_lines(Permission(Client.CLAUDE_CODE, tool, tool_input, **where), "laptop"))


@pytest.mark.parametrize(
    ("tool", "tool_input", "shown"),
    [
        (
            "Bash",
            {"command": "ls <dir> && rm x"},
            '<pre><code class="language-bash">ls &lt;dir&gt; &amp;&amp; rm x</code></pre>',
        ),
        ("Write", {"file_path": "/a/new.py", "content": "x = 1\n"}, "+x = 1"),
        ("MultiEdit", {"file_path": "/a/b.py", "edits": [{"old_string": "a", "new_string": "b"}]}, "-a\n+b"),
        ("apply_patch", {"command": "*** Begin Patch\n+line"}, "*** Begin Patch\n+line"),
        ("mcp__github__create_issue", {"title": "<b>"}, "on the MCP server <b>github</b>"),
        ("WebFetch", {"url": "https://example.com"}, "Use <b>WebFetch</b> with:"),
    ],
)
def test_each_kind_of_tool_is_shown_as_what_it_does(
    tool: str, tool_input: dict[str, object], shown: str
) -> None:
    assert shown in card(tool, tool_input)


def test_the_agent_the_directory_and_the_session_are_named_and_escaped() -> None:
    text = card("Bash", {"command": "true"}, cwd="/home/<me>", session="s-1")
    assert "<b>laptop</b> (Claude Code)" in text
    assert "in <code>/home/&lt;me&gt;</code> · session <code>s-1</code>" in text


def test_a_long_command_is_folded_and_cut_past_the_cards_room_saying_so() -> None:
    command = "\n".join(f"echo {n}" for n in range(2000))
    text = card("Bash", {"command": command})
    assert "<blockquote expandable>" in text and f"{len(command):,} characters in all" in text
    assert visible_len(fit(text.split("\n"))) <= 4096 and len(command) > CODE_CHARS

"""Tests for `[[approvals]] hooks` and `remember` (bot/config/approvals.py, bot/config/tool_patterns.py): which
rules cover an agent's permission prompt, and how long its answer may be remembered (bot/core/remembered.py)."""

from __future__ import annotations

import tomllib

import pytest

from bot.config import Config, ConfigError, parse_config
from bot.config.approvals import deciding_rule, governing_rule
from bot.config.tool_patterns import command_parts, parse_tool_pattern
from bot.core.remembered import UNRULED, Span, spans_offered

BASE = '[telegram]\nallowed_users = [1001]\n[servers.prod]\ncommand = "python"\n'


def parse(text: str) -> Config:
    return parse_config(tomllib.loads(BASE + text), {})


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    return caught.value.problems


def bash(command: str) -> dict[str, object]:
    return {"command": command, "description": "the agent's reason"}


TWO_FOR_RM = '[[approvals]]\nhooks = ["Bash(rm *)"]\napprovers = [2001, 2002, 2003]\nquorum = 2\n'


def test_a_rule_with_hooks_alone_covers_agents_prompts_and_no_mcp_call() -> None:
    """`hooks` without servers and tools is a whole rule: it covers the Bash prompt, and no server's calls."""
    config = parse(TWO_FOR_RM)
    (rule,) = config.approvals
    assert config.hook_rules("Bash", bash("rm -rf build")) == (rule,)
    assert config.hook_rules("Bash", bash("ls -la")) == ()
    assert config.approval_rule("prod", "rm") is None


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /",
        "rm",
        "make && rm -rf build",
        "ls; rm x",
        "cat x | xargs rm",
        "sudo rm -rf /var",
        "FOO=1 rm x",
        "echo $(rm -rf ~)",
        "echo `rm y`",
        'bash -c "cd /tmp && rm -rf x"',
        "ls\nrm z",
        "find . -name '*.o' -exec rm {} +",
        "echo 'unbalanced && rm -rf /",
    ],
)
def test_a_shell_pattern_covers_the_command_wherever_in_a_compound_command_it_runs(command: str) -> None:
    """`Bash(rm *)` is met by rm as the command, after `&&`, `;`, `|`, a newline, a wrapper, inside `$(...)`,
    backticks or `bash -c`: an agent cannot slip it past the rule by chaining."""
    assert parse(TWO_FOR_RM).hook_rules("Bash", bash(command)), command


@pytest.mark.parametrize(
    "command", ["rmdir build", "ls -la", "echo 'firm'", "git rm-cache", "npm run format"]
)
def test_a_shell_pattern_leaves_other_commands_alone(command: str) -> None:
    """`rm *` keeps its word boundary: rmdir, or rm inside a longer word, is not rm."""
    assert parse(TWO_FOR_RM).hook_rules("Bash", bash(command)) == (), command


@pytest.mark.parametrize(
    ("pattern", "tool", "tool_input", "covered"),
    [
        ("Bash", "Bash", {"command": "anything at all"}, True),
        ("Bash", "Edit", {"file_path": "/x"}, False),
        ("Bash(npm run test:*)", "Bash", {"command": "npm run test"}, True),
        ("Bash(npm run test:*)", "Bash", {"command": "npm run test --watch"}, True),
        ("Bash(npm run test:*)", "Bash", {"command": "npm run testing"}, False),
        ("Bash(git push * main)", "Bash", {"command": "git push origin main"}, True),
        ("Bash(git push * main)", "Bash", {"command": "git push origin dev"}, False),
        ("Edit(/etc/*)", "Edit", {"file_path": "/etc/passwd", "old_string": "a", "new_string": "b"}, True),
        ("Edit(/etc/*)", "Edit", {"file_path": "/home/a/etc/x"}, False),
        ("Write(*.env)", "Write", {"file_path": "/app/prod.env", "content": "K=V"}, True),
        ("WebFetch(domain:example.com)", "WebFetch", {"url": "https://api.example.com/x"}, True),
        ("WebFetch(domain:example.com)", "WebFetch", {"url": "https://example.com.evil.net/"}, False),
        ("mcp__github__*", "mcp__github__create_pr", {"title": "x"}, True),
        ("mcp__github", "mcp__github__merge", {}, True),
        ("mcp__github", "mcp__githubx__merge", {}, False),
        ("mcp__db__query(*DROP TABLE*)", "mcp__db__query", {"sql": "DROP TABLE users"}, True),
        ("mcp__db__query(*DROP TABLE*)", "mcp__db__query", {"sql": "SELECT 1"}, False),
        ("apply_patch(*secrets*)", "apply_patch", {"command": "*** Update File: secrets.py"}, True),
    ],
)
def test_patterns_take_claude_codes_permission_rule_syntax(
    pattern: str, tool: str, tool_input: dict[str, object], covered: bool
) -> None:
    """`Tool` or `Tool(specifier)`: the command for Bash, the path for file tools, the host for `domain:`, the
    input's JSON for other tools; `prefix:*` and `*` as Claude Code reads them."""
    assert parse_tool_pattern(pattern).matches(tool, tool_input) is covered


def test_bad_hooks_and_a_half_given_mcp_half_are_named() -> None:
    """An unparsable pattern, servers without tools, an empty list, hooks a rule's callers leave out, and
    "always" where a quorum above 1 never remembers."""
    found = problems(
        '[[approvals]]\nhooks = ["Bash(", "Edit()"]\nservers = ["prod"]\napprovers = [2001]\n'
        "[[approvals]]\nhooks = []\napprovers = [2001]\n"
        '[[approvals]]\nhooks = ["Bash"]\ncallers = ["chat"]\napprovers = [2001]\nremember = "forever"\n'
        '[[approvals]]\nhooks = ["Bash"]\napprovers = [2001, 2002, 2003]\nquorum = 2\nremember = "always"\n'
    )
    assert any(p.startswith("approvals[0].hooks[0]: must be Tool or Tool(pattern)") for p in found)
    assert "approvals[0].hooks[1]: the pattern in brackets must not be empty" in found
    assert "approvals[0].tools: required with servers" in found
    assert "approvals[1].hooks: must list at least one" in found
    assert "approvals[2].callers: must include 'agent' with hooks (they are agents' prompts)" in found
    assert 'approvals[2].remember: must be true, false or "always"' in found
    assert 'approvals[3].remember: "always" is never offered with quorum 2: only once is' in found


def test_a_rule_without_hooks_still_needs_servers_and_tools() -> None:
    """The MCP rule as before: servers and tools are required."""
    found = problems("[[approvals]]\napprovers = [2001]\n")
    assert "approvals[0].servers: required" in found
    assert "approvals[0].tools: required" in found


def test_of_several_rules_on_a_compound_command_the_strictest_governs() -> None:
    """`git status && rm -rf /` meets a lenient rule on git first and a two-approver rule on rm: the two-approver
    one decides, whatever the order in the file."""
    config = parse(
        '[[approvals]]\nhooks = ["Bash(git *)"]\napprovers = [2001]\nremember = "always"\n' + TWO_FOR_RM
    )
    lenient, strict = config.approvals
    applying = config.hook_rules("Bash", bash("git status && rm -rf /"))
    assert applying == (lenient, strict)
    assert governing_rule(applying) is strict
    assert governing_rule(config.hook_rules("Bash", bash("git status"))) is lenient
    assert governing_rule(()) is None


def test_the_persons_own_tap_decides_only_where_every_covering_rule_leaves_it_to_them_alone() -> None:
    """A rule whose one approver is the person (quorum 1, no second factor, no escalation) leaves the prompt to
    their own card; any other covering rule decides it, also when it comes later in the file at the same quorum;
    an escalation on the person's own rule gives it to that rule's approval."""
    config = parse(
        '[[approvals]]\nhooks = ["Bash(*)"]\napprovers = [1001]\nself_approval = true\n'
        '[[approvals]]\nhooks = ["Bash(rm *)"]\napprovers = [2001, 2002]\n'
        '[[approvals]]\nhooks = ["Bash(sudo *)"]\napprovers = [1001]\nself_approval = true\n'
        "escalate_after_s = 60\nescalate_to = [2001]\n"
    )
    own, others, escalating = config.approvals

    def deciding(command: str) -> object:
        return deciding_rule(config.hook_rules("Bash", bash(command)), 1001)

    assert deciding("ls") is None and deciding("git status") is None
    assert deciding("ls && rm -rf build") is others
    assert deciding("sudo ls") is escalating
    assert deciding_rule(config.hook_rules("Bash", bash("ls")), 2001) is own
    assert deciding_rule((), 1001) is None


def test_spans_offered_follow_the_rules_that_cover_the_prompt() -> None:
    """No rule: once, session, hour. Quorum 2 or `remember = false`: once only. "always" only where every rule
    covering the prompt says so."""
    config = parse(
        '[[approvals]]\nhooks = ["Bash(npm *)"]\napprovers = [2001]\nremember = "always"\n'
        '[[approvals]]\nhooks = ["Bash(curl *)"]\napprovers = [2001]\nremember = false\n'
        '[[approvals]]\nhooks = ["Bash(git *)"]\napprovers = [2001]\n' + TWO_FOR_RM
    )

    def offered(command: str) -> tuple[Span, ...]:
        return spans_offered(config.hook_rules("Bash", bash(command)))

    assert offered("ls") == UNRULED == (Span.ONCE, Span.SESSION, Span.HOUR)
    assert offered("npm test") == (Span.ONCE, Span.SESSION, Span.HOUR, Span.ALWAYS)
    assert offered("git status") == UNRULED
    assert offered("curl https://x") == (Span.ONCE,)
    assert offered("rm -rf build") == (Span.ONCE,)
    assert offered("npm test && git push") == UNRULED  # git's rule does not say "always"
    assert offered("npm test && rm -rf node_modules") == (Span.ONCE,)


def test_command_parts_hold_the_whole_command_and_each_part_from_each_word() -> None:
    """What a shell pattern is matched on, for a chained command with a quoted argument."""
    parts = command_parts('cd /app && sudo rm -rf "my dir"')
    assert parts[0] == 'cd /app && sudo rm -rf "my dir"'
    assert {"cd /app", "/app", "sudo rm -rf my dir", "rm -rf my dir", "my dir"} <= set(parts)

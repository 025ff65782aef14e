"""Patterns on what an agent asks to do (`[[approvals]] hooks`), in Claude Code's permission-rule syntax. Pure.

A pattern is `Tool` (every use of the tool) or `Tool(specifier)` (a use whose subject matches the specifier). The
tool name may hold `*` (`mcp__github__*`), and `mcp__<server>` stands for every tool of that server. In a
specifier `*` matches any characters, spaces and `/` included; `prefix:*` (Claude Code's older form) matches
`prefix` alone or followed by a space and anything; a specifier whose only `*` ends it after a space also matches
without what follows (`ls *` matches `ls`).

The subject is what the tool acts on:
- `Bash` (Claude Code's, and Codex's shell) and Codex's `apply_patch`: `command`. A command is matched whole and
  part by part: the parts between `;`, `&`, `&&`, `|`, `||`, newlines, parentheses, `$(...)` and backticks, each
  from any of its words on, and the words that are themselves commands (`bash -c "..."`). So `sudo rm -rf x`,
  `xargs rm`, `make && rm -rf build` and `bash -c "rm x"` all match `rm *`. Matching errs towards asking; it is
  a guard on what an agent says it runs, not a sandbox (a script it wrote runs what it holds).
- `Read`, `Edit`, `MultiEdit`, `Write`: `file_path`; `NotebookEdit`: `notebook_path`.
- `WebFetch`: `url`; `domain:<host>` matches that host and its subdomains.
- `WebSearch`: `query`.
- any other tool (an MCP tool, a tool not named here): its input as JSON with sorted keys and no spaces.
"""

from __future__ import annotations

import json
import re
import shlex
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

__all__ = ["ToolPattern", "command_parts", "parse_tool_pattern"]

_PATTERN: Final = re.compile(r"([^()\s]+)(?:\((.*)\))?", re.DOTALL)
_SUBJECTS: Final = {
    "Bash": "command",
    "apply_patch": "command",
    "Read": "file_path",
    "Edit": "file_path",
    "MultiEdit": "file_path",
    "Write": "file_path",
    "NotebookEdit": "notebook_path",
    "WebFetch": "url",
    "WebSearch": "query",
}
"""Tools whose specifier matches one field of their input, and which."""
_COMMANDS: Final = frozenset({"Bash", "apply_patch"})
_SEPARATORS: Final = frozenset({";", "&", "&&", "|", "||", "|&", ";;", "(", ")", "`", "$"})
_PUNCTUATION: Final = "();<>|&`"
_NESTING: Final = 3
"""How deep words that are commands themselves (`bash -c "..."`) are looked into."""


@dataclass(frozen=True, slots=True)
class ToolPattern:
    """One parsed `Tool` or `Tool(specifier)`."""

    tool: str
    specifier: str | None
    """None: every use of the tool."""

    def __str__(self) -> str:
        return self.tool if self.specifier is None else f"{self.tool}({self.specifier})"

    def names(self, tool: str) -> bool:
        """Whether the pattern's tool part names `tool`."""
        if fnmatchcase(tool, self.tool):
            return True
        # `mcp__<server>`: every tool of that server (`mcp__<server>__<tool>`).
        return (
            self.tool.startswith("mcp__") and self.tool.count("__") == 1 and tool.startswith(self.tool + "__")
        )

    def matches(self, tool: str, tool_input: Mapping[str, object]) -> bool:
        """Whether a use of `tool` with `tool_input` falls under the pattern (see the module)."""
        if not self.names(tool):
            return False
        if self.specifier is None:
            return True
        field = _SUBJECTS.get(tool)
        if field is None:
            return _specifier(self.specifier).fullmatch(_canonical(tool_input)) is not None
        subject = tool_input.get(field)
        if not isinstance(subject, str):
            return False
        if tool == "WebFetch" and self.specifier.startswith("domain:"):
            return _in_domain(subject, self.specifier.removeprefix("domain:"))
        wanted = _specifier(self.specifier)
        if tool in _COMMANDS:
            return any(wanted.fullmatch(part) for part in command_parts(subject))
        return wanted.fullmatch(subject) is not None


def parse_tool_pattern(text: str) -> ToolPattern:
    """`Tool` or `Tool(specifier)` as a `ToolPattern`.

    Raises:
        ValueError: not of that form (an empty tool or specifier, spaces in the tool name, unbalanced brackets).
    """
    found = _PATTERN.fullmatch(text.strip())
    if found is None:
        raise ValueError("must be Tool or Tool(pattern), e.g. Bash(rm *) or mcp__github__*")
    tool, specifier = found.group(1), found.group(2)
    if specifier is not None and not specifier.strip():
        raise ValueError("the pattern in brackets must not be empty")
    return ToolPattern(tool, specifier)


def command_parts(command: str) -> tuple[str, ...]:
    """What a shell command is matched on: itself, and each of its parts from each of its words on (see the
    module), words that hold a command looked into as commands."""
    found: dict[str, None] = {command.strip(): None}
    for part in _parts(command, _NESTING):
        found[part] = None
    return tuple(found)


def _parts(command: str, depth: int) -> Iterator[str]:
    for words in _segments(command):
        for start in range(len(words)):
            yield " ".join(words[start:])
        if depth > 1:
            for word in words:
                if any(c.isspace() or c in _PUNCTUATION for c in word):
                    yield from _parts(word, depth - 1)


def _segments(command: str) -> list[list[str]]:
    """The command's simple commands, as words (quotes removed); unbalanced quotes: split on spaces."""
    try:
        tokens = list(_Lexer(command.replace("\n", " ; ")))
    except ValueError:
        tokens = re.split(r"\s+|([;&|()`])", command)
        tokens = [t for t in tokens if t]
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS or set(token) <= set(_PUNCTUATION) - set("<>"):
            segments.append([])
        else:
            segments[-1].append(token)
    return [words for words in segments if words]


class _Lexer(shlex.shlex):
    """POSIX shell words, with the control operators as words of their own."""

    def __init__(self, command: str) -> None:
        super().__init__(command, posix=True, punctuation_chars=_PUNCTUATION)
        self.whitespace_split = True  # words hold `-`, `/`, `$`, `:` and the like, as the shell's do


def _specifier(specifier: str) -> re.Pattern[str]:
    if specifier.endswith(":*"):
        return re.compile(re.escape(specifier[:-2]) + r"(?:\s.*)?", re.DOTALL)
    if specifier.count("*") == 1 and specifier.endswith(" *"):
        return re.compile(re.escape(specifier[:-2]) + r"(?:\s.*)?", re.DOTALL)
    return re.compile(".*".join(re.escape(piece) for piece in specifier.split("*")), re.DOTALL)


def _in_domain(url: str, domain: str) -> bool:
    host = (urllib.parse.urlsplit(url).hostname or "").rstrip(".").lower()
    domain = domain.strip().rstrip(".").lower()
    return bool(domain) and (host == domain or host.endswith("." + domain))


def _canonical(tool_input: Mapping[str, object]) -> str:
    return json.dumps(tool_input, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

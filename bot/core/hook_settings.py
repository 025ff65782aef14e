"""The lines that install the bot as an agent's permission prompt: Claude Code's settings block (an http hook),
Codex's (a command hook that posts to the bot with curl) and Claude Code's `--permission-prompt-tool` flag. Pure.

The token is not written into them: they name the environment variable `TOKEN_VAR` (Claude Code fills `$VAR` in
an http hook's headers only for the names in `allowedEnvVars`; Codex's shell fills it in the command), so a
settings file can be committed without the token in it.
"""

from __future__ import annotations

import json
from typing import Any, Final

__all__ = ["HOOK_TIMEOUT_S", "TOKEN_VAR", "claude_code_settings", "codex_hooks", "prompt_tool_flag"]

TOKEN_VAR: Final = "TOOLNEXUS_TOKEN"
HOOK_TIMEOUT_S: Final = 300
"""How long the agent waits for the person's tap (its hook's `timeout`); then its own fallback applies."""
HOOKS_PATH: Final = "/hooks"


def claude_code_settings(public_url: str, *, timeout_s: int = HOOK_TIMEOUT_S) -> dict[str, Any]:
    """`.claude/settings.json`'s `hooks`: every tool's permission prompt (`PermissionRequest`) to the bot."""
    hook = {
        "type": "http",
        "url": f"{public_url.rstrip('/')}{HOOKS_PATH}/claude-code",
        "headers": {"Authorization": f"Bearer ${TOKEN_VAR}"},
        "allowedEnvVars": [TOKEN_VAR],
        "timeout": timeout_s,
    }
    return {"hooks": {"PermissionRequest": [{"matcher": "*", "hooks": [hook]}]}}


def codex_hooks(public_url: str, *, timeout_s: int = HOOK_TIMEOUT_S) -> str:
    """`~/.codex/config.toml`'s inline hook: Codex's permission prompts piped to the bot with curl."""
    url = f"{public_url.rstrip('/')}{HOOKS_PATH}/codex"
    command = (
        f'curl -sS --max-time {timeout_s} -H "Authorization: Bearer ${TOKEN_VAR}" '
        f"-H 'Content-Type: application/json' --data-binary @- {url}"
    )
    return "\n".join(
        [
            "[[hooks.PermissionRequest]]",
            'matcher = "*"',
            "[[hooks.PermissionRequest.hooks]]",
            'type = "command"',
            f"command = {json.dumps(command)}",
            f"timeout = {timeout_s + 5}",
        ]
    )


def prompt_tool_flag(server_name: str) -> str:
    """Claude Code's flag for headless runs: the gateway's `permission_prompt` tool as `claude mcp add` named it."""
    return f"--permission-prompt-tool mcp__{server_name}__permission_prompt"

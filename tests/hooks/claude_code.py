"""The real Claude Code CLI for the hook tests: where `.ci/run` installs it (pinned in tests/hooks/package.json), and
a headless run of it (`claude -p`) against a scripted model endpoint, offline.

What 2.1.332 needs to run so, all in the environment it is given: `ANTHROPIC_BASE_URL` (the fake Messages API),
`ANTHROPIC_API_KEY` (any text: no login), a `HOME` of its own (it writes `~/.claude.json` and its transcripts
there), and `DISABLE_TELEMETRY`, `DISABLE_ERROR_REPORTING`, `DISABLE_AUTOUPDATER`,
`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` so that it reaches for nothing else; with them it made no request but
the two turns of `POST /v1/messages` (measured against the fake, which records every path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "claude-code"
CLAUDE = CACHE / "node_modules" / ".bin" / "claude"
VERSION = "2.1.332"
INSTALL = "mkdir -p .cache/claude-code && cp tests/hooks/package*.json .cache/claude-code/ && npm ci --prefix .cache/claude-code"


def need_claude() -> Path:
    """The CLI; without it the test fails under CI (`CI=true`: `.ci/run` installs it) and is skipped elsewhere."""
    if CLAUDE.exists():
        return CLAUDE
    why = f"Claude Code's CLI is not installed ({CLAUDE.relative_to(ROOT)}); run: {INSTALL}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


async def run_claude(
    workdir: Path,
    model_url: str,
    token: str,
    settings: dict[str, Any],
    *flags: str,
    prompt: str = "do the task",
) -> dict[str, Any]:
    """`claude -p <prompt> --output-format json <flags>` in `workdir` with `settings` as its project's
    `.claude/settings.json` and `TOOLNEXUS_TOKEN` set to `token`; its JSON result."""
    claude = need_claude()
    (workdir / ".claude").mkdir(parents=True, exist_ok=True)
    (workdir / ".claude" / "settings.json").write_text(json.dumps(settings))
    home = workdir.parent / f"{workdir.name}-home"
    home.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "TOOLNEXUS_TOKEN": token,
        "NO_PROXY": "127.0.0.1",
    }
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [str(claude), "-p", prompt, "--output-format", "json", *flags], cwd=workdir, env=env, check=False
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    result: dict[str, Any] = json.loads(done.stdout)
    return result

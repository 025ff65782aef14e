"""The agents' real CLIs for the hook tests: where `.ci/run` installs them (pinned in tests/hooks/package.json), and
a headless run of each against a scripted model endpoint, offline.

Claude Code 2.1.332 (`claude -p`) needs, all in the environment it is given: `ANTHROPIC_BASE_URL` (the fake
Messages API), `ANTHROPIC_API_KEY` (any text: no login), a `HOME` of its own (it writes `~/.claude.json` and its
transcripts there), and `DISABLE_TELEMETRY`, `DISABLE_ERROR_REPORTING`, `DISABLE_AUTOUPDATER`,
`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC` so that it reaches for nothing else; with them it made no request but
its turns of `POST /v1/messages` (the fake records every path).

Codex 0.171.0 (`codex exec`) needs a `CODEX_HOME` of its own whose `config.toml` names a model provider at the
fake Responses API (`wire_api = "responses"`, a key from the environment); `--approve-for-me`, without which
`exec` never asks for approval (so no `PermissionRequest` fires); `--dangerously-bypass-hook-trust`, since a hook
is otherwise run only once trusted in its interactive `/hooks` screen; and `--disable plugins --disable
remote_plugin --disable in_app_updates` so that it does not reach for GitHub and OpenAI at start.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "agent-clis"
CLAUDE = CACHE / "node_modules" / ".bin" / "claude"
CODEX = CACHE / "node_modules" / ".bin" / "codex"
INSTALL = "mkdir -p .cache/agent-clis && cp tests/hooks/package*.json .cache/agent-clis/ && npm ci --prefix .cache/agent-clis"


def need(cli: Path) -> Path:
    """`cli`; without it the test fails under CI (`CI=true`: `.ci/run` installs it) and is skipped elsewhere."""
    if cli.exists():
        return cli
    why = f"{cli.name}'s CLI is not installed ({cli.relative_to(ROOT)}); run: {INSTALL}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(why)
    pytest.skip(why)


def need_claude() -> Path:
    return need(CLAUDE)


def need_codex() -> Path:
    return need(CODEX)


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


async def run_codex(
    workdir: Path, model_url: str, token: str, hooks: str, prompt: str = "do the task"
) -> str:
    """`codex exec <prompt>` in `workdir`, its `config.toml` the fake model provider and `hooks` (TOML), with
    `TOOLNEXUS_TOKEN` set to `token`; its JSONL events."""
    codex = need_codex()
    home = _codex_home(workdir, model_url, hooks)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir.parent),
        "CODEX_HOME": str(home),
        "SCRIPTED_KEY": "sk-fake",
        "TOOLNEXUS_TOKEN": token,
        "NO_PROXY": "127.0.0.1",
    }
    flags = ["--skip-git-repo-check", "--approve-for-me", "--dangerously-bypass-hook-trust", "--json"]
    flags += ["--disable", "plugins", "--disable", "remote_plugin", "--disable", "in_app_updates"]
    with anyio.fail_after(120):
        done = await anyio.run_process(
            [str(codex), "exec", *flags, prompt], cwd=workdir, env=env, check=False
        )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode()


def _codex_home(workdir: Path, model_url: str, hooks: str) -> Path:
    """A `CODEX_HOME` beside `workdir` whose `config.toml` names the scripted provider and holds `hooks`."""
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir.parent / f"{workdir.name}-codex"
    home.mkdir(exist_ok=True)
    provider = "\n".join(
        [
            'model = "gpt-5"',
            'model_provider = "scripted"',
            'sandbox_mode = "read-only"',
            "[model_providers.scripted]",
            'name = "scripted"',
            f'base_url = "{model_url}"',
            'wire_api = "responses"',
            'env_key = "SCRIPTED_KEY"',
        ]
    )
    (home / "config.toml").write_text(f"{provider}\n\n{hooks}\n")
    return home

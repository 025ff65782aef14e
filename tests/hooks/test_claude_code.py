"""Claude Code's own permission prompts on the phone, end to end: the real CLI (`claude -p`, tests/hooks/package.json)
with the hook settings `/agents new` prints, a scripted model (tests/fakes/anthropic.py) that asks to run Bash, the
bot's `/hooks/claude-code`, and the person's tap on the fake Bot API. Needs the CLI: `.ci/run` installs it, and
under `CI=true` its absence fails these tests instead of skipping them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from bot.core.hook_settings import claude_code_settings, prompt_tool_flag
from tests.fakes.anthropic import bash, fake_anthropic, text, tool_results
from tests.hooks.clis import need_claude, run_claude
from tests.hooks.phone import audit, card, cards, entities, printed
from tests.web.agents import gateway_scene

pytestmark = pytest.mark.anyio


async def test_claude_codes_bash_prompt_reaches_the_phone_as_code_and_allow_runs_the_command(
    tmp_path: Path,
) -> None:
    """The scripted model asks to run `touch`; Claude Code's PermissionRequest hook (the settings `/agents new`
    printed, its token in `TOOLNEXUS_TOKEN`) brings a card to Alice: the command as code, the working directory,
    the session, four answers. Allow: the command runs, the card says what she chose, and the audit has the ask
    and her answer."""
    need_claude()
    target = tmp_path / "work" / "allowed.txt"
    async with (
        gateway_scene(tmp_path) as (s, port, url),
        fake_anthropic([bash(f"touch {target}"), text("done")]) as model,
    ):
        token, settings, _ = await printed(s, port, "laptop")
        results: list[dict[str, Any]] = []

        async def run() -> None:
            results.append(await run_claude(tmp_path / "work", model.url, token, settings))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            shown = await card(s, 0)
            assert f"touch {target}" in entities(shown, "pre")
            assert str(tmp_path / "work") in shown.text and "laptop" in shown.text and "session" in shown.text
            assert shown.buttons == ["✅ Allow", "❌ Deny", "Allow for this session", "Allow for an hour"]
            await s.alice.press(shown, "✅ Allow")
        settled = await s.fake.wait_for(lambda m: m is shown and not m.buttons)
        assert "✅ Allow" in settled.text
        rows = await audit(url)
    assert target.exists()
    assert results[0]["result"] == "done" and not results[0]["permission_denials"]
    assert [r["event"] for r in rows] == ["permission_asked", "permission_decided"]
    asked, decided = rows
    assert asked["server"] == "laptop" and asked["tool"] == "Bash"
    assert asked["detail"]["input"]["command"] == f"touch {target}"
    assert decided["detail"]["allow"] is True and decided["detail"]["by"] == "person"


async def test_deny_stops_the_command_and_claude_code_hands_the_reason_to_its_model(tmp_path: Path) -> None:
    """Deny: the command does not run, and the next request Claude Code makes of its model carries the tool's
    refusal with the bot's line (who denied it, on the phone)."""
    need_claude()
    target = tmp_path / "work" / "denied.txt"
    async with (
        gateway_scene(tmp_path) as (s, port, url),
        fake_anthropic([bash(f"touch {target}"), text("understood")]) as model,
    ):
        token, settings, _ = await printed(s, port, "laptop")
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_claude, tmp_path / "work", model.url, token, settings)
            shown = await card(s, 0)
            await s.alice.press(shown, "❌ Deny")
        rows = await audit(url)
    assert not target.exists()
    (result,) = tool_results(model.requests[1])
    assert result["is_error"] is True
    assert "Alice denied this on the phone" in json.dumps(result["content"])
    assert rows[-1]["detail"]["allow"] is False and rows[-1]["detail"]["by"] == "person"


async def test_allow_for_this_session_lets_the_same_command_through_without_a_card_and_asks_for_another(
    tmp_path: Path,
) -> None:
    """With "Allow for this session" on the first `echo`: the same command again in the same run passes without a
    card (the audit names the remembered decision and who made it when); a different command gets its card."""
    need_claude()
    work = tmp_path / "work"
    log, other = work / "log.txt", work / "other.txt"
    script = [bash(f"echo x >> {log}"), bash(f"echo x >> {log}"), bash(f"touch {other}"), text("done")]
    async with gateway_scene(tmp_path) as (s, port, url), fake_anthropic(script) as model:
        token, settings, _ = await printed(s, port, "laptop")
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_claude, tmp_path / "work", model.url, token, settings)
            first = await card(s, 0)
            assert f"echo x >> {log}" in entities(first, "pre")
            await s.alice.press(first, "Allow for this session")
            second = await card(s, 1)
            assert f"touch {other}" in entities(second, "pre")
            await s.alice.press(second, "✅ Allow")
        rows = await audit(url)
    assert len(cards(s)) == 2
    assert log.read_text() == "x\nx\n" and other.exists()
    decided = [r["detail"] for r in rows if r["event"] == "permission_decided"]
    assert [d["by"] for d in decided] == ["person", "remembered", "person"]
    assert decided[1]["allow"] is True and decided[1]["decision_id"] == decided[0]["decision_id"]
    assert decided[1]["line"].startswith("allowed by the rule Alice made at ")


async def test_when_claude_code_stops_waiting_the_card_says_so_and_names_its_fallback(tmp_path: Path) -> None:
    """A hook timeout of 2 s and nobody taps: Claude Code drops the request, the card ends saying the agent
    stopped waiting and what Claude Code does then (headless: the tool is denied, so the file is not made)."""
    need_claude()
    target = tmp_path / "work" / "late.txt"
    async with (
        gateway_scene(tmp_path) as (s, port, url),
        fake_anthropic([bash(f"touch {target}"), text("ok")]) as model,
    ):
        token, _, _ = await printed(s, port, "laptop")
        settings = claude_code_settings(f"http://127.0.0.1:{port}", timeout_s=2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_claude, tmp_path / "work", model.url, token, settings)
            shown = await card(s, 0)
        settled = await s.fake.wait_for(lambda m: m is shown and not m.buttons, 30)
        rows = await audit(url)
    assert "your agent stopped waiting" in settled.text
    assert "Claude Code stopped waiting" in settled.text and "claude -p" in settled.text
    assert not target.exists()
    assert rows[-1]["detail"] == {"agent_token": rows[-1]["detail"]["agent_token"], "allow": None, "by": "nobody",
                                  "why": "the agent stopped waiting"}  # fmt: skip


async def test_the_gateways_permission_prompt_tool_answers_claude_codes_headless_prompts(
    tmp_path: Path,
) -> None:
    """No hook: `claude -p --permission-prompt-tool mcp__laptop__permission_prompt` with the gateway added as
    `/agents new` prints it asks the gateway's tool; Alice's Allow runs the first command, her Deny stops the
    second and its refusal reaches the model."""
    need_claude()
    work = tmp_path / "work"
    made, refused = work / "made.txt", work / "refused.txt"
    script = [bash(f"touch {made}"), bash(f"touch {refused}"), text("done")]
    async with gateway_scene(tmp_path) as (s, port, url), fake_anthropic(script) as model:
        token, _, _ = await printed(s, port, "laptop")
        local = f"http://127.0.0.1:{port}/mcp"
        servers = {"laptop": {"type": "http", "url": local, "headers": {"Authorization": f"Bearer {token}"}}}
        flags = ("--mcp-config", json.dumps({"mcpServers": servers}), *prompt_tool_flag("laptop").split())
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: run_claude(work, model.url, token, {}, *flags))
            first = await card(s, 0)
            assert f"touch {made}" in entities(first, "pre")
            await s.alice.press(first, "✅ Allow")
            second = await card(s, 1)
            await s.alice.press(second, "❌ Deny")
        rows = await audit(url)
    assert made.exists() and not refused.exists()
    (result,) = tool_results(model.requests[2])
    assert "Alice denied this on the phone" in json.dumps(result["content"])
    assert [r["detail"]["client"] for r in rows if r["event"] == "permission_asked"] == ["prompt-tool"] * 2

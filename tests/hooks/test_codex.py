"""Codex's own permission prompts on the phone, end to end: the real CLI (`codex exec`, tests/hooks/package.json)
with the hook `/agents new` prints (a command hook that posts to `/hooks/codex` with curl), a scripted Responses API
(tests/fakes/openai_responses.py) that asks to run shell commands outside the sandbox, and the person's taps on the
fake Bot API. Needs the CLI: `.ci/run` installs it, and under `CI=true` its absence fails the test."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from tests.fakes.openai_responses import command, fake_responses, outputs, said
from tests.hooks.clis import need_codex, run_codex
from tests.hooks.phone import audit, card, cards, entities, printed
from tests.web.agents import gateway_scene

pytestmark = pytest.mark.anyio


async def test_codexs_approval_reaches_the_phone_allow_runs_the_command_and_deny_stops_the_next(
    tmp_path: Path,
) -> None:
    """Codex asks to run `touch` outside its sandbox: its PermissionRequest hook, as printed, brings a card to
    Alice (the command as code, Codex named); Allow runs it. The next command she denies: it does not run, and
    Codex hands the model the bot's line."""
    need_codex()
    work = tmp_path / "work"
    made, refused = work / "made.txt", work / "refused.txt"
    script = [command(f"touch {made}"), command(f"touch {refused}"), said("done")]
    async with gateway_scene(tmp_path) as (s, port, url), fake_responses(script) as model:
        token, _, hooks = await printed(s, port, "codex-box")
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_codex, work, model.url, token, hooks)
            first = await card(s, 0)
            assert f"touch {made}" in entities(first, "pre") and "Codex" in first.text
            await s.alice.press(first, "✅ Allow")
            second = await card(s, 1)
            assert f"touch {refused}" in entities(second, "pre")
            await s.alice.press(second, "❌ Deny")
        rows = await audit(url)
    assert made.exists() and not refused.exists()
    assert any("Alice denied this on the phone" in out for out in outputs(model.requests[-1])), json.dumps(
        outputs(model.requests[-1])
    )
    asked = [r["detail"] for r in rows if r["event"] == "permission_asked"]
    assert [a["client"] for a in asked] == ["codex", "codex"]
    assert len(cards(s)) == 2

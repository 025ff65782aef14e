"""An approval request outlives the bot process: the installed `toolnexus-bot` killed with SIGKILL between the first
and the second approval, started again, and the second approval (on the card the first process sent) completes
it; the stdio server, a new process of it, receives the call exactly once. The audit chain lists every decision."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

from tests.fakes.telegram import FakeTelegram
from tests.inprocess import toolnexus
from tests.zygote import open_bot, server_toml

pytestmark = pytest.mark.anyio

EXE = Path(sys.executable).with_name("toolnexus-bot")
REPO = Path(__file__).resolve().parents[2]
ALICE_ID, BOB_ID, CAROL_ID, DAVE_ID = 1001, 1002, 3003, 3004
OPS = -7001


def config_text(fake: FakeTelegram, db: Path, ledger: Path) -> str:
    return (
        f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
        f"allowed_users = [{ALICE_ID}, {BOB_ID}]\n"
        f'[storage]\nurl = "sqlite:///{db}"\n'
        "[servers.prod]\n"
        + server_toml("tests.fakes.servers.ledger", str(ledger))
        + f'[[approvals]]\nservers = ["prod"]\ntools = ["deploy"]\napprovers = [{BOB_ID}, {CAROL_ID}, {DAVE_ID}]\n'
        f"quorum = 2\nchat = {OPS}\n"
    )


def ledger_lines(ledger: Path) -> list[dict[str, object]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines()]


async def test_a_sigkill_between_two_approvals_loses_nothing_and_the_call_runs_once(tmp_path: Path) -> None:
    """Bob approves, the bot is SIGKILLed, a new bot starts on the same database; Carol approves on the old card:
    the call runs once with the approved arguments, Alice gets its result, and the audit chain verifies and
    lists the request and both approvals."""
    db, ledger, config = tmp_path / "bot.db", tmp_path / "ledger.jsonl", tmp_path / "bot.toml"
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE_ID, first_name="Alice")
        bob = fake.user(id=BOB_ID, first_name="Bob")
        carol = fake.user(id=CAROL_ID, first_name="Carol")
        dave = fake.user(id=DAVE_ID, first_name="Dave")
        fake.group(OPS, title="On-call", members=[alice, bob, carol, dave])
        config.write_text(config_text(fake, db, ledger))
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
        command = [str(EXE), "--config", str(config)]

        first = await open_bot(command, env=env, cwd=REPO, stdout=None, stderr=None)
        second = None
        try:
            await fake.wait_for_call("setMyCommands", timeout=30)
            await alice.send("/call prod deploy service=web version=1.2.3")
            card = await fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=30)
            await bob.press(card, "✅ Approve", timeout=30)
            await fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text, timeout=30)
            first.kill()  # SIGKILL: no shutdown of any kind
            await first.wait()
            assert ledger_lines(ledger) == []

            second = await open_bot(command, env=env, cwd=REPO, stdout=None, stderr=None)
            answer = await carol.press(card, "✅ Approve", timeout=60)
            assert not answer.show_alert, answer.text
            result = await fake.wait_for(
                lambda m: m.chat_id == ALICE_ID and "deployed web 1.2.3" in m.text, timeout=60
            )
            settled = await fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=30)
            second.terminate()
            with anyio.fail_after(15):
                assert await second.wait() == 0
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    assert "Approved by Bob (" in settled.text and "and Carol (" in settled.text
    assert "✅" in result.text
    assert ledger_lines(ledger) == [{"tool": "deploy", "arguments": {"service": "web", "version": "1.2.3"}}]

    # The audit command's main in process: the bot's processes are the point, not this one.
    verified = toolnexus("audit", "--config", str(config), "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = toolnexus("audit", "--config", str(config), "--format", "jsonl")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines() if line.strip()]
    decisions = [(r["event"], r["user_id"]) for r in rows if r["event"].startswith("approv")]
    assert decisions == [("approval_requested", ALICE_ID), ("approved", BOB_ID), ("approved", CAROL_ID)]
    hashes = {r["detail"]["content_sha256"] for r in rows if r["event"].startswith("approv")}
    assert len(hashes) == 1
    assert [r["event"] for r in rows].count("call_started") == 1

"""`toolnexus-bot console` with an `[[approvals]]` rule: the terminal has no approvers, so a gated call is
refused with the reason and never reaches the server; other tools run as usual."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import run
from tests.zygote import server_toml


def test_the_console_refuses_a_gated_call_with_the_reason_and_runs_the_others(tmp_path: Path) -> None:
    """`deploy` (gate "call") and `rollback` (gate "answers") are refused, naming the rule and why; `status`
    (not gated) runs; the server's ledger holds `status` only."""
    ledger = tmp_path / "ledger.jsonl"
    config = tmp_path / "bot.toml"
    config.write_text(
        "[servers.prod]\n"
        + server_toml("tests.fakes.servers.ledger", str(ledger))
        + '[[approvals]]\nservers = ["prod"]\ntools = ["deploy*"]\napprovers = [1002]\n'
        '[[approvals]]\nservers = ["prod"]\ntools = ["rollback"]\napprovers = [1002]\ngate = "answers"\n'
    )
    done = run(
        "console",
        "--config",
        str(config),
        stdin="/call prod deploy service=web version=1.2.3\n/call prod rollback\n/call prod status\n/quit\n",
    )
    assert done.returncode == 0, done.stderr
    assert "deploy on prod needs approval (approvals[0])" in done.stdout
    assert "rollback on prod needs approval (approvals[1])" in done.stdout
    assert "the console has no approvers" in done.stdout and "not run" in done.stdout
    assert "all green" in done.stdout
    assert ledger.read_text().splitlines() == ['{"tool": "status", "arguments": {}}']

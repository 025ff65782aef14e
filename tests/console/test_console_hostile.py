"""The console prints a hostile server's text without control characters: its escape sequences cannot repaint
or retitle the operator's terminal. Bad input is quoted back cut short. Through the installed command."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import run
from tests.fakes.servers.hostile_text import CONTROLS


def test_a_hostile_servers_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    """`/tools`, a call with progress, a question with a hostile title and a hostile result: the output has
    no control character but newline and tab, and the text around the sequences is all there."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[servers.hostile]\ncommand = "python"\nargs = ["-m", "tests.fakes.servers.hostile_text"]\n'
        'protocol = "legacy"\n'
    )
    long_bad = "z" * 5000
    done = run(
        "console",
        "--config",
        str(config),
        stdin=f"/tools\n/call hostile paint\n{long_bad}\n7\n{long_bad}\ns\n/call {long_bad}\n/quit\n",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Paints ]0;owned" in out and "Pick a colour ]0;owned" in out and "Colour ]0;owned" in out
    assert "painted ]0;owned" in out and "accept" in out
    assert sorted({f"U+{ord(c):04X}" for c in out if c in CONTROLS}) == []
    echoed = [line for line in out.splitlines() if "zzzz" in line]
    assert echoed and all(len(line) < 250 for line in echoed), [len(line) for line in echoed]
    assert "(5,000 characters) is not an answer here" in out

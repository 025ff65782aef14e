"""The console says how a stdio server's process ended, as `check` does: its exit status and the end of its
stderr, at start (`/servers`, a call) and in the middle of a call. Through the installed command, real server
processes (tests/fakes/servers/exits.py)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli import run
from tests.fakes.servers.exits import BAD_CONFIG, DYING, NO_TOOLS

EXITED_3 = (
    f"the server process exited with status 3; its stderr ends: starting the exits server | {BAD_CONFIG}"
)


def test_the_console_names_a_servers_exit_status_and_stderr_at_start_and_mid_call(tmp_path: Path) -> None:
    """`/servers` and a call on a server that exits 3 at start, and a call whose server exits 5 during it: each
    line names the status and quotes the stderr; the raw stderr itself is not on the console's output."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[servers.x]\ncommand = "python"\nargs = ["-m", "tests.fakes.servers.exits", "start"]\n'
        '[servers.d]\ncommand = "python"\nargs = ["-m", "tests.fakes.servers.exits"]\n'
    )
    done = run("console", "--config", str(config), stdin="/servers\n/call x die\n/call d die\n/quit\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"x (stdio): unavailable: {EXITED_3}" in out
    assert f"x: unavailable: {EXITED_3}" in out
    assert f"the server went away (the server process exited with status 5; its stderr ends: {DYING})" in out
    assert "Connection closed" not in out
    quoted = [line for line in out.splitlines() if BAD_CONFIG in line or DYING in line]
    assert quoted and all("its stderr ends: " in line for line in quoted), quoted
    assert BAD_CONFIG in done.stderr and DYING in done.stderr  # the raw stderr goes where the log goes


def test_a_server_that_exits_when_asked_for_its_tools_is_explained_by_its_exit(tmp_path: Path) -> None:
    """The session opens, and the process exits at `tools/list` with status 4: `/servers` names the exit and
    quotes the stderr, not the SDK's "Connection closed"."""
    config = tmp_path / "config.toml"
    config.write_text(
        '[servers.l]\ncommand = "python"\nargs = ["-m", "tests.fakes.servers.exits", "at-list"]\n'
    )
    done = run("console", "--config", str(config), stdin="/servers\n/quit\n")
    assert done.returncode == 0, done.stderr
    said = f"l (stdio): unavailable: the server process exited with status 4; its stderr ends: {NO_TOOLS}"
    assert said in done.stdout, done.stdout

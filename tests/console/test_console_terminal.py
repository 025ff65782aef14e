"""`toolnexus-bot console` as a terminal program: prompt, `/cancel` and Ctrl-C during a call, Ctrl-D, re-asks.

A pseudo-terminal (`os.openpty`) drives the real console process; the counting server (tests/fakes/servers/counting.py)
writes to a FIFO when it hears a cancel, so reading that FIFO is the wait. Bounds are `anyio.fail_after`.
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from bot.console.terminal import progress_bar
from tests.cli.test_cli import EXE, REPO, run
from tests.zygote import server_toml

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

_ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """The controlling side of a pseudo-terminal with the console running on the other side."""

    def __init__(self, fd: int, process: Process) -> None:
        self.fd = fd
        self.process = process
        self.screen = b""
        """Everything the console wrote, escape sequences removed."""
        self._seen = 0
        """Where the last expected text ended: the next one is looked for after it."""

    async def expect(self, text: str, within: float = 20) -> None:
        """Wait until `text` has been written after the previously expected text."""
        with anyio.fail_after(within):
            while (found := self.screen.find(text.encode(), self._seen)) < 0:
                await anyio.wait_readable(self.fd)
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: the console closed the terminal
                    raise AssertionError(f"{text!r} never came; saw {self.screen[-800:]!r}") from None
                self.screen += _ESCAPES.sub(b"", chunk)
        self._seen = found + len(text)

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())


@asynccontextmanager
async def console_in_a_terminal(config: Path, state: Path | None = None) -> AsyncIterator[Terminal]:
    """The console at a pseudo-terminal; its log goes under `state` (XDG_STATE_HOME), by default a fresh folder."""
    controller, tty = os.openpty()
    fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    # No cursor-position requests: nothing answers them here (a real terminal does).
    env = {**os.environ, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"}
    env["XDG_STATE_HOME"] = str(state if state is not None else config.parent / "state")
    process = await anyio.open_process(
        [str(EXE), "console", "--config", str(config)],
        stdin=tty,
        stdout=tty,
        stderr=tty,
        cwd=REPO,
        env=env,
        start_new_session=True,
    )
    os.close(tty)
    try:
        yield Terminal(controller, process)
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.fail_after(30):
            await process.wait()
        os.close(controller)


def _counting_config(tmp_path: Path) -> tuple[Path, Path]:
    heard = tmp_path / "heard"
    os.mkfifo(heard)
    config = tmp_path / "c.toml"
    config.write_text(
        "[servers.count]\n" + server_toml("tests.fakes.servers.counting", str(heard)) + f'cwd = "{REPO}"\n'
    )
    return config, heard


async def _heard(heard: Path, within: float) -> str:
    with anyio.fail_after(within):
        return await anyio.to_thread.run_sync(heard.read_text, abandon_on_cancel=True)


@pytest.mark.parametrize(("keys", "how"), [("/cancel\r", "/cancel"), ("\x03", "Ctrl-C")])
async def test_cancel_at_the_terminal_stops_a_100_step_call_at_once(
    tmp_path: Path, keys: str, how: str
) -> None:
    """The prompt shows; /cancel or Ctrl-C typed during the call cancels it within a second; the server hears it."""
    config, heard = _counting_config(tmp_path)
    async with console_in_a_terminal(config) as terminal:
        await terminal.expect("toolnexus>")
        terminal.type("/call count count steps=100\r")
        await terminal.expect("% step")  # the progress bar: the call is under way
        terminal.type(keys)
        said = await _heard(heard, within=1)
        assert re.fullmatch(r"cancelled at step \d+ of 100", said), (how, said)
        await terminal.expect("Cancelled")
        await terminal.expect("toolnexus>")
        terminal.type("\x04")  # Ctrl-D leaves
        with anyio.fail_after(20):
            status = await terminal.process.wait()
    assert status == 0
    assert b"Traceback" not in terminal.screen


async def test_progress_at_the_terminal_is_one_updating_bar_line(tmp_path: Path) -> None:
    """A running call's progress is drawn as a bar above the prompt, not as one printed line per step."""
    config, _heard_fifo = _counting_config(tmp_path)
    async with console_in_a_terminal(config) as terminal:
        await terminal.expect("toolnexus>")
        terminal.type("/call count count steps=20 delay_s=0.01\r")
        await terminal.expect("counted to 20")
        await terminal.expect("toolnexus>")  # keys typed before the prompt is back would reach no one
        terminal.type("\x04")
        with anyio.fail_after(20):
            await terminal.process.wait()
    assert b"[####################] 100% step 20" in terminal.screen
    assert b"... 5%" not in terminal.screen  # the piped form, one line per step


def test_the_progress_bar_fills_with_the_fraction() -> None:
    """The bar's width follows the fraction; an unknown total shows the count."""
    assert progress_bar(0.5, 5, "half") == "[##########..........]  50% half"
    assert progress_bar(None, 7, None) == "... 7"


async def test_sigint_with_piped_input_cancels_the_running_call(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) while a piped console runs a call cancels the call, no traceback; input goes on."""
    config, heard = _counting_config(tmp_path)
    process = await anyio.open_process(
        [str(EXE), "console", "--config", str(config)], cwd=REPO, stderr=subprocess.STDOUT
    )
    async with process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(b"/call count count steps=100\n")
        output = b""
        with anyio.fail_after(20):
            while b"... " not in output:  # the first progress line: the call runs
                output += await process.stdout.receive()
        process.send_signal(signal.SIGINT)
        said = await _heard(heard, within=5)
        await process.stdin.send(b"/help\n")
        await process.stdin.aclose()
        with anyio.fail_after(20):
            async for chunk in process.stdout:
                output += chunk
            status = await process.wait()
    assert re.fullmatch(r"cancelled at step \d+ of 100", said)
    assert status == 0
    text = output.decode()
    assert "Cancelled" in text and "Commands:" in text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text


def test_every_re_ask_says_why_and_skip_where_it_cannot_apply_says_so() -> None:
    """At a link question and at the review, a wrong answer or /skip gets a reason; /skip with no question too."""
    done = run(
        "console",
        stdin="/skip\n/call demo connect_calendar\n/skip\nmaybe\n/cancel\n/call demo deploy\n1\n/skip\n9\n/cancel\n",
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "/skip answers a question, and nothing is being asked now." in out
    assert "! /skip does not apply to a link: it can only be opened, declined or cancelled" in out
    assert "! 'maybe' is not an answer here; type y to open example.com, /decline or /cancel" in out
    assert "! /skip does not apply to the review: nothing is left to skip" in out
    assert "! there is no field 9 (1 to 1)" in out


async def test_log_lines_and_a_servers_raw_stderr_stay_out_of_the_prompt_and_go_to_the_log_file(
    tmp_path: Path,
) -> None:
    """A server that writes to stderr and dies: the terminal shows the console's own line for it, which names
    the exit status and quotes the stderr's end, not the server's raw stderr nor the bot's warning log line;
    both are in the log file the console names."""
    config = tmp_path / "c.toml"
    noisy = "import sys; print('RAW-STDERR-LINE', file=sys.stderr, flush=True); sys.exit(3)"
    config.write_text(f'[servers.noisy]\ncommand = "python"\nargs = ["-c", "{noisy}"]\n')
    state = tmp_path / "state"
    log = state / "toolnexus-bot" / "console.log"
    async with console_in_a_terminal(config, state) as terminal:
        await terminal.expect(f"go to {log}")
        await terminal.expect("toolnexus>")
        terminal.type("/servers\r")
        await terminal.expect(
            "noisy (stdio): unavailable: the server process exited with status 3; its stderr ends: RAW-STDERR-LINE"
        )
        await terminal.expect("toolnexus>")
        terminal.type("\x04")
        with anyio.fail_after(20):
            assert await terminal.process.wait() == 0
    assert terminal.screen.count(b"RAW-STDERR-LINE") == terminal.screen.count(
        b"its stderr ends: RAW-STDERR-LINE"
    )
    assert b"MCP server noisy" not in terminal.screen
    written = log.read_text()
    assert "RAW-STDERR-LINE" in written and "MCP server noisy" in written

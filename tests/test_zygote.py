"""The zygote's bots are the processes the installed command would have been (tests/zygote.py): the environment,
directory and stdio of the request, their own pid for signals, their exit status. Its stdio servers, started by a
bot through `tests/launcher.py`, end as their launcher says and never outlive it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from tests.fakes.servers.exits import BAD_CONFIG
from tests.zygote import EXE, REPO, open_bot, run_bot, run_bot_text, server_command

pytestmark = pytest.mark.anyio


def _marker_config(folder: Path, name: str) -> None:
    (folder / "here.toml").write_text(
        f'[servers.{name}]\ncommand = "python"\nargs = ["-m", "bot.demo_server"]\n'
    )


def test_a_forked_bot_takes_the_environment_and_directory_of_its_request(tmp_path: Path) -> None:
    """`TOOLNEXUS_CONFIG=here.toml` relative to the given directory: the console lists that config's server."""
    _marker_config(tmp_path, "marker")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "TOOLNEXUS_"))}
    done = run_bot_text(
        [str(EXE), "console"],
        input="/servers\n",
        cwd=tmp_path,
        env={**env, "TOOLNEXUS_CONFIG": "here.toml"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "marker (stdio)" in done.stdout and "demo (stdio)" not in done.stdout


async def test_a_forked_bot_survives_sigstop_and_sigcont_and_its_sigkill_is_its_exit_status(
    tmp_path: Path,
) -> None:
    """SIGSTOP and SIGCONT reach the bot's own process and leave it answering; SIGKILL ends it with status -9."""
    _marker_config(tmp_path, "marker")
    async with await open_bot([str(EXE), "console", "--config", "here.toml"], cwd=tmp_path) as bot:
        assert bot.stdin is not None and bot.stdout is not None
        stdout = bot.stdout

        async def answered() -> None:
            seen = b""
            with anyio.fail_after(60):
                while b"marker (stdio)" not in seen:
                    seen += await stdout.receive()

        await bot.stdin.send(b"/servers\n")
        await answered()
        bot.send_signal(signal.SIGSTOP)
        bot.send_signal(signal.SIGCONT)
        await bot.stdin.send(b"/servers\n")
        await answered()
        assert bot.returncode is None
        bot.kill()
        with anyio.fail_after(10):
            assert await bot.wait() == -signal.SIGKILL
        assert bot.returncode == -signal.SIGKILL


async def test_a_forked_bots_exit_status_and_output_are_its_own() -> None:
    """A config error: exit status 2 and the one line on stderr, nothing on stdout."""
    done = await run_bot([str(EXE), "--config", "/nonexistent/bot.toml"], check=False)
    assert (done.returncode, done.stdout) == (2, b"")
    assert done.stderr.decode().startswith("config error: /nonexistent/bot.toml")


async def test_a_forked_servers_exit_status_and_stderr_are_what_its_launcher_shows() -> None:
    """`exits start`: status 3 and its stderr lines, through the launcher as from `python -m` itself."""
    cold = await anyio.run_process(
        [sys.executable, "-m", "tests.fakes.servers.exits", "start"], check=False, cwd=REPO
    )
    forked = await anyio.run_process(
        server_command("tests.fakes.servers.exits", "start"), check=False, cwd=REPO
    )
    assert (forked.returncode, forked.stdout, forked.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert forked.returncode == 3 and BAD_CONFIG in forked.stderr.decode()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
async def test_a_forked_server_ends_with_its_launcher(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGINT is passed on: the server's own KeyboardInterrupt shows on its stderr, and the launcher ends killed
    by the signal that ended the server. A SIGKILL, which cannot be passed on, ends the server too: nothing
    outlives the process the bot sees."""
    pid_file = tmp_path / "pid"
    os.mkfifo(pid_file)  # the server writes its pid into it as it starts
    command = server_command("tests.fakes.servers.hung", str(pid_file))
    async with await anyio.open_process(command, cwd=REPO) as launcher:
        assert launcher.stderr is not None
        with anyio.fail_after(30):
            server = int(await anyio.to_thread.run_sync(pid_file.read_text))
        assert server != launcher.pid
        pidfd = os.pidfd_open(server)
        launcher.send_signal(sig)
        with anyio.fail_after(30):
            assert await launcher.wait() == -sig
            await anyio.wait_readable(pidfd)  # the server's process ended
            stderr = b"".join([chunk async for chunk in launcher.stderr])
        os.close(pidfd)
    assert (b"KeyboardInterrupt" in stderr) == (sig == signal.SIGINT)

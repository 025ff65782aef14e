"""Expected failures of the commands are one line naming what to do (bot/failures.py, bot/cli.py).

The installed command runs against a closed loopback port, the fake Bot API (which refuses a wrong token) and
a port already taken; no traceback unless `--log-level DEBUG`, and never the token.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from pathlib import Path

import anyio
import pytest
from telegram.error import NetworkError

from bot.failures import failure_line
from tests.cli.test_cli import EXE, REPO
from tests.fakes.telegram import FakeTelegram
from tests.ports import closed_port
from tests.zygote import run_bot, server_toml

TOKEN = "123456:TEST-fake-token-for-tests"


def _config(tmp_path: Path, telegram: str) -> Path:
    config = tmp_path / "bot.toml"
    config.write_text(
        f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\nallow_everyone = true\n{telegram}\n'
        "[servers.demo]\n" + server_toml("bot.demo_server")
    )
    return config


async def _run(config: Path, *extra: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": TOKEN}
    with anyio.fail_after(60):
        return await run_bot([str(EXE), "--config", str(config), *extra], env=env, cwd=REPO, check=False)


def _text(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stderr.decode() + done.stdout.decode()


@pytest.mark.anyio
@pytest.mark.slow
async def test_run_without_a_reachable_telegram_is_one_line(tmp_path: Path) -> None:
    """No network (a refused connection): one line naming the host and the key to check, exit 1."""
    config = _config(tmp_path, f'api_base_url = "http://127.0.0.1:{closed_port()}/bot"')
    done = await _run(config)
    assert done.returncode == 1
    assert _text(done).strip() == (
        "error: 127.0.0.1 refused the connection: check telegram.api_base_url and any firewall or proxy"
    )


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_token_telegram_rejects_is_one_line(tmp_path: Path) -> None:
    """The fake Bot API answers 401 to a token it does not know: one line, the token never shown."""
    async with FakeTelegram(bot_id=654321) as fake:
        done = await _run(_config(tmp_path, f'api_base_url = "{fake.base_url}"'))
    assert done.returncode == 1
    lines = _text(done).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: Telegram rejected the bot token: check telegram.token"
    )
    assert TOKEN not in _text(done)


@pytest.mark.anyio
@pytest.mark.slow
async def test_a_webhook_port_in_use_is_one_line(tmp_path: Path) -> None:
    """Webhook mode on a port something else listens on: one line saying so."""
    async with FakeTelegram() as fake:
        with socket.create_server(("127.0.0.1", 0)) as taken:
            port = taken.getsockname()[1]
            config = _config(
                tmp_path,
                f'api_base_url = "{fake.base_url}"\nmode = "webhook"\nwebhook_secret = "s3cret-token"\n'
                f'[web]\nport = {port}\npublic_url = "https://bot.example.com"\n',
            )
            env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
            with anyio.fail_after(60):
                done = await run_bot([str(EXE), "--config", str(config)], env=env, cwd=REPO, check=False)
    assert done.returncode == 1
    assert (
        _text(done).strip().splitlines()[-1].startswith("error: the address to listen on is already in use")
    )
    assert "Traceback" not in _text(done)


@pytest.mark.anyio
@pytest.mark.slow
async def test_with_debug_the_traceback_follows_but_not_the_token(tmp_path: Path) -> None:
    """`--log-level DEBUG` adds the traceback (through the redacting log set-up)."""
    config = _config(tmp_path, f'api_base_url = "http://127.0.0.1:{closed_port()}/bot"')
    done = await _run(config, "--log-level", "DEBUG")
    assert done.returncode == 1
    assert "Traceback" in _text(done) and "refused the connection" in _text(done)
    assert TOKEN not in _text(done)


def test_a_dns_failure_reaching_telegram_names_dns() -> None:
    """A name that does not resolve (as PTB wraps it) is named as a DNS problem, inside an ExceptionGroup too."""
    error = NetworkError("httpx.ConnectError: [Errno -2] Name or service not known")
    error.__cause__ = socket.gaierror(-2, "Name or service not known")
    line = failure_line(ExceptionGroup("run", [error]))
    assert (
        line
        == "cannot find the Telegram Bot API (DNS): check the network connection and telegram.api_base_url"
    )


def test_a_bug_is_not_an_expected_failure() -> None:
    """Anything else keeps its traceback."""
    assert failure_line(KeyError("x")) is None
    assert failure_line(OSError(errno.EADDRINUSE, "Address already in use")) is not None

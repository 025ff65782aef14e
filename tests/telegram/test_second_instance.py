"""A second live bot is refused at start where it cannot work beside the first (bot/store/instances.py): on the
same SQLite file, or polling for the same bot on PostgreSQL. Two bots in webhook mode on PostgreSQL both run.

End to end with real processes: the installed `toolnexus-bot` command against the fake Bot API; the first bot
keeps answering while the second is refused, and after a SIGKILL of the first a new one starts (the places are
locks that end with their process).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest

from tests.fakes.telegram import FakeTelegram, FakeUser
from tests.ports import free_port
from tests.telegram.test_drain import SECRET, bot_process
from tests.telegram.test_restart import ALICE, EXE, REPO
from tests.zygote import run_bot

pytestmark = pytest.mark.anyio

SEVERAL = 'to run several instances, use PostgreSQL ([storage] url) and telegram.mode = "webhook"'


def write_config(
    tmp_path: Path, fake: FakeTelegram, store_url: str, name: str = "bot", web_port: int = 0
) -> Path:
    """A bot with one (unreachable: /help needs none) server; webhook mode on `web_port` when one is given."""
    text = (
        "[telegram]\n"
        'token = "${TELEGRAM_BOT_TOKEN}"\n'
        f'api_base_url = "{fake.base_url}"\n'
        f"allowed_users = [{ALICE}]\n"
    )
    if web_port:
        text += (
            f'mode = "webhook"\nwebhook_secret = "{SECRET}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {web_port}\npublic_url = "https://bot.example.com"\n'
        )
    text += f'[storage]\nurl = "{store_url}"\n[servers.d]\nurl = "http://127.0.0.1:9/mcp"\n'
    config = tmp_path / f"{name}.toml"
    config.write_text(text)
    return config


async def second_start(config: Path, fake: FakeTelegram) -> tuple[int, str]:
    """Start the bot once more; its exit status and what it printed on stderr (it is expected to stop)."""
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
    with anyio.fail_after(120):  # a loaded machine: the bot's start alone may take seconds
        done = await run_bot([str(EXE), "--config", str(config)], env=env, cwd=REPO, check=False)
    return done.returncode, done.stderr.decode()


async def answers_help(fake: FakeTelegram, alice: FakeUser) -> None:
    before = len(fake.messages(alice, from_bot=True))
    await alice.send("/help")
    await fake.wait_for(
        lambda m: m.chat_id == ALICE and len(fake.messages(alice, from_bot=True)) > before, timeout=60
    )


async def test_a_second_polling_bot_is_refused_and_a_restart_after_a_crash_is_not(
    tmp_path: Path, store_url: str
) -> None:
    """Polling on one database (the default set-up on SQLite): the second start exits 1 with one line saying
    what to do; the first keeps answering; once the first is SIGKILLed, a new start runs and answers."""
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, store_url)
        async with bot_process(config, fake) as first:
            await first.logged("is running", timeout=90)
            status, err = await second_start(config, fake)
            assert status == 1, err
            lines = [line for line in err.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: another toolnexus-bot is "), err
            assert SEVERAL in lines[0]
            await answers_help(fake, alice)
            first.process.send_signal(signal.SIGKILL)
            with anyio.fail_after(10):
                await first.process.wait()
        async with bot_process(config, fake) as restarted:
            await restarted.logged("is running", timeout=90)
            await answers_help(fake, alice)


async def test_two_webhook_bots_on_postgresql_both_run(tmp_path: Path, postgresql_url: str) -> None:
    """The fleet's set-up is not refused: two bots in webhook mode on one PostgreSQL database both start."""
    async with FakeTelegram() as fake:
        one = write_config(tmp_path, fake, postgresql_url, "one", free_port())
        two = write_config(tmp_path, fake, postgresql_url, "two", free_port())
        async with bot_process(one, fake) as first, bot_process(two, fake) as second:
            await first.logged("is running", timeout=90)
            await second.logged("is running", timeout=90)
            assert first.process.returncode is None and second.process.returncode is None


async def test_a_second_bot_polling_the_same_token_with_its_own_database_stops_with_one_line(
    tmp_path: Path,
) -> None:
    """Two databases, so the database cannot refuse it: Telegram's 409 Conflict, before the second bot's first
    poll was answered, stops it (exit 1) with one line naming the cause and the fix; the first keeps answering."""
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE, first_name="Alice")
        one = write_config(tmp_path, fake, f"sqlite:///{tmp_path / 'one.db'}", "one")
        two = write_config(tmp_path, fake, f"sqlite:///{tmp_path / 'two.db'}", "two")
        async with bot_process(one, fake) as first:
            await first.logged("is running", timeout=90)
            await answers_help(fake, alice)  # the first has polled: it has been running
            status, err = await second_start(two, fake)
            assert status == 1, err
            lines = [line for line in err.splitlines() if "409" in line or "Conflict" in line]
            assert lines == [err.strip().splitlines()[-1]], err
            assert lines[0].startswith(
                "error: another process polls Telegram for updates with this bot token"
            )
            assert "@BotFather" in lines[0]
            await answers_help(fake, alice)

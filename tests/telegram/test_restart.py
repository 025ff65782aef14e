"""Questions that survive a restart: the bot process killed (SIGKILL) while a question is open, started again.

End to end with real parts only: the installed `toolnexus-bot` command against the fake Bot API, a streamable
HTTP MCP server run as its own process (it outlives the bot), and a database on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from sqlalchemy import select, update

from bot.store import open_engine
from bot.store.tables import rounds
from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.inprocess import toolnexus
from tests.telegram.harness import is_result, result_body
from tests.zygote import open_bot, server_command

REPO = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("toolnexus-bot")
ALICE, BOB = 1001, 1002
GROUP = -5001


@dataclass
class Durable:
    """The durable test server: its URL, and the answers it received (one JSON object per line)."""

    url: str
    log: Path

    def received(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@asynccontextmanager
async def socket_server(
    tmp_path: Path, module: str, *, env: dict[str, str] | None = None, cold: bool = False
) -> AsyncIterator[Durable]:
    """The MCP server `module` (`--fd`, `--log`) in a process of its own, on a socket listening before it starts,
    so it outlives the bot's processes. `cold`: started by the interpreter, not through the tests' zygote."""
    log = tmp_path / "received.jsonl"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        fd = listener.fileno()
        args = ("--fd", str(fd), "--log", str(log))
        command = [sys.executable, "-m", module, *args] if cold else server_command(module, *args)
        async with await anyio.open_process(
            command, env=env, cwd=REPO, pass_fds=[fd], stdout=None, stderr=None
        ) as server:
            try:
                yield Durable(f"http://127.0.0.1:{listener.getsockname()[1]}/mcp", log)
            finally:
                server.terminate()
                await server.wait()


@asynccontextmanager
async def durable_server(tmp_path: Path) -> AsyncIterator[Durable]:
    """`tests.fakes.servers.durable` (its state key fresh)."""
    env = {**os.environ, "DURABLE_STATE_KEY": secrets.token_hex(32)}
    async with socket_server(tmp_path, "tests.fakes.servers.durable", env=env) as server:
        yield server


def write_config(
    tmp_path: Path, fake: FakeTelegram, server: Durable, store_url: str, protocol: str = "auto"
) -> Path:
    config = tmp_path / "bot.toml"
    config.write_text(
        "[telegram]\n"
        'token = "${TELEGRAM_BOT_TOKEN}"\n'
        f'api_base_url = "{fake.base_url}"\n'
        f"allowed_users = [{ALICE}, {BOB}]\n"
        f'[storage]\nurl = "{store_url}"\n'
        f'[servers.d]\nurl = "{server.url}"\nprotocol = "{protocol}"\n'
    )
    return config


@asynccontextmanager
async def bot_process(config: Path, fake: FakeTelegram) -> AsyncIterator[Process]:
    """The installed command, killed on exit unless the test ended it."""
    env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
    process = await open_bot([str(EXE), "--config", str(config)], env=env, cwd=REPO, stdout=None, stderr=None)
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()


async def kill(process: Process) -> None:
    """SIGKILL: nothing runs on the bot's side, no card is settled, no row closed."""
    process.send_signal(signal.SIGKILL)
    with anyio.fail_after(10):
        await process.wait()


def verify_audit(config: Path) -> subprocess.CompletedProcess[str]:
    """`toolnexus-bot audit --verify` (its main in process: the bot's processes are the point, not this one)."""
    return toolnexus("audit", "--config", str(config), "--verify")


async def current_card(fake: FakeTelegram, text: str) -> Msg:
    return await fake.wait_for(lambda m: text in m.text and bool(m.buttons), timeout=30)


@pytest.mark.anyio
async def test_a_question_open_when_the_bot_is_killed_is_answered_after_it_starts_again(
    tmp_path: Path, store_url: str
) -> None:
    """SIGKILL while a 2026-07-28 question waits on its review card; after a restart, Submit on that same old
    card resumes the call: the server receives the answer, the result reaches the person, the audit verifies."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, store_url)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d confirm action=deploy")
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            await kill(bot)
        assert server.received() == []
        async with bot_process(config, fake):
            await alice.press(card, "✅ Submit", timeout=30)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
        assert server.received() == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert "deploy: done" in result_body(result)
        assert await kept_count(store_url) == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


async def answer_text(user: FakeUser, fake: FakeTelegram, field: str, text: str) -> None:
    card = await current_card(fake, field)
    await user.send(text, reply_to=card)


@pytest.mark.anyio
async def test_a_three_field_form_half_filled_before_a_kill_is_finished_after_the_restart(
    tmp_path: Path, store_url: str
) -> None:
    """Two fields answered, SIGKILL, restart: the card asks the third as it did, the answers given before are
    kept, and Submit sends all three to the server; the result reaches the person."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, store_url)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d book restaurant=Luigi")
            card = await current_card(fake, "Book a table at Luigi")
            await alice.press(card, "large")
            await answer_text(alice, fake, "Guests", "4")
            third = await current_card(fake, "Name")
            await kill(bot)
        async with bot_process(config, fake):
            await alice.send("Alice", reply_to=third)
            review = await fake.wait_for(lambda m: "Submit" in str(m.buttons), timeout=30)
            await alice.press(review, "✅ Submit", timeout=30)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
        assert server.received() == [
            {"tool": "book", "action": "accept", "data": {"size": "large", "guests": 4, "name": "Alice"}}
        ]
        assert "Booked a large table for 4 at Luigi for Alice" in result_body(result)
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


async def age_kept_questions(store_url: str) -> int:
    """Move every kept question's deadline into the past (as if the bot had been down longer than it); how
    many there were."""
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.begin() as conn:
            return (await conn.execute(update(rounds).values(deadline=0.0))).rowcount
    finally:
        await engine.dispose()


async def kept_count(store_url: str) -> int:
    engine = await open_engine(store_url, migrate=False)
    try:
        async with engine.connect() as conn:
            return len((await conn.execute(select(rounds.c.id))).all())
    finally:
        await engine.dispose()


@pytest.mark.anyio
async def test_a_question_whose_deadline_passed_while_the_bot_was_down_is_settled_on_its_card(
    tmp_path: Path, store_url: str
) -> None:
    """A kept question past its deadline at start: its card says it expired while the bot was down, loses its
    buttons, a tap gets the expired alert, the row is gone, the audit log records it and verifies."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, store_url)
        async with bot_process(config, fake) as bot:
            await alice.send("/call d confirm action=deploy")
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")  # its redraw comes after the card's place was recorded
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            await kill(bot)
        submit = card.button("✅ Submit").callback_data
        assert await age_kept_questions(store_url) == 1
        async with bot_process(config, fake):
            await fake.wait_for(
                lambda m: m is card and "Expired while the bot was down" in m.text, timeout=30
            )
            assert not card.buttons
            assert submit is not None
            alert = await alice.press_data(card, submit, timeout=30)
            assert "expired" in (alert.text or "")
        assert await kept_count(store_url) == 0
        assert server.received() == []
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr
        events = toolnexus("audit", "--config", str(config)).stdout
        expired = [row for row in map(json.loads, events.splitlines()) if row["event"] == "expired"]
        assert [row["detail"]["outcome"] for row in expired] == ["expired_while_down"]


@pytest.mark.anyio
async def test_a_legacy_question_lost_in_a_restart_says_so_and_runs_again_only_for_its_person(
    tmp_path: Path, store_url: str
) -> None:
    """A 2025-era question open at SIGKILL died with its connection: after the restart its card says so, with
    Run again; another person's tap is refused with an alert, the caller's runs the same call with the same
    arguments, which asks again and reaches the server."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        bob = fake.user(id=BOB, first_name="Bob")
        fake.group(GROUP, title="Ops", members=[alice, bob])
        config = write_config(tmp_path, fake, server, store_url, protocol="legacy")
        async with bot_process(config, fake) as bot:
            await alice.send("/call d confirm action=deploy", chat=GROUP)
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")  # its redraw comes after the card's place was recorded
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            await kill(bot)
        async with bot_process(config, fake):
            await fake.wait_for(
                lambda m: m is card and "the server's question was lost" in m.text and bool(m.buttons),
                timeout=30,
            )
            assert card.buttons == ["🔁 Run again"]
            refused = await bob.press(card, "🔁 Run again", timeout=30)
            assert refused.show_alert and "Only the person who started the call" in (refused.text or "")
            await alice.press(card, "🔁 Run again", timeout=30)
            again = await fake.wait_for(
                lambda m: m is not card and "Really deploy?" in m.text and bool(m.buttons), timeout=30
            )
            await alice.press(again, "Yes")
            await fake.wait_for(lambda m: m is again and "Submit" in str(m.buttons))
            await alice.press(again, "✅ Submit")
            result = await fake.wait_for(
                lambda m: m.chat_id == GROUP and "deploy: done" in m.text, timeout=30
            )
        assert "deploy: done" in result.text
        assert server.received() == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert await kept_count(store_url) == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.anyio
async def test_a_round_of_two_questions_half_answered_before_a_kill_sends_both_answers_after_it(
    tmp_path: Path, store_url: str
) -> None:
    """One of a round's two cards answered, SIGKILL, restart: the answer given before is kept, the other card
    still works, and the round goes back with both answers."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, store_url)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d pair")
            left = await current_card(fake, "Pair: left?")
            right = await current_card(fake, "Pair: right?")
            await alice.press(left, "Yes")
            await fake.wait_for(lambda m: m is left and "Submit" in str(m.buttons))
            await alice.press(left, "✅ Submit")
            await fake.wait_for(lambda m: m is left and not m.buttons)
            await kill(bot)
        async with bot_process(config, fake):
            await alice.press(right, "No", timeout=30)
            await fake.wait_for(lambda m: m is right and "Submit" in str(m.buttons))
            await alice.press(right, "✅ Submit")
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
        assert server.received() == [
            {"tool": "pair", "action": "accept", "data": {"left": {"ok": True}, "right": {"ok": False}}}
        ]
        assert "left={'ok': True} right={'ok': False}" in result_body(result)
        assert await kept_count(store_url) == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr

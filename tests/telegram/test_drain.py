"""A deploy loses nothing: the bot process stopped with SIGTERM drains, exits, and the next process takes up what
was open (docs/fleet.md).

End to end with real parts only, as the SIGKILL restart tests (`test_restart.py`, `test_approvals_restart.py`):
the installed `toolnexus-bot` command against the fake Bot API, a streamable HTTP MCP server in its own process
that outlives the bot (its `requestState` sealed with a kept key), a stdio server for approvals, and the
database on SQLite (the first test on PostgreSQL too). `[run] drain_s` is short; the tests wait on the bot's log
lines and on what Telegram and the servers see, never on the clock.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from anyio.abc import Process

from tests.fakes.servers.oauth import follow, serve_protected, sign_in
from tests.fakes.telegram import FakeTelegram, Msg
from tests.ports import free_port
from tests.store.test_signin import CONSENT, KEY, PUBLIC, is_sign_in_card
from tests.telegram.harness import is_result, result_body
from tests.telegram.test_approvals_restart import ledger_lines
from tests.telegram.test_restart import (
    ALICE,
    BOB,
    EXE,
    GROUP,
    REPO,
    Durable,
    current_card,
    durable_server,
    kept_count,
    verify_audit,
)
from tests.zygote import open_bot, server_toml

pytestmark = pytest.mark.anyio

CAROL, DAVE = 3003, 3004
OPS = -7001
SECRET = "drain-webhook-secret"
LOST = "the server's question was lost"
CANCELLED = {"tool": "confirm", "action": "cancel", "data": None}
"""What the server hears of a 2025-era question lost at a drain's end."""


class Bot:
    """A running bot process and the lines it logged so far."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._logged = anyio.Event()

    async def read(self) -> None:
        assert self.process.stderr is not None
        pending = b""
        async for chunk in self.process.stderr:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            self.lines += [line.decode(errors="replace") for line in complete]
            self._logged.set()
            self._logged = anyio.Event()

    async def logged(self, text: str, timeout: float = 30) -> str:  # noqa: ASYNC109 - like FakeTelegram.wait_for
        """Wait for a log line containing `text`."""
        with anyio.fail_after(timeout):
            while True:
                found = next((line for line in self.lines if text in line), None)
                if found is not None:
                    return found
                await self._logged.wait()

    async def terminate(self) -> int:
        """SIGTERM (a deploy), and the exit status once the bot has exited."""
        self.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            return await self.process.wait()


@asynccontextmanager
async def bot_process(config: Path, fake: FakeTelegram, **env: str) -> AsyncIterator[Bot]:
    """The installed command with its log read as it runs; killed on exit unless the test ended it."""
    environ = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token, **env}
    process = await open_bot([str(EXE), "--config", str(config)], env=environ, cwd=REPO, stdout=None)
    bot = Bot(process)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(bot.read)
            try:
                yield bot
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
    finally:
        if process.returncode is None:
            process.kill()


def write_config(
    tmp_path: Path,
    fake: FakeTelegram,
    server: Durable,
    store_url: str | None = None,
    *,
    protocol: str = "auto",
    drain_s: float = 3,
    web_port: int | None = None,
    extra: str = "",
) -> Path:
    config = tmp_path / "bot.toml"
    text = (
        "[telegram]\n"
        'token = "${TELEGRAM_BOT_TOKEN}"\n'
        f'api_base_url = "{fake.base_url}"\n'
        f"allowed_users = [{ALICE}, {BOB}]\n"
    )
    if web_port is not None:
        text += (
            f'mode = "webhook"\nwebhook_secret = "{SECRET}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {web_port}\npublic_url = "https://bot.example.com"\n'
        )
    text += (
        f'[storage]\nurl = "{store_url or "sqlite:///" + str(tmp_path / "bot.db")}"\n'
        f"[run]\ndrain_s = {drain_s}\n"
        f'[servers.d]\nurl = "{server.url}"\nprotocol = "{protocol}"\n'
    ) + extra
    config.write_text(text)
    return config


def unchanged(card: Msg, edits: int) -> bool:
    """The card was not touched since it had `edits` edits: its buttons still work for the next process."""
    return card.edit_count == edits and bool(card.buttons)


async def test_a_question_open_at_sigterm_is_answered_on_its_card_after_the_restart(
    tmp_path: Path, store_url: str
) -> None:
    """SIGTERM while a 2026-07-28 question waits on its review card: the bot exits 0 without touching the card
    or telling the server anything; after the restart Submit on that card resumes the call, the server receives
    the answer once, the person the result, and the audit chain verifies."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, store_url)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d confirm action=deploy")
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            edits = card.edit_count
            assert await bot.terminate() == 0
        assert unchanged(card, edits)
        assert server.received() == []
        assert await kept_count(store_url) == 1
        await bot.logged("draining: done; 1 call(s) wait")
        async with bot_process(config, fake):
            await alice.press(card, "✅ Submit", timeout=30)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
        assert server.received() == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert "deploy: done" in result_body(result)
        assert await kept_count(store_url) == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


async def test_a_three_field_form_half_filled_at_sigterm_goes_on_where_it_stood(tmp_path: Path) -> None:
    """Two of three fields answered, SIGTERM, restart: the card asks the third as it did, the two answers are
    kept, and Submit sends all three."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d book restaurant=Luigi")
            card = await current_card(fake, "Book a table at Luigi")
            await alice.press(card, "large")
            guests = await current_card(fake, "Guests")
            await alice.send("4", reply_to=guests)
            third = await current_card(fake, "Name")
            edits = third.edit_count
            assert await bot.terminate() == 0
        assert unchanged(third, edits) and "Name" in third.text
        assert server.received() == []
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


async def test_an_approval_half_given_at_sigterm_runs_its_call_once_after_the_restart(tmp_path: Path) -> None:
    """Bob approves (one of two), SIGTERM: the bot exits 0 saying nothing to Alice and leaving the card live;
    after the restart Carol approves on that card and the call runs exactly once, its result reaching Alice."""
    db, ledger, config = tmp_path / "bot.db", tmp_path / "ledger.jsonl", tmp_path / "bot.toml"
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE, first_name="Alice")
        bob = fake.user(id=BOB, first_name="Bob")
        carol = fake.user(id=CAROL, first_name="Carol")
        dave = fake.user(id=DAVE, first_name="Dave")
        fake.group(OPS, title="On-call", members=[alice, bob, carol, dave])
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
            f"allowed_users = [{ALICE}, {BOB}]\n"
            f'[storage]\nurl = "sqlite:///{db}"\n[run]\ndrain_s = 3\n'
            "[servers.prod]\n"
            + server_toml("tests.fakes.servers.ledger", str(ledger))
            + f'[[approvals]]\nservers = ["prod"]\ntools = ["deploy"]\napprovers = [{BOB}, {CAROL}, {DAVE}]\n'
            f"quorum = 2\nchat = {OPS}\n"
        )
        async with bot_process(config, fake) as bot:
            await alice.send("/call prod deploy service=web version=1.2.3")
            card = await fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=30)
            await bob.press(card, "✅ Approve", timeout=30)
            await fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text, timeout=30)
            edits = card.edit_count
            assert await bot.terminate() == 0
        assert unchanged(card, edits)
        assert not [m.text for m in fake.messages(alice, from_bot=True) if "stopping" in m.text]
        assert ledger_lines(ledger) == []
        await bot.logged("draining: done; 1 call(s) wait")
        async with bot_process(config, fake):
            answer = await carol.press(card, "✅ Approve", timeout=60)
            assert not answer.show_alert, answer.text
            result = await fake.wait_for(
                lambda m: m.chat_id == ALICE and "deployed web 1.2.3" in m.text, timeout=60
            )
            await fake.wait_for(lambda m: m is card and not m.reply_markup, timeout=30)
        assert "✅" in result.text
        assert ledger_lines(ledger) == [
            {"tool": "deploy", "arguments": {"service": "web", "version": "1.2.3"}}
        ]
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


async def test_a_legacy_question_answered_during_the_drain_completes(tmp_path: Path) -> None:
    """A 2025-era question cannot outlive its connection, so the drain waits for it and still takes taps on its
    card: answered during the drain, the call completes, the result reaches the person, then the bot exits 0."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, protocol="legacy", drain_s=60)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d confirm action=deploy")
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            bot.process.send_signal(signal.SIGTERM)
            await bot.logged("draining (SIGTERM)")
            await alice.press(card, "✅ Submit", timeout=30)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
            with anyio.fail_after(30):
                assert await bot.process.wait() == 0
        assert "deploy: done" in result_body(result)
        assert server.received() == [{"tool": "confirm", "action": "accept", "data": {"sure": True}}]
        assert await kept_count(f"sqlite:///{tmp_path / 'bot.db'}") == 0


async def test_a_legacy_question_not_answered_in_the_drain_is_cancelled_and_its_card_says_lost_with_run_again(
    tmp_path: Path,
) -> None:
    """A 2025-era question nobody answers within `drain_s` cannot wait for the next process: as the drain ends its
    server gets `cancel` and its card says at once that the question was lost, with Run again, and nothing else
    is posted; the bot exits 0. In the next process the card is as the drain left it, another person's tap on
    Run again is refused, and the caller's runs the same call again for her, which asks again and completes."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        bob = fake.user(id=BOB, first_name="Bob")
        fake.group(GROUP, title="Ops", members=[alice, bob])
        config = write_config(tmp_path, fake, server, protocol="legacy", drain_s=2)
        async with bot_process(config, fake) as bot:
            await alice.send("/call d confirm action=deploy", chat=GROUP)
            card = await current_card(fake, "Really deploy?")
            await alice.press(card, "Yes")
            await fake.wait_for(lambda m: m is card and "Submit" in str(m.buttons))
            bot.process.send_signal(signal.SIGTERM)
            await fake.wait_for(lambda m: m is card and LOST in m.text and bool(m.buttons), timeout=30)
            with anyio.fail_after(30):
                assert await bot.process.wait() == 0
        await bot.logged("draining: 1 2025-era question(s) lost")
        assert card.buttons == ["🔁 Run again"]
        assert server.received() == [CANCELLED]
        assert [m for m in fake.messages(GROUP, from_bot=True) if m is not card] == []
        edits = card.edit_count
        async with bot_process(config, fake):
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
        assert card.edit_count == edits and LOST in card.text
        assert "deploy: done" in result.text
        assert server.received() == [
            CANCELLED,
            {"tool": "confirm", "action": "accept", "data": {"sure": True}},
        ]
        assert await kept_count(f"sqlite:///{tmp_path / 'bot.db'}") == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr


async def test_a_legacy_question_whose_answers_wait_for_approvers_is_lost_at_the_drain_with_a_working_run_again(
    tmp_path: Path,
) -> None:
    """Under an approval rule of gate "answers" (an answer waits for approvers before it is written), a 2025-era
    question lost at the drain's end keeps its row all the same: the server hears `cancel`, and Run again on its
    card starts the call again in the next process."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        gate = (
            f'[[approvals]]\nservers = ["d"]\ntools = ["confirm"]\napprovers = [{CAROL}]\ngate = "answers"\n'
        )
        config = write_config(tmp_path, fake, server, protocol="legacy", drain_s=2, extra=gate)
        async with bot_process(config, fake) as bot:
            await alice.send("/call d confirm action=deploy")
            card = await current_card(fake, "Really deploy?")
            assert await bot.terminate() == 0
        assert LOST in card.text and card.buttons == ["🔁 Run again"]
        assert server.received() == [CANCELLED]
        async with bot_process(config, fake):
            tapped = await alice.press(card, "🔁 Run again", timeout=30)
            assert not tapped.show_alert, tapped.text
            await fake.wait_for(
                lambda m: m is not card and "Really deploy?" in m.text and bool(m.buttons), timeout=30
            )


async def test_an_update_sent_while_the_bot_drains_is_handled_by_the_next_process(tmp_path: Path) -> None:
    """Polling: while the bot drains (a 2025-era question keeps it waiting), a new command stays in Telegram's
    queue; the draining process does not take it, the next one does."""
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, protocol="legacy", drain_s=3)
        async with bot_process(config, fake) as bot:
            await alice.send("/call d confirm action=deploy")
            await current_card(fake, "Really deploy?")
            bot.process.send_signal(signal.SIGTERM)
            await bot.logged("draining (SIGTERM)")
            await alice.send("/call d confirm action=rollback")
            await bot.logged("draining: new work waits in Telegram")
            with anyio.fail_after(30):
                assert await bot.process.wait() == 0
        assert not [m for m in fake.messages(alice, from_bot=True) if "rollback" in m.text]
        assert fake.pending_updates, "the command was confirmed by the draining process"
        async with bot_process(config, fake):
            await current_card(fake, "Really rollback?")
        assert server.received() == [CANCELLED]  # the deploy's question, lost at the drain's end


async def healthz(port: int) -> tuple[int, dict[str, str]]:
    async with httpx.AsyncClient(trust_env=False) as client:
        response = await client.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    return response.status_code, response.json()


async def test_a_webhook_delivery_during_the_drain_gets_503_and_is_handled_after_the_restart(
    tmp_path: Path,
) -> None:
    """Webhook: from the first moment of the drain /healthz answers 503; a delivery during the drain gets 503,
    and Telegram's next attempt reaches the next process, which handles it."""
    port = free_port()
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, protocol="legacy", drain_s=3, web_port=port)
        fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=SECRET, retry=True)
        async with bot_process(config, fake) as bot:
            await bot.logged("is running")
            assert (await healthz(port))[0] == 200
            await alice.send("/call d confirm action=deploy")
            await current_card(fake, "Really deploy?")
            bot.process.send_signal(signal.SIGTERM)
            await bot.logged("draining (SIGTERM)")
            assert await healthz(port) == (503, {"bot": "draining", "telegram": "reachable"})
            await alice.send("/call d confirm action=rollback")
            refused = await fake.wait_for_attempt(lambda _, status: status == 503, timeout=30)
            with anyio.fail_after(30):
                assert await bot.process.wait() == 0
        assert not [m for m in fake.messages(alice, from_bot=True) if "rollback" in m.text]
        async with bot_process(config, fake):
            await current_card(fake, "Really rollback?")
        assert (refused[0], 200) in fake.webhook_attempts
        assert server.received() == [CANCELLED]


@pytest.mark.parametrize("how", ["sigterm", "crash"])
async def test_a_sign_in_waiting_for_its_browser_at_sigterm_or_a_crash_is_asked_again_with_a_fresh_link(
    tmp_path: Path, how: str
) -> None:
    """SIGTERM while a consented sign-in card waits for the browser: the bot exits 0 leaving the card as it was
    (after a crash, SIGKILL, the card is as it was too).
    The SDK keeps the flow's PKCE verifier in the process, so the next one cannot finish that flow: it says on the
    card that the link no longer works and sends a new sign-in card below; the old link's return is refused,
    the new one signs the person in (the next call runs without asking), and the audit chain verifies."""
    port = free_port()
    local = f"http://127.0.0.1:{port}"
    async with FakeTelegram() as fake, serve_protected() as (auth, url):
        alice = fake.user(id=ALICE, first_name="Alice")
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
            f"allowed_users = [{ALICE}]\n"
            f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "{PUBLIC}"\n'
            f'[storage]\nurl = "sqlite:///{tmp_path / "bot.db"}"\nsecret_key = "{KEY}"\n[run]\ndrain_s = 3\n'
            f'[servers.gh]\nurl = "{url}"\nauth = "oauth"\n'
        )
        async with bot_process(config, fake) as bot:
            await alice.send("/call gh whoami")
            card = await fake.wait_for(is_sign_in_card(ALICE), timeout=30)
            await alice.press(card, CONSENT)
            await fake.wait_for(lambda m: m is card and "Consent given" in m.text)
            old_link = card.button(CONSENT).url
            assert old_link is not None
            edits = card.edit_count
            if how == "sigterm":
                assert await bot.terminate() == 0
            else:
                bot.process.kill()
                await bot.process.wait()
        assert unchanged(card, edits)
        assert await kept_count(f"sqlite:///{tmp_path / 'bot.db'}") == 1
        old_back = await sign_in(old_link, "alice")  # the browser comes back after the process is gone
        async with bot_process(config, fake):
            await fake.wait_for(
                lambda m: m is card and "this link no longer works" in m.text and not m.buttons, timeout=30
            )
            assert "send your command again" in card.text
            fresh = await fake.wait_for(lambda m: m is not card and is_sign_in_card(ALICE)(m), timeout=30)
            assert fresh.message_id > card.message_id
            refused = await follow(old_back, local)
            assert refused.status_code == 400 and "unknown" in refused.text
            await alice.press(fresh, CONSENT)
            await fake.wait_for(lambda m: m is fresh and "Consent given" in m.text)
            new_link = fresh.button(CONSENT).url
            assert new_link is not None and new_link != old_link
            page = await follow(await sign_in(new_link, "alice"), local)
            assert page.status_code == 200 and "You can go back to Telegram" in page.text
            await fake.wait_for(lambda m: m is fresh and "Signed in to gh" in m.text, timeout=30)
            await alice.send("/call gh whoami")
            await fake.wait_for(lambda m: m.chat_id == ALICE and "you are alice" in m.text, timeout=30)
        assert auth.grants["authorization_code"] == 1 and auth.subjects_seen == ["alice"]
        assert await kept_count(f"sqlite:///{tmp_path / 'bot.db'}") == 0
        audit = verify_audit(config)
        assert audit.returncode == 0, audit.stdout + audit.stderr

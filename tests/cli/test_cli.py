"""The installed `toolnexus-bot` command as a person runs it: console through a pipe, check, bad configs, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bot.cli import main
from tests.fakes.telegram import FakeTelegram
from tests.ports import free_port
from tests.zygote import open_bot, run_bot, run_bot_text, server_toml

REPO = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("toolnexus-bot")
TOKEN_LINE = '[telegram]\ntoken = "123456:' + "A" * 35 + '"\n'
"""`check` validates the config as `run` does, so its configs carry a token (never used: check talks to no Telegram)."""


def run(*args: str, stdin: str = "", env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "TOOLNEXUS_"))}
    return run_bot_text([str(EXE), *args], input=stdin, cwd=REPO, env={**environ, **(env or {})}, timeout=60)


def main_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """`toolnexus-bot ARGS` as `bot.cli.main` in this process, in the environment `run` gives the command: its
    exit status, stdout and stderr. For what ends before anything starts (a config error), where a process
    would only add its start-up time."""
    for name in os.environ:
        if name.startswith(("TELEGRAM_", "TOOLNEXUS_")):
            monkeypatch.delenv(name)
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse refuses an option's value (exit status 2) before anything starts
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def test_console_completes_a_deploy_through_a_pipe() -> None:
    """`printf ... | toolnexus-bot console`: choose staging, submit, confirm yes, submit -> deployed."""
    done = run("console", stdin="/call demo deploy\n1\ns\ny\ns\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "Where should web be deployed?" in done.stdout
    assert "Deployed web to staging" in done.stdout


def test_console_re_asks_bad_answers_and_reports_decline() -> None:
    """A bad answer is re-asked with the reason; /decline reaches the tool."""
    done = run("console", stdin="/call demo book_table restaurant=Luigi\n99\n/decline\n")
    assert done.returncode == 0, done.stderr
    assert "12" in done.stdout.split("99", 1)[-1] or "between 1 and 12" in done.stdout
    assert "Booking declined" in done.stdout


def test_console_cancel_while_a_link_s_flow_is_awaited_cancels_the_call() -> None:
    """A link opened (URL elicitation, "done? >"), then `/cancel` instead of Enter: the call waiting for the
    flow ends cancelled at once, and the next command runs."""
    done = run("console", stdin="/call demo sync_calendar\ny\n/cancel\n/servers\n/quit\n")
    assert done.returncode == 0, done.stderr
    after = done.stdout.split("Press Enter when you have finished there (or /cancel).", 1)[1]
    assert after.lstrip().startswith("Cancelled.")
    assert "demo (stdio): ok" in after


def test_console_lists_servers_and_tools() -> None:
    """/servers and /tools work without any config (the demo server is the default)."""
    done = run("console", stdin="/servers\n/tools\n")
    assert done.returncode == 0, done.stderr
    assert "demo (stdio): ok, 6 tools" in done.stdout
    assert "demo deploy" in done.stdout and "demo book_table" in done.stdout


def test_check_reports_the_example_config_ok_with_its_tool_count() -> None:
    """`check --config config.example.toml` connects to the demo server (with a token, as `run` needs)."""
    done = run("check", "--config", "config.example.toml", env={"TELEGRAM_BOT_TOKEN": "123456:" + "A" * 35})
    assert done.returncode == 0, done.stderr
    assert (
        "demo: ok (protocol 2026-07-28, 6 tools; shared: calls of different people run concurrently)"
        in done.stdout
    )


def test_check_fails_with_status_1_for_an_unreachable_server(tmp_path: Path) -> None:
    """A server that cannot start is reported on its own line; exit status 1."""
    config = tmp_path / "c.toml"
    config.write_text(
        f'{TOKEN_LINE}[servers.gone]\ncommand = "/nonexistent/server"\n[servers.demo]\n'
        + server_toml("bot.demo_server")
    )
    done = run("check", "--config", str(config))
    assert done.returncode == 1
    assert "gone: FAILED:" in done.stdout and "demo: ok" in done.stdout


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[servers.demo]\ncomand = "python"\n', "servers.demo.comand: unknown key"),
        ("[servers.demo]\ncommand = 5\n", "servers.demo.command"),
        ('[servers.demo]\ncommand = "python"\nurl = "https://x.example/mcp"\n', "servers.demo"),
        ('[servers.r]\nurl = "not a url"\n', "servers.r.url"),
        (
            '[telegram]\ntoken = "${TOOLNEXUS_TEST_MISSING}"\n[servers.demo]\ncommand = "python"\n',
            "telegram.token",
        ),
    ],
)
def test_a_bad_config_exits_2_naming_the_key(
    tmp_path: Path,
    toml: str,
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Unknown key, wrong type, both command and url, a bad URL, a missing token variable: exit 2, key named.
    In process (`main` with the command's arguments): the config is refused before anything starts."""
    config = tmp_path / "bad.toml"
    config.write_text(toml)
    code, _, stderr = main_in_process(monkeypatch, capsys, "--config", str(config))
    assert code == 2
    assert expected in stderr


@pytest.mark.anyio
async def test_the_bot_completes_a_deploy_and_sigint_settles_pending_cards(tmp_path: Path) -> None:
    """The installed command against the fake Bot API and the demo server; SIGINT (Ctrl-C, the hard stop) cancels
    what is pending. (SIGTERM drains and keeps it: tests/telegram/test_drain.py.)"""
    async with FakeTelegram() as fake:
        alice = fake.user(id=1001, first_name="Alice")
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\nallowed_users = [1001]\n'
            "[servers.demo]\n" + server_toml("bot.demo_server")
        )
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
        async with await open_bot([str(EXE), "--config", str(config)], env=env, cwd=REPO) as proc:
            await alice.send("/call demo deploy")
            card = await fake.wait_for(lambda m: "Where should" in m.text and bool(m.buttons), timeout=30)
            await alice.press(card, "Production (live)")
            await fake.wait_for(lambda m: m is card and "Please review" in m.text)
            await alice.press(card, "✅ Submit")
            confirm = await fake.wait_for(
                lambda m: "Deploy web to production?" in m.text and bool(m.buttons), timeout=15
            )
            proc.send_signal(signal.SIGINT)
            with anyio.fail_after(10):
                code = await proc.wait()
            stderr = (await proc.stderr.receive()).decode() if proc.stderr else ""
        assert code == 0
        assert "stopping" in confirm.text and not confirm.buttons
        assert await fake.wait_for(lambda m: "Deployment cancelled" in m.text)
        assert fake.token not in stderr
        assert not fake.unexpected_errors


@pytest.mark.anyio
async def test_webhook_mode_logs_neither_secret_at_debug_and_stops_on_sigterm(tmp_path: Path) -> None:
    """The installed command in webhook mode with --log-level DEBUG answers a delivered update, never prints
    the token or the webhook secret (PTB logs setWebhook's parameters at DEBUG), and exits 0 on SIGTERM."""
    secret = "webhook-secret-never-logged"
    async with FakeTelegram() as fake:
        alice = fake.user(id=1001, first_name="Alice")
        port = free_port()
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\nallowed_users = [1001]\n'
            'mode = "webhook"\nwebhook_secret = "${TELEGRAM_WEBHOOK_SECRET}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "https://bot.example.com"\n'
            "[servers.demo]\n" + server_toml("bot.demo_server")
        )
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token, "TELEGRAM_WEBHOOK_SECRET": secret}
        logged = bytearray()
        command = [str(EXE), "--config", str(config), "--log-level", "DEBUG"]
        async with (
            await open_bot(command, env=env, cwd=REPO) as proc,
            anyio.create_task_group() as tg,
        ):

            async def drain() -> None:  # DEBUG output would fill the pipe and block the bot
                assert proc.stderr is not None
                async for chunk in proc.stderr:
                    logged.extend(chunk)

            tg.start_soon(drain)
            hook = await fake.wait_for_call("setWebhook", timeout=30)
            assert hook["url"] == "https://bot.example.com/telegram" and hook["secret_token"] == secret
            fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=secret)
            await alice.send("/help")
            await fake.next_message(alice, containing="/tools", timeout=15)
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                code = await proc.wait()
    stderr = logged.decode()
    assert code == 0
    assert " DEBUG " in stderr  # DEBUG logging was on
    assert secret not in stderr
    assert fake.token not in stderr


def other_demo_config(tmp_path: Path) -> Path:
    """A config whose one server is the demo under another name, so output shows which config was read."""
    config = tmp_path / "other.toml"
    config.write_text(f"{TOKEN_LINE}[servers.other]\n" + server_toml("bot.demo_server"))
    return config


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_config_is_read_whether_given_before_or_after_the_subcommand(tmp_path: Path, before: bool) -> None:
    """`--config x.toml console` and `console --config x.toml` both use x.toml, not the bundled demo."""
    option = ["--config", str(other_demo_config(tmp_path))]
    done = run(*([*option, "console"] if before else ["console", *option]), stdin="/servers\n")
    assert done.returncode == 0, done.stderr
    assert "other (stdio): ok" in done.stdout and "demo (stdio)" not in done.stdout


@pytest.mark.parametrize("before", [True, False], ids=["before", "after"])
def test_log_level_is_kept_whether_given_before_or_after_the_subcommand(tmp_path: Path, before: bool) -> None:
    """`--log-level DEBUG check` and `check --log-level DEBUG` both log at DEBUG, starting with the event loop
    every command runs on (uvloop: bot/cli.py `LOOP`)."""
    option, config = ["--log-level", "DEBUG"], ["--config", str(other_demo_config(tmp_path))]
    done = run(*([*option, "check", *config] if before else ["check", *config, *option]))
    assert done.returncode == 0, done.stderr
    assert " DEBUG bot.cli: event loop: uvloop.Loop\n" in done.stderr


@pytest.mark.anyio
@pytest.mark.parametrize("status", [401, 404])
async def test_a_token_the_bot_api_rejects_at_start_gives_one_line_without_it(
    tmp_path: Path, status: int
) -> None:
    """401 (a wrong token) or 404 (a wrong api_base_url) at start: exit 1 and one line naming the keys to
    check; no token, no traceback."""
    async with FakeTelegram() as fake:
        # 401: a wrong token; 404: what Telegram answers any path under a mistyped api_base_url
        token = fake.token if status == 404 else "999999:WRONG-token-never-printed"
        if status == 404:
            fake.fail_next("getMe", 404, "Not Found")
        base_url = fake.base_url
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{base_url}"\nallowed_users = [1001]\n'
            "[servers.demo]\n" + server_toml("bot.demo_server")
        )
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": token}
        done = await run_bot([str(EXE), "--config", str(config)], env=env, cwd=REPO, check=False)
        rejected = [e.status for e in fake.errors if e.method == "getMe"]
    stderr = done.stderr.decode()
    assert token not in stderr and "Traceback" not in stderr
    assert done.returncode == 1
    assert stderr.count("\n") == 1 and stderr.startswith("error: Telegram rejected the bot token"), stderr
    assert "telegram.api_base_url" in stderr
    assert rejected == [status]


@pytest.mark.anyio
async def test_debug_logging_shows_neither_the_webhook_secret_nor_what_people_type(tmp_path: Path) -> None:
    """`--log-level DEBUG` in webhook mode through a booking form: stderr has DEBUG lines, but not the
    webhook secret, the token, or the answer Alice typed."""
    secret, typed = "hook-SECRET-never-logged", "zq81x-seven-guests"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    async with FakeTelegram() as fake:
        alice = fake.user(id=1001, first_name="Alice")
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\nallowed_users = [1001]\n'
            f'mode = "webhook"\nwebhook_secret = "{secret}"\n'
            f'[web]\nlisten = "127.0.0.1"\nport = {port}\npublic_url = "https://bot.example.com"\n'
            "[servers.demo]\n" + server_toml("bot.demo_server")
        )
        env = {**os.environ, "TELEGRAM_BOT_TOKEN": fake.token}
        command = [str(EXE), "--log-level", "DEBUG", "--config", str(config)]
        log = tmp_path / "stderr.log"
        with log.open("wb") as log_file:
            proc = await open_bot(command, env=env, cwd=REPO, stdout=None, stderr=log_file)
        try:
            await fake.wait_for_call("setWebhook", timeout=30)
            fake.deliver_via_webhook(f"http://127.0.0.1:{port}/telegram", secret_token=secret)
            await alice.send("/call demo book_table restaurant=Luigi")
            card = await fake.wait_for(lambda m: "Party size" in m.text, timeout=30)
            await alice.send(typed, reply_to=card)
            await fake.wait_for(lambda m: m.message_id > card.message_id and "1 and 12" in m.text)
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(10):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert fake.webhook["secret_token"] == secret
    stderr = log.read_text()
    assert " DEBUG " in stderr
    assert secret not in stderr and typed not in stderr and fake.token not in stderr


def test_check_says_an_unkeyed_audit_chain_only_shows_accidents(tmp_path: Path) -> None:
    """A database without `[storage] secret_key`: `check` says what its audit chain is then worth (not only the
    running bot's log); with a key it says nothing of the kind."""
    server = "[servers.demo]\n" + server_toml("bot.demo_server")
    storage = f'[storage]\nurl = "sqlite:///{tmp_path / "t.db"}"\n'
    config = tmp_path / "c.toml"
    config.write_text(TOKEN_LINE + storage + server)
    done = run("check", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert (
        "audit log: no key ([storage] secret_key): its hash chain shows accidents, not tampering"
        in done.stdout
    )
    key = 'secret_key = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="\n'
    config.write_text(TOKEN_LINE + storage + key + server)
    keyed = run("check", "--config", str(config))
    assert keyed.returncode == 0, keyed.stderr
    assert "accidents" not in keyed.stdout and "demo: ok" in keyed.stdout


def test_console_says_an_empty_line_at_a_required_choice_is_no_answer_and_asks_again() -> None:
    """Enter alone at the deploy's environment (required, nothing to keep): one line saying the field is required
    and what to type, not "is not one of the options" about a value that is not there; then it goes on."""
    done = run("console", stdin="/call demo deploy\n\n1\ns\ny\ns\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "an empty line is not an answer: Environment is required: type one of 1 to 2" in done.stdout
    assert "not one of the options" not in done.stdout
    assert "Deployed web to staging" in done.stdout


def test_console_refuses_a_command_typed_during_a_question_and_never_takes_it_as_the_answer() -> None:
    """`/call ...` typed at a number question (and at a text one) is a command: refused with how to leave the
    question, the question stays; the server never gets it as a value."""
    stdin = "/call demo book_table restaurant=Luigi\n/call demo echo text=hi\n/decline\n/quit\n"
    done = run("console", stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert (
        "/call is a command, not an answer: answer this question first, or /decline or /cancel it"
        in done.stdout
    )
    assert "Booking declined" in done.stdout

"""A stdio server whose process exits, at start or in the middle of a call: the chat says how it ended (its
exit status and the end of its stderr), as `toolnexus-bot check` does, never a bare "Connection closed". Real
PTB against the fake Bot API, real server processes (tests/fakes/servers/exits.py)."""

from __future__ import annotations

import logging
import sys

import pytest

from tests.fakes.servers.exits import BAD_CONFIG, DYING, SECRET_VAR
from tests.telegram.harness import bot_scene

pytestmark = pytest.mark.anyio

SECRET = "s3cr3t-value-4711"
EXITS_AT_START = {
    "command": sys.executable,
    "args": ["-m", "tests.fakes.servers.exits", "start"],
    "env": {SECRET_VAR: SECRET},
}
DIES_MID_CALL = {"command": sys.executable, "args": ["-m", "tests.fakes.servers.exits"]}


async def test_a_server_that_exits_at_start_shows_its_exit_status_and_stderr_in_the_call_and_in_servers() -> (
    None
):
    """Exit status 3 with "boom: bad config" on stderr: the call's failure and /servers both say so."""
    async with bot_scene(servers={"x": EXITS_AT_START}, in_process={}) as s:
        await s.alice.send("/call x die")
        failed = await s.fake.wait_for(lambda m: "exited with status" in m.text, timeout=20)
        assert (
            f"the server process exited with status 3; its stderr ends: starting the exits server | {BAD_CONFIG}"
            in (failed.text)
        )
        assert "Connection closed" not in failed.text
        await s.alice.send("/servers")
        listed = await s.fake.wait_for(lambda m: "Servers" in m.text and m is not failed, timeout=20)
        assert (
            f"the server process exited with status 3; its stderr ends: starting the exits server | {BAD_CONFIG}"
            in (listed.text)
        )


async def test_a_server_that_dies_mid_call_names_its_exit_in_the_calls_failure() -> None:
    """The tool `die` exits with status 5 while its call runs: the result says the server went away, and how."""
    async with bot_scene(servers={"d": DIES_MID_CALL}, in_process={}) as s:
        await s.alice.send("/call d die")
        result = await s.fake.wait_for(lambda m: "die" in m.text and "went away" in m.text, timeout=20)
        assert f"the server process exited with status 5; its stderr ends: {DYING}" in result.text


async def test_a_secret_the_server_echoes_on_stderr_is_redacted_in_the_chat_and_in_the_bots_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server prints the value of its token variable before it exits: the chat and the bot's warning line
    quote its stderr with the value redacted. (The server's raw stderr itself goes on to the bot's stderr as the
    server wrote it, as SECURITY.md says.)"""
    with caplog.at_level(logging.WARNING, logger="bot.servers.connections"):
        async with bot_scene(servers={"x": EXITS_AT_START}, in_process={}) as s:
            await s.alice.send("/call x die")
            failed = await s.fake.wait_for(lambda m: "exited with status" in m.text, timeout=20)
    assert "token tried: <redacted>" in failed.text and SECRET not in failed.text
    logged = [r.getMessage() for r in caplog.records if r.name == "bot.servers.connections"]
    assert any("exited with status 3" in line and "token tried: <redacted>" in line for line in logged), (
        logged
    )
    assert all(SECRET not in line for line in logged)


async def test_a_shared_servers_exit_is_named_without_quoting_its_stderr_which_may_be_about_someone_else() -> (
    None
):
    """A `shared = true` server serves everyone, so the end of its stderr may be another person's: the call's
    failure gives the exit status only."""
    async with bot_scene(servers={"x": {**EXITS_AT_START, "shared": True}}, in_process={}) as s:
        await s.alice.send("/call x die")
        failed = await s.fake.wait_for(lambda m: "exited with status" in m.text, timeout=20)
        assert "the server process exited with status 3" in failed.text
        assert "stderr" not in failed.text and BAD_CONFIG not in failed.text

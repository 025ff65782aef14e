"""A person's first minute in the chat (issue 33): `/call` arguments checked by the tool's schema before the
call, a server name that is not there, typing at a buttons-only question, an honest question count, a
cancelled call said once. Real PTB against the fake Bot API, the real demo server; the console as its own
process."""

from __future__ import annotations

import signal
import subprocess

import anyio
import pytest

from tests.cli.test_cli import EXE, REPO, run
from tests.telegram.harness import bot_scene, is_result

pytestmark = pytest.mark.anyio


async def test_an_argument_of_the_wrong_type_is_asked_again_with_the_reason() -> None:
    """`steps=abc` for an integer: asked with the form UI, the reason shown (never the server's pydantic
    error)."""
    async with bot_scene() as s:
        await s.alice.send("/call demo long_task steps=abc")
        card = await s.fake.wait_for(lambda m: "To call long_task" in m.text and bool(m.buttons))
        assert "Steps: must be a whole number between 1 and 100" in card.text and "“abc”" in card.text
        assert not any("pydantic" in m.text for m in s.fake.messages(s.alice))
        await s.alice.press(card, "Cancel")
        await s.fake.wait_for(lambda m: m.message_id == card.message_id and not m.buttons)


async def test_an_unknown_argument_is_named_with_the_tools_real_ones() -> None:
    """`stepz=3` is not silently dropped: the person is told, with the tool's argument names; nothing runs."""
    async with bot_scene() as s:
        sent = await s.alice.send("/call demo long_task stepz=3")
        said = await s.fake.next_message(s.alice, containing="takes no argument")
        assert "“stepz”" in said.text and "Its arguments: steps." in said.text
        assert not any(
            "Finished all" in m.text for m in s.fake.messages(s.alice) if m.message_id > sent.message_id
        )


async def test_a_call_naming_a_server_that_is_not_there_says_so_and_lists_them() -> None:
    """`/call nosrv deploy`: "There is no server “nosrv”", with the servers there are."""
    async with bot_scene() as s:
        await s.alice.send("/call nosrv deploy")
        said = await s.fake.next_message(s.alice, containing="nosrv")
        assert "There is no server “nosrv”. The servers: demo, t." in said.text


async def test_typing_while_a_buttons_only_question_is_open_says_to_tap_a_button() -> None:
    """A choice card waits; a typed word gets "tap one of the buttons above", not "Nothing is waiting"."""
    async with bot_scene() as s:
        await s.alice.send("/call demo deploy")
        card = await s.fake.wait_for(lambda m: "Staging (safe to try)" in m.buttons)
        await s.alice.send("staging")
        said = await s.fake.next_message(s.alice, containing="button")
        assert "tap one of the buttons above" in said.text
        assert not any("Nothing is waiting" in m.text for m in s.fake.messages(s.alice))
        await s.alice.press(card, "Cancel")


async def test_the_question_count_says_how_many_defaults_wait_at_the_review() -> None:
    """book_table asks 5 of its 7 fields; the first card says so ("5 to answer, 2 more with defaults at the
    review"), and the review lists all 7."""
    async with bot_scene() as s:
        await s.alice.send("/call demo book_table restaurant=Luigi")
        card = await s.fake.wait_for(lambda m: "Party size" in m.text and bool(m.buttons))
        assert "(1/5)" in card.text and "5 to answer, 2 more with defaults at the review" in card.text
        await s.alice.press(card, "Cancel")


async def test_a_cancelled_call_says_cancelled_once_in_telegram() -> None:
    """/cancel while long_task runs: its result is "⏹ demo · long_task — cancelled", not followed by a second
    "cancelled" as its text."""
    async with bot_scene() as s:
        call = await s.alice.send("/call demo long_task steps=100")
        await s.fake.wait_for(
            lambda m: "Step " in m.text and m.chat_id == s.alice.id
        )  # its progress: it runs
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call) and "⏹" in m.text)
        assert result.text.lower().count("cancel") == 1, result.text


async def test_a_cancelled_call_says_cancelled_once_in_the_console() -> None:
    """Ctrl-C (SIGINT) while the console runs long_task: "Cancelling..." then one "Cancelled." before what comes
    next (not "Cancelled." then "Cancelled:" and "cancelled")."""
    process = await anyio.open_process([str(EXE), "console"], cwd=REPO, stderr=subprocess.STDOUT)
    async with process:
        assert process.stdin is not None and process.stdout is not None
        await process.stdin.send(b"/call demo long_task steps=100\n")
        output = b""
        with anyio.fail_after(60):  # a deadline, not a timing: a loaded CI machine starts the console slowly
            while b"Step 1 of 100" not in output:  # its first progress line: the call runs
                output += await process.stdout.receive()
        process.send_signal(signal.SIGINT)
        await process.stdin.send(b"/servers\n")
        await process.stdin.aclose()
        with anyio.fail_after(60):
            async for chunk in process.stdout:
                output += chunk
            assert await process.wait() == 0
    text = output.decode()
    said = text[text.index("Calling demo/long_task") : text.index("demo (stdio)")]  # up to /servers' answer
    assert said.lower().count("cancelled") == 1, said


def test_cancel_in_the_console_with_nothing_running_says_so() -> None:
    """`/cancel` at the console with no call or question: "Nothing to cancel.", not "cancelled 0"."""
    done = run("console", stdin="/cancel\n")
    assert done.returncode == 0, done.stderr
    assert "  Nothing to cancel." in done.stdout and "cancelled 0" not in done.stdout.lower()

"""Questions a server sends as tasks (2025-11-25 experimental tasks), end to end: the real bot against the fake Bot
API and real stdio servers on the reference TypeScript SDK: server-everything 2026.8.31's
`trigger-elicitation-request-async`, and `tests/fakes/servers/task_questions.mjs`, which reports every status its
polls saw and cancels a question."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import anyio
import pytest

from tests.conformance.suite import CACHE, NODE, missing
from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.ports import free_port
from tests.telegram.harness import bot_scene, is_result, result_body
from tests.telegram.test_restart import ALICE, bot_process, current_card, kill

pytestmark = pytest.mark.anyio

EVERYTHING = CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
TASK_QUESTIONS = os.path.join(os.path.dirname(__file__), "..", "fakes", "servers", "task_questions.mjs")


@pytest.fixture(autouse=True)
def _installed() -> None:
    why = missing() or (None if EVERYTHING.exists() else f"not installed: {EVERYTHING}")
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)


def _servers(seen: Path | None = None) -> dict[str, dict[str, object]]:
    tq = [TASK_QUESTIONS, str(CACHE), *([] if seen is None else [str(seen)])]
    return {
        "ev": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"], "protocol": "legacy"},
        "tq": {"command": str(NODE), "args": tq, "protocol": "legacy"},
    }


async def _until_seen(seen: Path, status: str) -> None:
    """Wait (bounded) until the server's polls have seen `status`: it appends each new one to `seen`, a file of
    another process, which no event of ours announces, so it is re-read."""
    path = anyio.Path(seen)
    with anyio.fail_after(20):
        while not (await path.exists() and status in (await path.read_text()).split()):  # noqa: ASYNC110
            await anyio.sleep(0.05)


async def test_server_everythings_async_question_is_answered_on_the_phone_and_its_poll_sees_the_answer() -> (
    None
):
    """`trigger-elicitation-request-async`: the bot declares task-augmented elicitations, so the tool is offered; the
    question comes as a task and shows as a card; the person answers; the server's `tasks/get` poll sees
    `completed`, its `tasks/result` gets the answer, and the tool's result reaches the chat."""
    async with bot_scene(servers=_servers()) as s:
        call = await s.alice.send("/call ev trigger-elicitation-request-async")
        card = await s.fake.wait_for(lambda m: "Your Name" in m.text and bool(m.buttons), timeout=30)
        await _answer_everythings_form(s.fake, s.alice, card)
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=30)
        body = result_body(result)
        assert "[COMPLETED] User provided the requested information!" in body
        assert (
            "- Name: Ada" in body and "- Favorite Color: Blue" in body and "- Agreed to terms: true" in body
        )
        assert re.search(r"^Task created: \S+$", body, re.MULTILINE)
        assert re.search(r"^Poll \d+: completed$", body, re.MULTILINE)  # the poll that saw the answer


async def test_a_question_sent_as_a_task_moves_from_working_to_input_required_to_completed(
    tmp_path: Path,
) -> None:
    """The task the bot answers with starts `working`, is `input_required` while its card waits, `completed` once
    the person answered; `tasks/result` is the person's answer as an ElicitResult."""
    seen = tmp_path / "seen"
    async with bot_scene(servers=_servers(seen)) as s:
        call = await s.alice.send("/call tq watch-question")
        card = await s.fake.wait_for(lambda m: "Which colour?" in m.text and "Red" in m.buttons, timeout=30)
        await _until_seen(seen, "input_required")  # the person answers once the server has seen them asked
        await s.alice.press(card, "Red")
        review = await s.fake.wait_for(lambda m: "✅ Submit" in m.buttons)
        await s.alice.press(review, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=30)
        seen = json.loads(result_body(result))
        assert seen["statuses"] == ["working", "input_required", "completed"]
        assert seen["result"]["action"] == "accept" and seen["result"]["content"] == {"colour": "Red"}
        assert seen["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]


async def test_tasks_result_asked_before_the_answer_waits_for_it() -> None:
    """A server that asks `tasks/result` at once, without polling, gets the person's answer once they give it."""
    async with bot_scene(servers=_servers()) as s:
        call = await s.alice.send("/call tq await-question")
        card = await s.fake.wait_for(lambda m: "Which colour?" in m.text and "Blue" in m.buttons, timeout=30)
        await s.alice.press(card, "Blue")
        review = await s.fake.wait_for(lambda m: "✅ Submit" in m.buttons)
        await s.alice.press(review, "✅ Submit")
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=30)
        answer = json.loads(result_body(result))["result"]
        assert answer["action"] == "accept" and answer["content"] == {"colour": "Blue"}


async def test_a_server_that_cancels_its_task_ends_the_card_and_gets_no_answer() -> None:
    """`tasks/cancel` while the card waits: the task is `cancelled` (and stays so), the card loses its buttons and
    says the server cancelled it, and `tasks/result` is an error, not an answer."""
    async with bot_scene(servers=_servers()) as s:
        call = await s.alice.send("/call tq cancel-question")
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=30)
        seen = json.loads(result_body(result))
        assert seen["statuses"][-1] == "input_required"
        assert seen["cancel"] == "cancelled" and seen["after"] == "cancelled"
        assert "cancelled" in seen["result"]["error"]
        assert "Task not found" in seen["unknown"]["error"]  # a task id the bot never gave
        card = await s.fake.wait_for(lambda m: "Which colour?" in m.text and not m.buttons, timeout=10)
        assert "Cancelled by the server" in card.text


def _bot_config(tmp_path: Path, fake: FakeTelegram, server: str) -> Path:
    """The installed bot's config: the fake Bot API, a SQLite store, and `server` (a `[servers.X]` table)."""
    config = tmp_path / "bot.toml"
    config.write_text(
        f'[telegram]\ntoken = "${{TELEGRAM_BOT_TOKEN}}"\napi_base_url = "{fake.base_url}"\n'
        f'allowed_users = [{ALICE}]\n[storage]\nurl = "sqlite:///{tmp_path / "bot.db"}"\n{server}'
    )
    return config


async def _answer_everythings_form(fake: FakeTelegram, alice: FakeUser, card: Msg) -> None:
    """Fill server-everything's async question (name, colour, terms) and submit it."""
    after = card.message_id  # (a card of a killed bot may still stand above)
    await alice.send("Ada", reply_to=card)
    card = await fake.wait_for(lambda m: m.message_id > after and "Blue" in m.buttons, timeout=10)
    await alice.press(card, "Blue")
    card = await fake.wait_for(lambda m: m.message_id > after and "Yes" in m.buttons and "Terms" in m.text)
    await alice.press(card, "Yes")
    review = await fake.wait_for(lambda m: m.message_id > after and "✅ Submit" in m.buttons)
    await alice.press(review, "✅ Submit")


async def _gone(pid: int) -> bool:
    """Whether process `pid` ended within 20 s (another process's: no event of ours announces it)."""
    with anyio.move_on_after(20):
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            await anyio.sleep(0.1)
    return False


async def test_a_question_sent_as_a_task_over_stdio_dies_with_the_killed_bot_and_its_card_offers_run_again(
    tmp_path: Path,
) -> None:
    """SIGKILL while a task's card waits: the stdio server (whose tool polls the task) ends with the bot, so no
    poll outlives it; after the restart the card says the question was lost, with Run again."""
    seen = tmp_path / "seen"
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE, first_name="Alice")
        args = json.dumps([TASK_QUESTIONS, str(CACHE), str(seen)])
        config = _bot_config(
            tmp_path, fake, f'[servers.tq]\ncommand = "{NODE}"\nargs = {args}\nprotocol = "legacy"\n'
        )
        async with bot_process(config, fake) as bot:
            await alice.send("/call tq watch-question")
            card = await current_card(fake, "Which colour?")
            await _until_seen(seen, "input_required")
            server_pid = int(seen.read_text().split()[1])  # its first line: "pid N"
            await kill(bot)
            assert await _gone(server_pid)
        async with bot_process(config, fake):
            await fake.wait_for(
                lambda m: m is card and "the server's question was lost" in m.text, timeout=30
            )
            assert card.buttons == ["🔁 Run again"]


async def test_server_everythings_async_question_over_http_is_lost_with_the_killed_bot_and_run_again_answers_it(
    tmp_path: Path,
) -> None:
    """Streamable HTTP: the server outlives the bot, but its polls travel on the stream of the call that asked, which
    dies with the bot (the bot comes back on a new session). After a SIGKILL and a restart the card says the
    question was lost; Run again asks anew, and that answer reaches the server's poll and the chat."""
    port = free_port()
    env = {**os.environ, "PORT": str(port)}
    command = [str(NODE), str(EVERYTHING), "streamableHttp"]
    async with FakeTelegram() as fake, await anyio.open_process(command, env=env, stdout=None) as server:
        try:
            assert server.stderr is not None
            with anyio.fail_after(20):  # it says when it listens
                heard = ""
                async for chunk in server.stderr:
                    heard += chunk.decode()
                    if "listening on port" in heard:
                        break
            alice = fake.user(id=ALICE, first_name="Alice")
            url = f"http://127.0.0.1:{port}/mcp"
            config = _bot_config(tmp_path, fake, f'[servers.ev]\nurl = "{url}"\nprotocol = "legacy"\n')
            async with bot_process(config, fake) as bot:
                await alice.send("/call ev trigger-elicitation-request-async")
                card = await current_card(fake, "Your Name")
                await alice.send("Ada", reply_to=card)  # its next step comes after the card's place was kept
                await fake.wait_for(lambda m: "Blue" in m.buttons, timeout=10)
                await kill(bot)
            async with bot_process(config, fake):
                # The card whose place was kept when the bot died: the first step's, or the next step's when
                # its place was written before the kill (the two race under load).
                lost = await fake.wait_for(lambda m: "the server's question was lost" in m.text, timeout=30)
                assert lost.message_id >= card.message_id
                await alice.press(lost, "🔁 Run again", timeout=30)
                again = await fake.wait_for(
                    lambda m: m.message_id > lost.message_id and "Your Name" in m.text and bool(m.buttons),
                    timeout=30,
                )
                await _answer_everythings_form(fake, alice, again)
                result = await fake.wait_for(lambda m: "[COMPLETED]" in m.text, timeout=30)
                assert "- Name: Ada" in result.text and re.search(
                    r"^Poll \d+: completed$", result.text, re.MULTILINE
                )
        finally:
            server.terminate()
            await server.wait()

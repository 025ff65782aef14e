"""Tool calls a 2026-07-28 server makes tasks (the tasks extension, SEP-2663), end to end: the real bot (in
process for the chat, the installed command for restarts) against the fake Bot API and a real streamable HTTP
server in its own process that serves the extension (`tests.fakes.servers.modern_tasks`)."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from tests.fakes.telegram import FakeTelegram, FakeUser
from tests.telegram.harness import bot_scene, is_result, result_body
from tests.telegram.test_drain import bot_process, write_config
from tests.telegram.test_restart import ALICE, Durable, socket_server
from tests.telegram.test_tasks_restart import kept_tasks

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def tasks_server(tmp_path: Path) -> AsyncIterator[Durable]:
    """`tests.fakes.servers.modern_tasks` in a process of its own, on a socket listening before it starts (it
    outlives the bot's processes)."""
    # Started cold, not through the tests' zygote: its passing of a listening socket fails once a PostgreSQL
    # server was started in the same session (test_restart.py's durable server shows it too).
    async with socket_server(tmp_path, "tests.fakes.servers.modern_tasks", cold=True) as server:
        yield server


async def finish(server: Durable) -> None:
    """Lets the server's `brew` tasks complete."""
    async with httpx.AsyncClient() as client:
        (await client.post(server.url.removesuffix("/mcp") + "/finish")).raise_for_status()


def methods(server: Durable) -> list[object]:
    return [r["method"] for r in server.received()]


async def server_saw(server: Durable, check: Callable[[list[object]], bool]) -> None:
    """Waits (bounded) until the requests the server logged pass `check`, looked at every 50 ms (the server is
    another process: its log is the only sign)."""
    with anyio.fail_after(30):
        while True:
            if check(methods(server)):
                return
            await anyio.sleep(0.05)


async def review(fake: FakeTelegram, user: FakeUser) -> None:
    """Submits the answer on the question's review card."""
    card = await fake.wait_for(lambda m: "Please review" in m.text and "Submit" in str(m.buttons), 30)
    await user.press(card, "✅ Submit")


def scene_servers(server: Durable) -> dict[str, dict[str, object]]:
    return {"d": {"url": server.url, "protocol": "auto"}}


async def test_a_2026_task_shows_its_stages_on_the_status_line_and_its_result_arrives(tmp_path: Path) -> None:
    """The server makes `brew` a task (the bot declared the extension): its status messages show on the call's
    status line as the bot polls `tasks/get`, and once the task completed its inlined result is the call's."""
    async with tasks_server(tmp_path) as server, bot_scene(servers=scene_servers(server), in_process={}) as s:
        call = await s.alice.send("/call d brew what=tea")
        await s.fake.wait_for(lambda m: "Waiting for the kettle" in m.text, 30)  # its status line
        await finish(server)
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert result.text.startswith("✅") and "brewed tea" in result_body(result)
    assert server.received()[0] == {"method": "tools/call", "tool": "brew", "task": True}
    assert "tasks/get" in methods(server) and "tasks/cancel" not in methods(server)


async def test_the_person_answers_a_2026_tasks_question_on_a_card_and_the_result_contains_it(
    tmp_path: Path,
) -> None:
    """`ask_name`'s task is `input_required` with an `elicitation/create` input request: one card (however
    often the bot polls meanwhile), the answer goes back with `tasks/update`, and the result carries it."""
    async with tasks_server(tmp_path) as server, bot_scene(servers=scene_servers(server), in_process={}) as s:
        call = await s.alice.send("/call d ask_name greeting=Hi")
        card = await s.fake.wait_for(lambda m: "What is your name?" in m.text and bool(m.buttons), 30)
        polls = methods(server).count("tasks/get")
        await server_saw(server, lambda seen: seen.count("tasks/get") >= polls + 3)  # polled on, card out
        await s.alice.send("Ada", reply_to=card)
        await review(s.fake, s.alice)
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert "Hi, Ada!" in result_body(result)
        asked = [m for m in s.fake.messages(s.alice) if "What is your name?" in m.text and m is not card]
        assert all("Please review" in m.history[0].text for m in asked)  # its review: not asked again
    updates = [r for r in server.received() if r["method"] == "tasks/update"]
    assert updates == [
        {
            "method": "tasks/update",
            "taskId": updates[0]["taskId"],
            "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
        }
    ]


async def test_a_call_whose_last_round_the_server_makes_a_task_is_followed_to_its_result(
    tmp_path: Path,
) -> None:
    """`sign_up` asks its question in an `input_required` round (no task yet); the retried call, with the answer,
    is answered with a task, which the bot keeps and polls to its result."""
    async with tasks_server(tmp_path) as server, bot_scene(servers=scene_servers(server), in_process={}) as s:
        call = await s.alice.send("/call d sign_up")
        card = await s.fake.wait_for(lambda m: "Your name for the sign-up?" in m.text and bool(m.buttons), 30)
        await s.alice.send("Lin", reply_to=card)
        await review(s.fake, s.alice)
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert "✅ d · sign_up" in result.text and "signed up Lin" in result_body(result)
    assert methods(server).count("tools/call") == 2 and "tasks/get" in methods(server)


async def test_a_failed_2026_task_shows_its_error_and_a_tool_error_shows_as_one(tmp_path: Path) -> None:
    """`explode`'s task ends `failed` with an inlined error: the call fails with the server's message;
    `grumble`'s ends `completed` with an `isError` result: a tool error, as any call's."""
    async with tasks_server(tmp_path) as server, bot_scene(servers=scene_servers(server), in_process={}) as s:
        call = await s.alice.send("/call d explode")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert "— failed" in result.text and "the task failed: the boiler exploded" in result.text
        call = await s.alice.send("/call d grumble")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert result.text.startswith("❌") and "the kettle is cold" in result_body(result)
    assert [r["tool"] for r in server.received() if r["method"] == "tools/call"] == ["explode", "grumble"]
    assert all(r["task"] for r in server.received() if r["method"] == "tools/call")


async def test_cancel_sends_tasks_cancel_for_a_running_2026_task(tmp_path: Path) -> None:
    """/cancel while the task works (no question out): the call ends cancelled and the server hears
    `tasks/cancel` for that task."""
    async with tasks_server(tmp_path) as server, bot_scene(servers=scene_servers(server), in_process={}) as s:
        call = await s.alice.send("/call d brew what=coffee")
        await s.fake.wait_for(lambda m: "Waiting for the kettle" in m.text, 30)
        await s.alice.send("/cancel")
        result = await s.fake.wait_for(lambda m: is_result(m, call), 30)
        assert result.text.startswith("⏹") and "cancelled" in result.text
        await server_saw(server, lambda seen: "tasks/cancel" in seen)
    made = server.received()[0]
    cancels = [r for r in server.received() if r["method"] == "tasks/cancel"]
    gets = [r for r in server.received() if r["method"] == "tasks/get"]
    assert made["tool"] == "brew" and len(cancels) == 1 and cancels[0]["taskId"] == gets[0]["taskId"]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_a_2026_task_running_when_the_bot_stops_is_polled_again_and_its_result_arrives_once(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """The bot is stopped (killed, or drained) while the server's task works; the next process polls the same
    task (the call not sent again, the task not cancelled), and its result reaches the person once."""
    async with FakeTelegram() as fake, tasks_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server)
        store = "sqlite:///" + str(tmp_path / "bot.db")
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d brew what=tea")
            await fake.wait_for(lambda m: "Waiting for the kettle" in m.text, timeout=30)
            assert await kept_tasks(store) == 1
            bot.process.send_signal(stop)
            with anyio.fail_after(30):
                await bot.process.wait()
        assert await kept_tasks(store) == 1  # left for the next process: not cancelled, not forgotten
        async with bot_process(config, fake) as bot:
            await bot.logged("tasks kept from before the restart: 1, 1 polled again")
            await finish(server)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
            assert "brewed tea" in result_body(result)
            assert await kept_tasks(store) == 0
        assert methods(server).count("tools/call") == 1 and "tasks/cancel" not in methods(server)
        assert [m for m in fake.messages(alice, from_bot=True) if is_result(m, call)] == [result]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
async def test_a_2026_tasks_question_open_when_the_bot_stops_is_asked_again_on_a_new_card_after_the_restart(
    tmp_path: Path, stop: signal.Signals
) -> None:
    """The bot is killed, or drained, while the task's question is on its card: the old process says nothing more
    (no result), the next one polls the task again, still `input_required`, and its question comes on a new card
    (a tap on the old one says it expired); that answer reaches the server and the result, once."""
    async with FakeTelegram() as fake, tasks_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server)
        async with bot_process(config, fake) as bot:
            call = await alice.send("/call d ask_name greeting=Hey")
            first = await fake.wait_for(lambda m: "What is your name?" in m.text and bool(m.buttons), 30)
            bot.process.send_signal(stop)
            with anyio.fail_after(30):
                await bot.process.wait()
        async with bot_process(config, fake):
            card = await fake.wait_for(
                lambda m: "What is your name?" in m.text and bool(m.buttons) and m is not first, 30
            )
            stale = await alice.press(first, "Decline", timeout=30)  # left as it stood; it answers nothing
            assert stale.text == "This prompt has expired."
            await alice.send("Grace", reply_to=card)
            await review(fake, alice)
            result = await fake.wait_for(lambda m: is_result(m, call), timeout=30)
            assert "Hey, Grace!" in result_body(result)
        assert [m for m in fake.messages(alice, from_bot=True) if is_result(m, call)] == [result]
        updates = [r for r in server.received() if r["method"] == "tasks/update"]
        assert methods(server).count("tools/call") == 1 and "tasks/cancel" not in methods(server)
        assert [u["inputResponses"] for u in updates] == [
            {"name": {"action": "accept", "content": {"name": "Grace"}}}
        ]

"""The outbox of a bot alone on SQLite (issue 49): results waiting to be sent when the bot is killed (SIGKILL)
arrive, once each, after it starts again.

End to end with real parts only: the installed `toolnexus-bot` command against the fake Bot API made slow to
answer (`FakeTelegram.hold`: what it holds is neither shown nor answered, and a request given up by a dead client
never happened), the durable MCP server in a process of its own, a SQLite file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text

from bot.store import open_engine
from tests.fakes.telegram import FakeTelegram, FakeUser
from tests.fleet.test_outbox import CALLS, polled
from tests.telegram.test_restart import ALICE, bot_process, durable_server, kill, write_config

pytestmark = pytest.mark.anyio

WAIT_S = 60


def shown(fake: FakeTelegram, user: FakeUser) -> Counter[int]:
    """How often each `stamp n` result stands in `user`'s chat."""
    found: Counter[int] = Counter()
    for m in fake.messages(user, from_bot=True):
        found.update(int(x.removeprefix("stamp ")) for x in m.text.split("\n") if x.startswith("stamp "))
    return found


async def until(fake: FakeTelegram, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109 - like wait_for
    """Wait until `condition` holds, re-checked at every change the fake sees."""
    with anyio.fail_after(timeout):
        while not condition():
            await fake.next_change()


async def outbox_count(url: str) -> int:
    """The rows in the outbox: messages not yet marked sent."""
    engine = await open_engine(url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(text("select count(*) from outbox"))).scalar_one())
    finally:
        await engine.dispose()


async def test_results_queued_when_the_bot_is_killed_arrive_once_after_it_starts_again(
    tmp_path: Path,
) -> None:
    """Alice's 12 calls run (each reaches the server); their results wait, 11 unanswered at a Bot API slow to
    answer and the last in the bot's flood control (a private chat's pace); SIGKILL (the Bot API never carried out what it held). Started again, the bot
    sends each of the 12 results once, and its outbox is empty."""
    url = f"sqlite:///{tmp_path / 'toolnexus.db'}"
    async with FakeTelegram() as fake, durable_server(tmp_path) as server:
        alice = fake.user(id=ALICE, first_name="Alice")
        config = write_config(tmp_path, fake, server, url)

        def ran() -> int:
            return sum(1 for r in server.received() if r["tool"] == "stamp")

        async with bot_process(config, fake) as bot:
            fake.hold("sendMessage")
            for n in range(1, CALLS + 1):
                await alice.send(f"/call d stamp n={n}")
            await polled(lambda: ran() == CALLS)
            # 10 went at once (a private chat's burst), the 11th a second later: the 12th waits in the flood control
            # (or, on a slow machine, has just joined the others at the Bot API)
            await until(fake, lambda: fake.held["sendmessage"] >= CALLS - 1)
            await kill(bot)
        await until(fake, lambda: fake.held["sendmessage"] == 0)  # given up by the dead client: never shown
        assert shown(fake, alice) == Counter()
        fake.release("sendMessage")
        async with bot_process(config, fake) as bot:
            await until(fake, lambda: len(shown(fake, alice)) == CALLS)
            bot.terminate()  # a clean stop marks what was sent before it ends
            with anyio.fail_after(30):
                assert await bot.wait() == 0
        assert await outbox_count(url) == 0
        assert shown(fake, alice) == Counter(range(1, CALLS + 1))
        assert ran() == CALLS  # each call ran once

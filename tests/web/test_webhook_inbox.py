"""The webhook's inbox end to end, on SQLite and PostgreSQL: real PTB in webhook mode and uvicorn on 127.0.0.1,
the fake Bot API, a real database. Telegram delivers an update again when it missed the 200; the bot records
each update before answering, so a redelivery is answered 200 and handled no second time, also by the next
process on the same database. When the update cannot be recorded the answer is 503 (Telegram retries).
"""

from __future__ import annotations

import anyio
import pytest
from sqlalchemy import text

from bot.store.engine import open_engine
from tests.ports import free_port
from tests.telegram.harness import Chat, bot_scene
from tests.web.test_webhook import an_update, get, post, scrape, webhook_mode

pytestmark = pytest.mark.anyio

HELP_SAYS = "I connect to MCP servers"
SERVERS_SAYS = "Servers"


def helps(s: Chat) -> int:
    """The /help answers the bot sent Alice so far."""
    return sum(HELP_SAYS in m.text for m in s.fake.messages(s.alice, from_bot=True))


async def handled_up_to(s: Chat, port: int, update_id: int) -> None:
    """Deliver a /servers (a new update) and wait for its answer: what was delivered before it had its turn."""
    assert (await post(port, json=an_update(update_id, "/servers"))).status_code == 200
    await s.fake.next_message(s.alice, containing=SERVERS_SAYS)


async def test_an_update_delivered_twice_is_handled_once_and_a_new_one_is_handled(store_url: str) -> None:
    """The same /help delivered twice: both deliveries get 200, one answer; another /help is answered; /metrics
    counts the one redelivery."""
    port = free_port()
    async with bot_scene(storage=store_url, **webhook_mode(port)) as s:
        assert (await post(port, json=an_update(1001))).status_code == 200
        await s.fake.next_message(s.alice, containing=HELP_SAYS)
        assert (await post(port, json=an_update(1001))).status_code == 200
        await handled_up_to(s, port, 1002)
        assert helps(s) == 1
        assert (await post(port, json=an_update(1003))).status_code == 200
        await s.fake.next_message(s.alice, containing=HELP_SAYS)
        assert helps(s) == 2
        figures = await scrape(port)
    assert figures[("toolnexus_updates_redelivered_total", ())] == 1


async def test_a_redelivery_after_a_restart_is_still_refused(store_url: str) -> None:
    """The next bot process on the same database answers a redelivery of an update its predecessor handled with
    200, and does not handle it."""
    port = free_port()
    async with bot_scene(storage=store_url, **webhook_mode(port)) as s:
        assert (await post(port, json=an_update(2001))).status_code == 200
        await s.fake.next_message(s.alice, containing=HELP_SAYS)
        s.stop.set()
        with anyio.fail_after(20):
            await s.stopped.wait()
        again_port = free_port()
        async with bot_scene(world=s, storage=store_url, **webhook_mode(again_port)) as again:
            assert (await post(again_port, json=an_update(2001))).status_code == 200
            await handled_up_to(again, again_port, 2002)
            assert helps(again) == 1
            figures = await scrape(again_port)
    assert figures[("toolnexus_updates_redelivered_total", ())] == 1


async def test_an_update_the_database_cannot_record_gets_503_and_is_handled_when_delivered_again(
    store_url: str,
) -> None:
    """With the inbox's table gone (the database refuses the write) the delivery gets 503 and nothing is handled;
    once the table is back, Telegram's next delivery of that update gets 200 and is handled, once."""
    port = free_port()
    async with bot_scene(storage=store_url, **webhook_mode(port)) as s:
        engine = await open_engine(store_url, migrate=False)
        try:
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE updates_seen RENAME TO updates_away"))
            assert (await post(port, json=an_update(3001))).status_code == 503
            async with engine.begin() as conn:
                await conn.execute(text("ALTER TABLE updates_away RENAME TO updates_seen"))
        finally:
            await engine.dispose()
        assert (await post(port, json=an_update(3002, "/servers"))).status_code == 200
        await s.fake.next_message(s.alice, containing=SERVERS_SAYS)
        assert helps(s) == 0
        assert (await post(port, json=an_update(3001))).status_code == 200
        await s.fake.next_message(s.alice, containing=HELP_SAYS)
        assert (await post(port, json=an_update(3001))).status_code == 200
        await handled_up_to(s, port, 3003)
        assert helps(s) == 1


async def test_a_fleet_instance_alone_owns_every_partition_and_says_so(postgresql_url: str) -> None:
    """On PostgreSQL in webhook mode the bot is an instance of a fleet: alone, it owns all 64 partitions, handles
    its updates, and /healthz and /metrics say so."""
    port = free_port()
    async with bot_scene(storage=postgresql_url, **webhook_mode(port)) as s:
        assert (await post(port, json=an_update(3001))).status_code == 200
        await s.fake.next_message(s.alice, containing=HELP_SAYS)
        health = (await get(port, "/healthz")).json()
        figures = await scrape(port)
    assert health["partitions"] == {"owned": 64, "of": 64}
    assert figures[("toolnexus_partitions_owned", ())] == 64
    assert figures[("toolnexus_takeovers_total", ())] == 0
    assert figures[("toolnexus_inbox_wait_seconds_count", ())] == 0  # its own deliveries: none waited

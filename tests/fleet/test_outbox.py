"""The outbox in a fleet (docs/fleet.md, issue 49): results an instance had not sent when it was killed reach
their person through the instance that takes the person over, once each.

Real parts only (`tests.fleet.scene`): two `toolnexus-bot` processes on one PostgreSQL behind the round-robin
proxy, the durable MCP server in its own process, the fake Bot API made slow to answer (`FakeTelegram.hold`:
the results wait there, unanswered and not shown, and behind them in the killed instance's flood control).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fleet.scene import fleet_scene, stamps
from tests.fleet.test_fleet import WAIT_S, stamp_results, until

pytestmark = pytest.mark.anyio

CALLS = 12
"""More than a private chat's burst (10, `bot.telegram.flood.CHAT_BURST`): the last results wait in the
flood control, the others at the Bot API."""


async def polled(condition: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109 - like wait_for
    """Wait until `condition` holds, looked at every 50 ms (the MCP server's log is a file: nothing wakes us)."""
    with anyio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110 - a file, not an event
            await anyio.sleep(0.05)


async def test_results_unsent_by_a_killed_instance_reach_their_person_once_through_the_other(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 alone runs Alice's 12 calls (each reaches the server); their results wait, unanswered, at a
    Bot API slow to answer and in its flood control. Instance 1 joins; instance 0 is SIGKILLed (the Bot API
    never carried out what it held). Instance 1 takes Alice over and sends each of her 12 results, once."""
    async with fleet_scene(tmp_path, postgresql_url, n=2, start=False) as fleet:
        fake = fleet.fake
        await fleet.bots[0].start()  # alone, it owns every partition
        fake.hold("sendMessage")
        for n in range(1, CALLS + 1):
            await fleet.alice.send(f"/call d stamp n={n}")
        await polled(lambda: len(stamps(fleet)) == CALLS)
        await until(fake, lambda: fake.held["sendmessage"] > 0)
        await fleet.bots[1].start()  # Alice's partition stays with instance 0: her calls are not done
        await fleet.bots[0].kill()
        await until(fake, lambda: fake.held["sendmessage"] == 0)  # given up by the dead client: never shown
        assert stamp_results(fake, fleet.alice) == Counter()
        fake.release("sendMessage")
        await until(fake, lambda: len(stamp_results(fake, fleet.alice)) == CALLS, timeout=2 * WAIT_S)
        await fleet.bots[1].logged("outbox: sending")
        assert stamp_results(fake, fleet.alice) == Counter(range(1, CALLS + 1))
        assert sorted(stamps(fleet)) == list(range(1, CALLS + 1))  # each call ran once

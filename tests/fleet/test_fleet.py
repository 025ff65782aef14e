"""A fleet of bots on one PostgreSQL (DESIGN §15, issue 32): what holds with N processes behind a load balancer.

Real parts only (`tests.fleet.scene`): the installed `toolnexus-bot` command twice (or three times) with one
config, webhook mode, the fake Bot API delivering to a round-robin proxy in front of them, the durable MCP server
in its own process (2026-07-28 as `d`, 2025-era as `l`), a real PostgreSQL. Every call's arrival is counted at
the server (`stamp` writes each call down) and every result in the chat.

Tests that need the fleet's partition ownership (a user's updates handled by the instance that owns them, the
takeover of a dead instance's questions) are marked `xfail(strict=True)`: they turn green, and must then lose the
mark, when that part merges.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from tests.fakes.telegram import FakeTelegram, FakeUser, Msg
from tests.fleet.proxy import REFUSED
from tests.fleet.scene import Fleet, fleet_scene, results, stamps
from tests.telegram.harness import is_result, result_body

pytestmark = pytest.mark.anyio

NEEDS_PARTITIONS = "needs partition ownership (fleetcore)"
WAIT_S = 60
"""For a result under load: several bot processes, PostgreSQL and the MCP server share 2 cores."""


def stamp_results(fake: FakeTelegram, user: FakeUser) -> Counter[int]:
    """How often each `stamp n` result stands in `user`'s chat."""
    shown: Counter[int] = Counter()
    for m in results(fake, user):
        shown.update(int(line.removeprefix("stamp ")) for line in m.text.split("\n") if line.startswith("stamp "))
    return shown


async def until(fake: FakeTelegram, condition: Callable[[], bool], timeout: float = WAIT_S) -> None:  # noqa: ASYNC109 - like wait_for
    """Wait until `condition` holds, re-checked at every change the fake sees."""
    with anyio.fail_after(timeout):
        while not condition():
            await fake.next_change()


async def call(fleet: Fleet, user: FakeUser, server: str, n: int) -> Msg:
    """`/call <server> stamp n=<n>`, and its result in the chat."""
    sent = await user.send(f"/call {server} stamp n={n}")
    result = await fleet.fake.wait_for(lambda m: is_result(m, sent) and f"stamp {n}" in m.text, timeout=WAIT_S)
    assert result_body(result).strip() == f"stamp {n}"
    return result


async def test_a_stream_of_calls_over_two_instances_is_answered_once_each(tmp_path: Path, postgresql_url: str) -> None:
    """Twenty calls by two people, delivered in turn to both instances: each reaches the server once and each
    result stands once in its chat; both instances handled some."""
    async with fleet_scene(tmp_path, postgresql_url, n=2) as fleet:
        for n in range(1, 21):
            await (fleet.alice if n % 2 else fleet.bob).send(f"/call {'d' if n % 4 < 2 else 'l'} stamp n={n}")
        await until(fleet.fake, lambda: len(stamp_results(fleet.fake, fleet.alice)) == 10)
        await until(fleet.fake, lambda: len(stamp_results(fleet.fake, fleet.bob)) == 10)
        assert sorted(stamps(fleet)) == list(range(1, 21))
        shown = stamp_results(fleet.fake, fleet.alice) + stamp_results(fleet.fake, fleet.bob)
        assert shown == Counter(range(1, 21))
        handled = {d.instance for d in fleet.proxy.deliveries if d.status == 200}
        assert handled == {0, 1}
        assert not fleet.fake.unexpected_errors, fleet.fake.unexpected_errors

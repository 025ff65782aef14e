"""A person's tool call made as a task outlives the instance that made it: killed (SIGKILL) or drained (SIGTERM),
the instance that takes the person over polls the same task again, and its result reaches the person once
(docs/tasks.md, docs/fleet.md).

Real parts only (`tests.fleet.scene`): two `toolnexus-bot` processes on one PostgreSQL behind the round-robin
proxy, the fake Bot API, and a streamable HTTP MCP server in a process of its own whose tasks outlive the bots'
sessions (`tests.fakes.servers.tasks_http`, as `t`: its `brew` runs as a task until the test posts `/finish`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.fakes.telegram import Msg
from tests.fleet.scene import Fleet, fleet_scene
from tests.fleet.test_fleet import WAIT_S
from tests.fleet.test_fleet import call as stamp_call
from tests.telegram.harness import is_result, result_body
from tests.telegram.test_restart import Durable
from tests.telegram.test_tasks_restart import tasks_server

pytestmark = pytest.mark.anyio

RESUMED = "tasks kept from before the restart: 1, 1 polled again"
"""What the instance that takes the person over logs once it polls their task again."""


@asynccontextmanager
async def tasks_fleet(tmp_path: Path, store_url: str) -> AsyncIterator[tuple[Fleet, Durable]]:
    """The fleet's scene (not started) with the tasks server as `t`, and that server."""
    (tmp_path / "tasks").mkdir()
    async with tasks_server(tmp_path / "tasks") as server:
        config = f'[servers.t]\nurl = "{server.url}"\nprotocol = "legacy"\n'
        async with fleet_scene(tmp_path, store_url, start=False, config=config) as fleet:
            yield fleet, server


async def brewing(fleet: Fleet) -> Msg:
    """Instance 0 alone (it owns everyone) runs Alice's `brew` as a task; instance 1 joins (her partition stays
    with instance 0: her call runs there). Her `/call`, once the task's status shows."""
    await fleet.bots[0].start()
    call = await fleet.alice.send("/call t brew what=tea")
    await fleet.fake.wait_for(lambda m: "waiting for the kettle" in m.text, timeout=WAIT_S)
    await fleet.bots[1].start()
    return call


async def brewed_once(fleet: Fleet, server: Durable, call: Msg) -> Msg:
    """Instance 1 takes every partition, and the task completes: its result reaches Alice once (instance 1 polled
    it again), and the server made one task, gave one result and was never told to cancel it."""
    await fleet.bots[1].logged("(64 owned)", timeout=WAIT_S)
    async with httpx.AsyncClient() as client:
        (await client.post(server.url.removesuffix("/mcp") + "/finish")).raise_for_status()
    result = await fleet.fake.wait_for(lambda m: is_result(m, call), timeout=WAIT_S)
    assert "brewed tea" in result_body(result)
    await fleet.fake.wait_for(lambda m: m is result and "brewed tea" in m.text)
    methods = [r["method"] for r in server.received()]
    assert methods.count("tools/call") == 1 and methods.count("tasks/result") == 1, methods
    assert "tasks/cancel" not in methods
    shown = [m for m in fleet.fake.messages(fleet.alice, from_bot=True) if is_result(m, call)]
    assert shown == [result]
    await fleet.bots[1].logged(RESUMED)
    return result


async def test_a_task_of_a_killed_instance_is_polled_by_the_one_that_takes_its_person_and_its_result_arrives_once(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 is SIGKILLed while Alice's task works: instance 1 takes her over and polls the task; its result
    reaches her once."""
    async with tasks_fleet(tmp_path, postgresql_url) as (fleet, server):
        call = await brewing(fleet)
        await fleet.bots[0].kill()
        await brewed_once(fleet, server, call)


async def test_a_task_of_a_drained_instance_is_left_running_and_polled_by_the_one_that_takes_its_person(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 is drained (SIGTERM) while Alice's task works: it leaves the task running (no `tasks/cancel`)
    and exits 0; instance 1 takes her over and polls the task; its result reaches her once."""
    async with tasks_fleet(tmp_path, postgresql_url) as (fleet, server):
        call = await brewing(fleet)
        assert await fleet.bots[0].stop() == 0
        await brewed_once(fleet, server, call)


async def test_a_paused_owner_s_task_is_polled_by_the_one_that_takes_its_person_and_once_woken_it_does_nothing_more(
    tmp_path: Path, postgresql_url: str
) -> None:
    """Instance 0 is paused (SIGSTOP: its connections and locks stay open) while Alice's task works: instance 1
    takes her over, polls the task, and its result reaches her. Woken (SIGCONT), instance 0 finds it lost her
    and drops her call: it does not show the result again, does not cancel the task, and leaves its old status
    line as it stood."""
    async with tasks_fleet(tmp_path, postgresql_url) as (fleet, server):
        call = await brewing(fleet)
        status = await fleet.fake.wait_for(lambda m: "waiting for the kettle" in m.text)
        paused = fleet.bots[0]
        paused.pause()
        try:
            result = await brewed_once(fleet, server, call)
            stood, shown = list(status.versions), list(result.versions)
        finally:
            paused.resume()
        await paused.logged("dropped 1 call(s)", timeout=WAIT_S)
        fleet.proxy.send_next_to(0)
        await stamp_call(fleet, fleet.alice, "d", 1)  # through instance 0, after its wake-up
        assert "tasks/cancel" not in [r["method"] for r in server.received()]
        brewed = [m for m in fleet.fake.messages(fleet.alice, from_bot=True) if "brewed tea" in m.text]
        assert brewed == [result] and result.versions == shown, brewed
        assert status.versions == stood, status.text

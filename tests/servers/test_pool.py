"""The session pool under a burst of first calls: a real hub over streamable HTTP to a real test server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal

from bot.config import ServerConfig
from bot.core import Origin, PromptRegistry
from bot.servers.connections import default_transport
from bot.servers.hub import Hub
from bot.servers.pool import OPENING_AT_ONCE
from tests.fakes.servers.elicit import build_server
from tests.fakes.servers.http import serve_http
from tests.fakes.surface import RecordingSurface, make_config

pytestmark = pytest.mark.anyio

PEOPLE = 3 * OPENING_AT_ONCE


async def test_a_burst_of_first_calls_opens_a_few_sessions_at_a_time_and_every_call_goes_through() -> None:
    """Many people's first calls at once: only `OPENING_AT_ONCE` sessions of the server are being opened
    together (the others wait their turn instead of sharing the process with them all), and every call is
    then answered, each on its own session."""
    opening: list[int] = []
    release = anyio.Event()

    @asynccontextmanager
    async def held(server: ServerConfig) -> AsyncIterator[Any]:
        opening.append(1)  # a session of the server is being opened now
        await release.wait()
        async with default_transport(server) as streams:
            yield streams

    # The server runs in a thread of its own: in this event loop, uvicorn's 0.1 s tick would keep
    # `wait_all_tasks_blocked` (which looks again every 0.1 s) from ever seeing every task blocked on a loaded
    # machine, where both timers come due in the same turn of the loop.
    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(serve_http(build_server)) as url,
    ):
        config = make_config({"t": {"url": url}})
        prompts = PromptRegistry(RecordingSurface(), config.elicitation.timeout_s)
        async with Hub(config, prompts, transport=held) as hub:
            listed: dict[int, int] = {}

            async def first_call(user_id: int) -> None:
                listed[user_id] = len(await hub.list_tools("t", Origin(chat_id=user_id, user_id=user_id)))

            with anyio.fail_after(30):
                async with anyio.create_task_group() as tg:
                    for n in range(PEOPLE):
                        tg.start_soon(first_call, 2000 + n)
                    await anyio.wait_all_tasks_blocked()
                    assert len(opening) == OPENING_AT_ONCE
                    release.set()
            assert len(opening) == PEOPLE
            assert sorted(listed) == [2000 + n for n in range(PEOPLE)]
            assert all(count > 0 for count in listed.values())
            assert hub.sessions_open == PEOPLE

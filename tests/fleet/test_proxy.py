"""The fleet's round-robin proxy (`tests.fleet.proxy`) behaves as the load balancer the fleet tests assume: in
turn, past an instance that refuses the connection, twice when told, 502 when the instance gives no answer.

Its instances here are small starlette apps on 127.0.0.1 that say who they are, and a listening socket that
never answers (a process that took the connection and died with it).
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.fleet.proxy import NO_ANSWER, REFUSED, round_robin_proxy
from tests.ports import free_port

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def instance(name: str, seen: list[str]) -> AsyncIterator[str]:
    """An app answering `name` (and noting it in `seen`) on every path; its base URL."""

    async def handle(request: Request) -> Response:
        seen.append(name)
        return PlainTextResponse(name)

    app = Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            try:
                yield f"http://127.0.0.1:{listener.getsockname()[1]}"
            finally:
                server.should_exit = True


async def post(url: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.post(url, json={"update_id": 7, "message": {"from": {"id": 1001}}}, timeout=30)


async def test_requests_go_in_turn_and_past_an_instance_that_refuses_the_connection() -> None:
    seen: list[str] = []
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with instance("a", seen) as a, instance("b", seen) as b, round_robin_proxy([a, dead, b]) as proxy:
        answers = [(await post(f"{proxy.url}/telegram")).text for _ in range(4)]
        assert answers == ["a", "b", "b", "a"]  # a; the dead one's turn, refused, so b; b's own turn; a
        assert [d.status for d in proxy.deliveries if d.instance == 1] == [REFUSED]
        first = proxy.deliveries[0]
        assert (first.update_id, first.kind, first.sender, first.status) == (7, "message", 1001, 200)


async def test_told_so_the_proxy_sends_one_request_to_two_instances_or_to_a_chosen_one() -> None:
    seen: list[str] = []
    async with instance("a", seen) as a, instance("b", seen) as b, round_robin_proxy([a, b]) as proxy:
        proxy.duplicate_next()
        assert (await post(f"{proxy.url}/telegram")).status_code == 200
        assert sorted(seen) == ["a", "b"]
        assert sorted(proxy.handled_by(7)) == [0, 1]
        proxy.send_next_to(1)
        assert (await post(f"{proxy.url}/x")).text == "b"


async def test_an_instance_that_takes_the_connection_and_gives_no_answer_gets_502() -> None:
    """As a process that died holding the request: Telegram sees 502 and delivers again."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (the kernel's backlog), never answers
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        async with round_robin_proxy([url]) as proxy:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    answer: list[int] = []

                    async def ask() -> None:
                        answer.append((await post(f"{proxy.url}/telegram")).status_code)

                    tg.start_soon(ask)
                    connection, _ = await anyio.to_thread.run_sync(silent.accept)
                    connection.close()  # the process is gone: the connection ends without an answer
            assert answer == [502]
            assert [d.status for d in proxy.deliveries] == [NO_ANSWER]

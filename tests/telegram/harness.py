"""End-to-end harness: the real bot (`bot.compose.telegram.serve`: PTB Application, hub, registry) against the fake Bot API.

MCP servers are real: in-process by default (the transport is not the point here), stdio where named.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2

from bot.compose.telegram import serve
from bot.config import ServerConfig
from bot.demo_server import build_server as build_demo
from bot.servers.connections import default_transport
from bot.web.client_documents import PublicOnly
from tests.fakes.servers.elicit import build_server as build_elicit
from tests.fakes.surface import make_config
from tests.fakes.telegram import FakeTelegram, FakeUser, Msg

ALICE_ID, BOB_ID, MALLORY_ID = 1001, 1002, 6666
GROUP_ID = -5001
_RESULT_HEAD = re.compile(r"^(?:✅|❌|⚠️|⌛|⏹) \S+ · \S+", re.MULTILINE)
"""The first line of a call's result: its outcome's icon, then "server · tool" (first in its own message, or
below the answered card it was folded into)."""


def is_result(m: Msg, after: Msg) -> bool:
    """Whether `m` is the result of the call that `after` (a person's /call) started: a bot message in that
    chat, later than the /call, with a result's head line. A quick call sends it as a new message, or folds it
    into the card its person just answered; a slow one's status message turns into it."""
    return (
        m.from_bot
        and m.chat_id == after.chat_id
        and m.message_id > after.message_id
        and _RESULT_HEAD.search(m.text) is not None
    )


def result_body(m: Msg) -> str:
    """What a result message shows below its head line (the call's output), wherever the result stands."""
    head = _RESULT_HEAD.search(m.text)
    assert head is not None, m.text
    return m.text[head.end() :].split("\n", 1)[1]


@dataclass
class Chat:
    """The scene: the fake API, the people, and the group; `stop` is serve()'s stop event (SIGTERM)."""

    fake: FakeTelegram
    alice: FakeUser
    bob: FakeUser
    mallory: FakeUser
    group: int
    stop: anyio.Event = field(default_factory=anyio.Event)
    stopped: anyio.Event = field(default_factory=anyio.Event)
    """Set once serve() has returned."""


def _key(secret_key: str | None) -> dict[str, str]:
    return {} if secret_key is None else {"secret_key": secret_key}


@asynccontextmanager
async def bot_scene(
    *,
    protocol: str = "auto",
    servers: dict[str, dict[str, Any]] | None = None,
    in_process: dict[str, Callable[[], Any]] | None = None,
    timeout_s: float = 600,
    rate_limit: bool = False,
    allowed: list[int] | None = None,
    world: Chat | None = None,
    web: dict[str, Any] | None = None,
    clock: Callable[[], float] = time.monotonic,
    storage: str | None = None,
    approvals: list[dict[str, Any]] | None = None,
    secret_key: str | None = None,
    gateway: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    audit: dict[str, Any] | None = None,
    approval_sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    documents: Callable[[], httpx2.AsyncBaseTransport] | None = None,
    **telegram: Any,
) -> AsyncIterator[Chat]:
    """Run the bot with `demo` and `t` (the elicit test server) in-process unless told otherwise.

    `web` is the `[web]` table (none by default: the endpoint is off); `storage` is `[storage] url` (none by
    default: no database), `secret_key` its key for OAuth tokens; `approvals` is `[[approvals]]`; `gateway` is
    `[gateway]`; `limits` is `[limits]`; `audit` is `[audit]`; `telegram` adds to `[telegram]`.

    With `world` (an earlier scene), a new bot process runs against that scene's fake and people: a restart.
    `clock` is the time the bot rations refusals to strangers by; `approval_sleep` how approvals wait for
    their reminders and escalations; `documents` makes the transport OAuth clients' metadata documents are
    fetched through (default: the public internet only).
    """
    factories: dict[str, Callable[[], Any]] = (
        {"demo": build_demo, "t": build_elicit} if in_process is None else in_process
    )
    servers = servers or {name: {"command": "in-process", "protocol": protocol} for name in factories}
    async with AsyncExitStack() as stack:
        if world is None:
            fake = await stack.enter_async_context(FakeTelegram(rate_limit=rate_limit))
            alice = fake.user(id=ALICE_ID, first_name="Alice")
            bob = fake.user(id=BOB_ID, first_name="Bob")
            mallory = fake.user(id=MALLORY_ID, first_name="Mallory")
            group = fake.group(GROUP_ID, title="Ops", members=[alice, bob, mallory])
            scene = Chat(fake, alice, bob, mallory, group)
        else:
            scene = Chat(world.fake, world.alice, world.bob, world.mallory, world.group)
        fake = scene.fake
        config = make_config(
            servers,
            telegram={
                "token": fake.token,
                "api_base_url": fake.base_url,
                "allowed_users": allowed if allowed is not None else [ALICE_ID, BOB_ID],
                **telegram,
            },
            elicitation={"timeout_s": timeout_s},
            **({} if web is None else {"web": web}),
            **({} if storage is None else {"storage": {"url": storage, **_key(secret_key)}}),
            **({} if approvals is None else {"approvals": approvals}),
            **({} if gateway is None else {"gateway": gateway}),
            **({} if limits is None else {"limits": limits}),
            **({} if audit is None else {"audit": audit}),
        )

        def transport(server: ServerConfig) -> Any:
            return factories[server.name]() if server.name in factories else default_transport(server)

        async def run() -> None:
            try:
                await serve(
                    config,
                    scene.stop,
                    ready,
                    transport=transport,
                    clock=clock,
                    approval_sleep=approval_sleep,
                    documents=documents or PublicOnly,
                )
            finally:
                scene.stopped.set()

        ready = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            with anyio.fail_after(20):
                await ready.wait()
            try:
                yield scene
            finally:
                # Stopped as the bot stops, also when the test failed: cancelled instead, the bot would leave
                # its HTTP session open, and its warning would fail whichever test runs when it is collected.
                scene.stop.set()
                with anyio.CancelScope(shield=True), anyio.move_on_after(20):
                    await scene.stopped.wait()
        if world is None:
            assert not fake.unexpected_errors, fake.unexpected_errors

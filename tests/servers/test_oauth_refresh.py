"""A rotating refresh token is spent once (bot/servers/oauth/account.py, `SignInBook.refreshing`): two providers
of one person that both need a refresh at once, in one process or in two on PostgreSQL, refresh once at the
authorization server; both requests get in and the person stays signed in.

Real parts: the protected MCP server with the SDK's own authorization server (refresh tokens rotate: each works
once), the SDK's `OAuthClientProvider` in `Account`, the store on SQLite and PostgreSQL. The browser is the
scripted one, driven by a small `SignInHost` instead of the Telegram card (the card is not the point here).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import cast

import anyio
import httpx2
import pytest
from mcp.shared.auth import AuthorizationCodeResult
from sqlalchemy.ext.asyncio import create_async_engine

from bot.config import Secret, ServerConfig, StorageConfig, parse_config
from bot.core import Origin, PromptRegistry, SignInBook
from bot.servers.oauth.account import Account, BoundAuth
from bot.store import database_url, open_store
from bot.store.tokens import SignInStore
from tests.fakes.servers.oauth import AuthServer, query_of, serve_protected, sign_in
from tests.store.pg_waits import until_counted

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
ALICE = 1001
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}


class Host:
    """A `SignInHost` whose person signs in at once, as alice, through the scripted browser; counts sign-ins."""

    def __init__(self, store: SignInBook) -> None:
        self.store = store
        self.prompts = cast(PromptRegistry, None)  # no card here: an exchange with a card is never pending
        self.redirect_uri = "https://bot.example.com/oauth/callback"
        self.metadata_url: str | None = None
        self.sign_ins = 0
        self.events: list[str] = []

    async def await_code(self, account: Account, url: str) -> AuthorizationCodeResult:
        self.sign_ins += 1
        back = query_of(await sign_in(url, "alice"))
        return AuthorizationCodeResult(code=back["code"], state=back.get("state"), iss=back.get("iss"))

    async def record(self, event: str, user_id: int, server: str, detail: dict[str, str]) -> None:
        self.events.append(event)


def oauth_server(url: str) -> ServerConfig:
    config = parse_config(
        {
            "servers": {"gh": {"url": url, "auth": "oauth"}},
            "storage": {"url": "sqlite:///unused.db", "secret_key": KEY},
        },
        {},
    )
    return config.servers[0]


async def request(account: Account, url: str) -> int:
    """One MCP request through the person's auth (the provider signs in or refreshes first when it must)."""
    auth = BoundAuth(account, Origin(chat_id=ALICE, user_id=ALICE))
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(auth=auth, timeout=30) as http:
        response = await http.post(url, json=INITIALIZE, headers=headers)
    return response.status_code


@asynccontextmanager
async def sign_in_stores(store_url: str, count: int) -> AsyncIterator[list[SignInStore]]:
    """`count` stores opened on one database: each is what one bot process has."""
    async with AsyncExitStack() as stack:
        stores = []
        for _ in range(count):
            store = await stack.enter_async_context(
                open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY)))
            )
            assert store.signins is not None
            stores.append(store.signins)
        yield stores


async def signed_in_then_expired(auth: AuthServer, url: str, book: SignInStore) -> None:
    """Alice signs in; then her access token runs out, at the server and as kept."""
    first = Host(book)
    assert await request(Account(first, oauth_server(url), ALICE), url) == 200
    assert first.sign_ins == 1 and auth.grants["refresh_token"] == 0
    kept = await book.tokens(ALICE, "gh")
    assert kept is not None
    auth.expire_access_tokens()  # only a refreshed token gets in now
    await book.save_tokens(ALICE, "gh", kept[0], time.time() - 1, None)  # as if its hour had passed


async def refresh_at_once(auth: AuthServer, url: str, books: list[SignInStore]) -> list[Host]:
    """Alice signs in and her token runs out; then two new providers (over `books`, round robin) send a
    request at the same moment. Their hosts; both requests must have got in."""
    server = oauth_server(url)
    await signed_in_then_expired(auth, url, books[0])
    hosts = [Host(books[n % len(books)]) for n in range(2)]
    accounts = [
        Account(host, server, ALICE) for host in hosts
    ]  # as after a restart: tokens only in the store
    statuses: list[int] = []

    async def one(account: Account) -> None:
        statuses.append(await request(account, url))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for account in accounts:
                tg.start_soon(one, account)
    assert statuses == [200, 200]
    return hosts


async def test_two_providers_in_one_process_refresh_a_rotating_token_once(store_url: str) -> None:
    """One process, two providers of alice's, both holding an expired token: one refresh at the authorization
    server, no new sign-in, no refresh failure; the kept tokens still work."""
    async with serve_protected() as (auth, url), sign_in_stores(store_url, 1) as books:
        hosts = await refresh_at_once(auth, url, books)
        assert auth.grants["refresh_token"] == 1
        assert [h.sign_ins for h in hosts] == [0, 0] and [h.events for h in hosts] == [[], []]
        assert await books[0].tokens(ALICE, "gh") is not None, "signed out"
        assert await request(Account(Host(books[0]), oauth_server(url), ALICE), url) == 200
    assert auth.grants["authorization_code"] == 1


async def waiting_on_an_advisory_lock(url: str) -> None:
    """Return once a session on the database waits for an advisory lock (PostgreSQL's `pg_locks`)."""
    engine = create_async_engine(database_url(url))
    try:
        await until_counted(
            engine, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
        )
    finally:
        await engine.dispose()


async def test_two_processes_on_postgresql_refresh_a_rotating_token_once(postgresql_url: str) -> None:
    """Two processes' stores on one PostgreSQL database (the advisory lock is all they share): the first
    refresh is held at the authorization server until the second process, holding the same expired tokens,
    waits for the lock (or, were there none, sends the same refresh token); then one refresh in all, the
    second process takes the tokens the first kept, alice stays signed in."""
    async with serve_protected() as (auth, url), sign_in_stores(postgresql_url, 2) as books:
        await signed_in_then_expired(auth, url, books[0])
        server = oauth_server(url)
        hosts = [Host(book) for book in books]
        first, second, hold = anyio.Event(), anyio.Event(), anyio.Event()

        async def at_refresh() -> None:
            (second if first.is_set() else first).set()
            await hold.wait()

        auth.on_refresh = at_refresh
        statuses: list[int] = []

        async def one(host: Host) -> None:
            statuses.append(await request(Account(host, server, ALICE), url))

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, hosts[0])
                await first.wait()
                tg.start_soon(one, hosts[1])
                async with anyio.create_task_group() as either:
                    for condition in (waiting_on_an_advisory_lock(postgresql_url), second.wait()):
                        either.start_soon(_then_cancel, condition, either.cancel_scope)
                hold.set()
        assert statuses == [200, 200]
        assert auth.grants["refresh_token"] == 1
        assert [h.sign_ins for h in hosts] == [0, 0] and [h.events for h in hosts] == [[], []]
        for book in books:
            assert await request(Account(Host(book), server, ALICE), url) == 200
    assert auth.grants["authorization_code"] == 1


async def _then_cancel(condition: Awaitable[object], scope: anyio.CancelScope) -> None:
    await condition
    scope.cancel()

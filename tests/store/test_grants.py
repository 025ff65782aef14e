"""Tests for bot/store/grants.py on SQLite and PostgreSQL: a consent request's steps, each once and only by its
person, its expiry (on a virtual clock), and the tokens it gives, kept only as hashes."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from bot.core.agents import hash_token
from bot.store import Store
from bot.store.grants import ACCESS_TTL_S, CODE_TTL_S, CONSENT_TTL_S, GrantStore, start_code
from bot.store.tables import oauth_consents, oauth_tokens

pytestmark = pytest.mark.anyio

ALICE, BOB = 1001, 1002
REQUEST = {
    "redirect_uri": "https://c.example/cb",
    "explicit": True,
    "state": "s",
    "challenge": "x",
    "scopes": [],
}
RESOURCE = "https://bot.example.com/mcp"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def grants_of(store: Store, clock: Clock) -> GrantStore:
    return GrantStore(store.engine, store.agents, store.audit, clock)


async def test_the_start_code_is_claimed_once_and_only_its_claimer_decides(store: Store) -> None:
    grants = grants_of(store, Clock())
    opened = await grants.open("cid", "Client", REQUEST)
    assert opened.link == start_code(opened.page) and opened.link != opened.page
    claimed = await grants.claim(opened.link, BOB)
    assert claimed is not None and claimed.user_id == BOB
    assert await grants.claim(opened.link, ALICE) is None
    assert await grants.decide(opened.consent.id, ALICE, True) is None
    assert await grants.finish(opened.page) is None  # nobody decided yet
    decided = await grants.decide(opened.consent.id, BOB, True)
    assert decided is not None and decided.state == "allowed"
    assert await grants.decide(opened.consent.id, BOB, False) is None


async def test_an_unanswered_request_and_an_unexchanged_code_expire(store: Store) -> None:
    clock = Clock()
    grants = grants_of(store, clock)
    late = await grants.open("cid", "Client", REQUEST)
    clock.now += CONSENT_TTL_S + 1
    assert await grants.claim(late.link, ALICE) is None

    opened = await grants.open("cid", "Client", REQUEST)
    assert await grants.claim(opened.link, ALICE) is not None
    assert await grants.decide(opened.consent.id, ALICE, True) is not None
    finished = await grants.finish(opened.page)
    assert finished is not None and finished[1] is not None
    code = finished[1]
    clock.now += CODE_TTL_S + 1
    assert await grants.code(code) is None
    assert await grants.exchange(code, RESOURCE) is None


async def test_secrets_are_kept_only_as_hashes(store: Store) -> None:
    grants = grants_of(store, Clock())
    opened = await grants.open("cid", "Client", REQUEST)
    await grants.claim(opened.link, ALICE)
    await grants.decide(opened.consent.id, ALICE, True)
    finished = await grants.finish(opened.page)
    assert finished is not None and finished[1] is not None
    issued = await grants.exchange(finished[1], RESOURCE)
    assert issued is not None
    async with store.engine.connect() as conn:
        consents = [tuple(row) for row in (await conn.execute(select(oauth_consents))).all()]
        tokens = [tuple(row) for row in (await conn.execute(select(oauth_tokens))).all()]
    stored = repr(consents + tokens)
    for secret in (opened.page, opened.link, finished[1], issued.access, issued.refresh):
        assert secret not in stored
    assert hash_token(issued.access) in stored and hash_token(opened.page) in stored


async def test_an_access_token_expires_and_a_refresh_clears_the_grants_expired_ones(store: Store) -> None:
    clock = Clock()
    grants = grants_of(store, clock)
    opened = await grants.open("cid", "Client", REQUEST)
    await grants.claim(opened.link, ALICE)
    await grants.decide(opened.consent.id, ALICE, True)
    finished = await grants.finish(opened.page)
    assert finished is not None and finished[1] is not None
    issued = await grants.exchange(finished[1], RESOURCE)
    assert issued is not None and await grants.token(issued.access, "access") is not None
    clock.now += ACCESS_TTL_S + 1
    assert await grants.token(issued.access, "access") is None
    renewed = await grants.rotate(issued.refresh, "cid")
    assert renewed is not None and await grants.token(renewed.access, "access") is not None
    async with store.engine.connect() as conn:
        hashes = {row.token_hash for row in (await conn.execute(select(oauth_tokens))).all()}
    assert hash_token(issued.access) not in hashes
    assert hash_token(issued.refresh) in hashes  # rotated: kept to catch its replay

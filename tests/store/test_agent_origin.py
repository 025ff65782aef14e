"""Agents' calls in the store, on SQLite and PostgreSQL: migration 0008 adds the nullable `agent` column to approval
requests and kept questions without touching their rows; both read the agent back in another connection (as
after a restart); audit rows of an agent's call name it (`detail.agent`) and the chain verifies; an agent's request
approved by the next process is not run, and its call is told so when the bot stops."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import insert, inspect

from bot.approvals import STOPPING_AGENT
from bot.config import Secret, StorageConfig
from bot.core import CallStatus, Era, KeptQuestion, Origin, Outcome, Prompt, ToolOutcome
from bot.core.approvals import ApprovalStatus, Vote, tally
from bot.store import AuditEvent, AuditLog, Store, current_revision, open_engine, open_store, upgrade
from bot.store.tables import rounds
from mapping import Answer, Request, RequestKind
from tests.store.test_approval_service import ALICE, BOB, CAROL, Clock, Shown, ask, asking, running
from tests.store.test_engine import NEWEST

pytestmark = pytest.mark.anyio

CI_BOT = Origin(chat_id=1001, user_id=1001, agent="ci-bot")
PARAMS = {"mode": "form", "message": "Sure?", "requestedSchema": {"type": "object", "properties": {}}}


def kept(origin: Origin, n: int = 1) -> KeptQuestion:
    return KeptQuestion(
        id=f"elc-agent-{n}",
        round_id=f"r-{n}",
        input_key="q",
        era=Era.MODERN,
        server="prod",
        tool="deploy",
        arguments={"service": "web"},
        origin=origin,
        token=f"tok{n}",
        deadline=1_900_000_000.0,
        input_requests={"q": {"method": "elicitation/create", "params": PARAMS}},
        request_state="state",
    )


async def test_revision_0008_adds_a_nullable_agent_column_and_keeps_the_rows_of_0007(store_url: str) -> None:
    """A database at 0007 with an audit row and a kept question is upgraded in place: both columns are there and
    nullable, the question reads back as the chat's (no agent), the audit chain still verifies."""
    engine = await open_engine(store_url, migrate=False)
    try:
        await upgrade(engine, "0007")
        written = await AuditLog(engine).append(AuditEvent.CALL_STARTED, user_id=7, server="prod", tool="x")
        old = kept(ALICE)
        async with engine.begin() as conn:
            await conn.execute(
                insert(rounds).values(
                    id=old.id,
                    round_id=old.round_id,
                    input_key=old.input_key,
                    era=old.era.value,
                    server=old.server,
                    tool=old.tool,
                    arguments=json.dumps(old.arguments),
                    user_id=old.origin.user_id,
                    chat_id=old.origin.chat_id,
                    token=old.token,
                    deadline=old.deadline,
                    input_requests=json.dumps(old.input_requests),
                    request_state=old.request_state,
                    progress="{}",
                )
            )
    finally:
        await engine.dispose()
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await current_revision(store.engine) == NEWEST
        async with store.engine.connect() as conn:
            columns = await conn.run_sync(
                lambda sync: {
                    table: {c["name"]: c for c in inspect(sync).get_columns(table)}
                    for table in ("approvals", "rounds")
                }
            )
        assert columns["approvals"]["agent"]["nullable"] and columns["rounds"]["agent"]["nullable"]
        assert await store.rounds.open_questions() == [old]
        assert await store.audit.rows() == [written]
        assert await store.audit.verify() == (1, None)


async def test_an_approval_request_and_a_kept_question_read_the_agent_back_in_another_connection(
    store: Store, store_url: str
) -> None:
    """As after a restart: the agent's request and question come back with the agent; the chat's without."""
    agents = await store.approvals.create(ask(origin=CI_BOT), "call", deadline=2e9)
    chats = await store.approvals.create(ask(), "call", deadline=2e9)
    await store.rounds.keep(kept(CI_BOT, 1))
    await store.rounds.keep(kept(ALICE, 2))
    async with open_store(StorageConfig(url=Secret(store_url))) as again:
        agent_request, chat_request = (
            await again.approvals.get(agents.id),
            await again.approvals.get(chats.id),
        )
        questions = {q.id: q for q in await again.rounds.open_questions()}
    assert agent_request is not None and agent_request.ask.origin == CI_BOT
    assert chat_request is not None and chat_request.ask.origin.agent is None
    assert questions["elc-agent-1"].origin == CI_BOT and questions["elc-agent-2"].origin == ALICE


async def test_audit_rows_of_an_agents_call_name_the_agent_and_the_chain_verifies(store: Store) -> None:
    """Call started and ended, question shown and answered, approval requested and approved: each row of the
    agent's call carries `detail.agent`; the same rows of a chat call do not; the chain holds."""
    observer = store.observer
    for origin in (CI_BOT, ALICE):
        await observer.call_started(origin, "prod", "deploy", {"service": "web"})
        prompt = Prompt(
            Request(id=f"elc-{origin.chat_id}", kind=RequestKind.INPUT, prompt="Sure?"), origin, "prod"
        )
        await observer.prompt_shown(prompt)
        await observer.prompt_ended(prompt, Outcome.ANSWERED, Answer(id=prompt.request.id, ok=True, data={}))
        await observer.call_ended(origin, "prod", "deploy", ToolOutcome(CallStatus.OK, "done"))
    record = await store.approvals.create(ask(origin=CI_BOT), "call", deadline=2e9)
    counted = tally(record.state, BOB, "Bob", Vote.APPROVE, "2026-01-01T00:00:00+00:00")
    assert counted.ballot is not None
    await store.approvals.vote(record, counted.state, counted.ballot)

    rows = [r.as_dict() for r in await store.audit.rows()]
    events = [r["event"] for r in rows]
    assert events == [
        *["call_started", "question_shown", "answered", "call_ended"] * 2,
        "approval_requested",
        "approved",
    ]
    agents = [r["detail"].get("agent") for r in rows]
    assert agents == ["ci-bot"] * 4 + [None] * 4 + ["ci-bot"] * 2
    assert all(r["user_id"] == 1001 for r in rows[:8])
    assert await store.audit.verify() == (10, None)


async def test_an_agents_request_approved_by_the_next_process_is_not_run(
    store: Store, store_url: str
) -> None:
    """Process A asks for the agent, Bob approves, A stops: the agent's call is told it will not be made. Process
    B restores the request with its agent; Carol's approval decides it, but B's host is not asked to run it: it
    is told (not waiting), and that is all."""
    clock = Clock()
    shown_a = Shown()
    async with running(store.approvals, clock, shown_a) as (a, tg):
        asked = await asking(a, tg, shown_a, ask(origin=CI_BOT))
        await a.vote(asked.id, BOB, "Bob", Vote.APPROVE)
        a.stop()
        released = await asked.result()
    assert released.status is ApprovalStatus.PENDING and released.text == STOPPING_AGENT

    shown_b = Shown()
    async with (
        open_store(StorageConfig(url=Secret(store_url))) as again,
        running(again.approvals, clock, shown_b) as (b, _),
    ):
        cast = await b.vote(asked.id, CAROL, "Carol", Vote.APPROVE)
        await shown_b.until(lambda: shown_b.told != [])
    assert cast.text == "Approved (2 of 2)."
    assert shown_b.told == [(ApprovalStatus.APPROVED, False)] and shown_b.ran == []
    record = await store.approvals.get(asked.id)
    assert record is not None and record.ask.origin == CI_BOT
    assert record.state.status is ApprovalStatus.APPROVED

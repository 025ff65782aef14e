"""Agents' calls in memory (`bot.core.agent_calls.LocalAgentCalls`), the shape a process alone holds: what is sent is
served once, claimed once; an agent leaving withdraws an unclaimed call and ends a claimed one."""

from __future__ import annotations

import anyio
import pytest

from bot.core import Outcome
from bot.core.agent_calls import AgentCall, LocalAgentCalls

pytestmark = pytest.mark.anyio

CALL = AgentCall(7, 1001, "claude", "d__confirm", {"action": "deploy"})
RESULT = {"content": [{"type": "text", "text": "deploy: done"}], "isError": False}


async def test_a_sent_call_is_served_and_claimed_once_and_its_result_reaches_the_sender() -> None:
    calls = LocalAgentCalls()
    served: list[tuple[str, int]] = []
    claimed: list[AgentCall | None] = []

    async def handle(key: str, user_id: int) -> None:
        served.append((key, user_id))
        claimed.append(await calls.claim(key))
        claimed.append(await calls.claim(key))
        await calls.settle(key, RESULT)

    async with anyio.create_task_group() as tg:
        await tg.start(calls.serve, handle)
        key = await calls.send(CALL)
        with anyio.fail_after(5):
            ended = await calls.result(key)
        tg.cancel_scope.cancel()
    assert served == [(key, CALL.user_id)]
    assert claimed == [CALL, None]
    assert ended.result == RESULT


async def test_an_agent_leaving_withdraws_an_unclaimed_call_and_ends_a_claimed_one() -> None:
    calls = LocalAgentCalls()
    unclaimed = await calls.send(CALL)
    assert await calls.leave(unclaimed, Outcome.AGENT_CANCELLED)
    assert await calls.claim(unclaimed) is None
    assert (await calls.result(unclaimed)).result is None
    claimed = await calls.send(CALL)
    assert await calls.claim(claimed) == CALL
    assert not await calls.leave(claimed, Outcome.AGENT_REVOKED)
    with anyio.fail_after(5):
        assert await calls.watch(claimed) is Outcome.AGENT_REVOKED

"""`toolnexus_gateway_calls_total` (bot/web/metrics.py over `Hub.agent_calls`): agents' calls and `ask_person`
questions counted by outcome, people's own calls not, every outcome shown from the first scrape. A real hub and
in-process server under a recording surface; the registry's own Prometheus text."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import pytest
from prometheus_client import generate_latest

from bot.core import CallStatus, Origin, PromptRegistry
from bot.servers.hub import AGENT_OUTCOMES, Hub
from bot.web.metrics import metrics_registry
from mapping import elicitation_to_request, parse_schema
from tests.fakes.servers.elicit import build_server
from tests.fakes.surface import ALICE, decline, make_config, placeholder, running_hub

pytestmark = pytest.mark.anyio

CI = Origin(chat_id=1001, user_id=1001, agent="ci")
YES_NO = {"mode": "form", "message": "Ship it?", "requestedSchema": {"type": "object", "properties": {}}}


class NoApi:
    """No chat platform behind this hub: nothing sent, nothing refused."""

    calls: Mapping[str, int] = {}
    refused: Mapping[str, int] = {}


def gateway_counts(prompts: PromptRegistry, hub: Hub) -> dict[str, float]:
    page = generate_latest(metrics_registry(prompts, hub, NoApi())).decode()
    head = 'toolnexus_gateway_calls_total{outcome="'
    return {
        label: float(value)
        for line in page.splitlines()
        if line.startswith(head)
        for label, value in [line.removeprefix(head).split('"} ')]
    }


async def test_agents_calls_are_counted_by_outcome_and_the_persons_own_are_not() -> None:
    """Every outcome is shown at 0 before any call; an agent's ok call, its declined `ask_person` and its call
    refused past its half of `calls_per_minute = 4` count; Alice's own call counts only in tool calls."""
    config = make_config(placeholder(["t"]), limits={"calls_per_minute": 4})
    async with running_hub(config, in_process={"t": build_server}) as (hub, prompts, surface):
        assert gateway_counts(prompts, hub) == dict.fromkeys(AGENT_OUTCOMES, 0.0)
        assert (await hub.call_tool("t", "long_text", {"chars": 5}, CI)).status is CallStatus.OK

        request = elicitation_to_request(YES_NO)
        form = parse_schema({"type": "object", "properties": {}})
        answers: list[object] = []
        async with anyio.create_task_group() as tg:

            async def ask() -> None:
                answers.append(await hub.ask_for_agent(request, form, CI))

            tg.start_soon(ask)
            prompt = await surface.next_prompt(CI)
            prompts.answer(prompt, decline(prompt))
        assert answers == [decline(prompt)]

        refused = await hub.call_tool("t", "long_text", {"chars": 5}, CI)
        assert refused.status is CallStatus.REFUSED and "agent ci" in refused.text
        assert (await hub.call_tool("t", "long_text", {"chars": 5}, ALICE)).status is CallStatus.OK
        counts = gateway_counts(prompts, hub)
    assert counts == {**dict.fromkeys(AGENT_OUTCOMES, 0.0), "ok": 1.0, "refused": 1.0, "declined": 1.0}
    assert hub.calls_ended[CallStatus.OK] == 2

"""`/metrics`: Prometheus collectors that read what the bot's parts already count. Pure reads, no I/O.

Pull, not push: each scrape reads the prompt registry, the hub and the Bot API watch as they are at that
moment, so those parts keep plain counters and never import prometheus. Every process gets its own
`CollectorRegistry` (no module globals, so tests and several bots in one process never share figures).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.registry import Collector

from bot.core import CallStatus, PromptRegistry
from bot.core.fleet import ALONE
from bot.servers.hub import AGENT_OUTCOMES, Hub
from bot.servers.limits import Limit

__all__ = ["ACTIONS", "ApiCounts", "FleetCounts", "InboxCounts", "Redeliveries", "metrics_registry"]

ACTIONS: Final = ("accept", "decline", "cancel")
"""The wire actions an answer can carry (always shown, 0 included, so a dashboard sees each series)."""


class ApiCounts(Protocol):
    """What the host counts of its chat platform's API, read at each scrape (the Telegram host's `ApiWatch`;
    the web endpoint does not import the host: the composition root passes it in)."""

    @property
    def calls(self) -> Mapping[str, int]:
        """Requests sent, by API method."""
        ...

    @property
    def refused(self) -> Mapping[str, int]:
        """Requests refused as rate-limited, by API method."""
        ...


class Redeliveries(Protocol):
    """What the webhook counts of Telegram's redeliveries (`Webhook.redelivered`)."""

    @property
    def redelivered(self) -> int:
        """Deliveries of an update already recorded, answered 200 and not handled again."""
        ...


class FleetCounts(Protocol):
    """What this process owns and took over (`bot.core.fleet.Fleet`)."""

    def owned_count(self) -> int | None:
        """Partitions owned now; None alone (no partitions)."""
        ...

    @property
    def takeovers(self) -> int:
        """Partitions taken from another instance that still named itself their owner."""
        ...


class InboxCounts(Protocol):
    """What the fleet's routing counts of updates another instance recorded (`bot.web.webhook.Routing`)."""

    @property
    def claimed(self) -> int: ...

    @property
    def lag_s(self) -> float: ...

    @property
    def lag_total_s(self) -> float: ...


class _BotCollector(Collector):
    def __init__(
        self,
        prompts: PromptRegistry,
        hub: Hub,
        watch: ApiCounts,
        webhook: Redeliveries | None,
        fleet: FleetCounts,
        inbox: InboxCounts | None = None,
    ) -> None:
        self._prompts = prompts
        self._hub = hub
        self._watch = watch
        self._webhook = webhook
        self._fleet = fleet
        self._inbox = inbox

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "toolnexus_prompts_pending",
            "Questions waiting for a person's answer.",
            len(self._prompts.pending()),
        )
        answers = CounterMetricFamily(
            "toolnexus_answers", "Answers sent back to MCP servers, by action.", labels=["action"]
        )
        for action in ACTIONS:
            answers.add_metric([action], self._prompts.answers[action])
        yield answers
        calls = CounterMetricFamily(
            "toolnexus_tool_calls", "Tool calls ended, by outcome.", labels=["outcome"]
        )
        for status in CallStatus:
            calls.add_metric([status.value], self._hub.calls_ended[status])
        yield calls
        gateway = CounterMetricFamily(
            "toolnexus_gateway_calls",
            "Agents' calls through the MCP gateway (tool calls, ask_person, notify_person) ended, by outcome.",
            labels=["outcome"],
        )
        for outcome in AGENT_OUTCOMES:
            gateway.add_metric([outcome], self._hub.agent_calls[outcome])
        yield gateway
        yield GaugeMetricFamily("toolnexus_mcp_sessions_open", "MCP sessions open.", self._hub.sessions_open)
        refusals = CounterMetricFamily(
            "toolnexus_refusals",
            "Calls, questions and server processes refused by a [limits] limit, by limit.",
            labels=["limit"],
        )
        for limit in Limit:
            refusals.add_metric([limit.value], self._hub.limits.refused[limit])
        yield refusals
        api = CounterMetricFamily(
            "toolnexus_bot_api_calls",
            "Bot API requests sent, by method (getUpdates not counted; a retried request counts again).",
            labels=["method"],
        )
        for method, count in sorted(self._watch.calls.items()):
            api.add_metric([method], count)
        yield api
        refused = CounterMetricFamily(
            "toolnexus_bot_api_rate_limited",
            "Bot API requests Telegram refused with 429, by method.",
            labels=["method"],
        )
        for method, count in sorted(self._watch.refused.items()):
            refused.add_metric([method], count)
        yield refused
        if self._webhook is not None:
            yield CounterMetricFamily(
                "toolnexus_updates_redelivered",
                "Webhook deliveries of an update already recorded: answered 200, not handled again.",
                self._webhook.redelivered,
            )
        owned = self._fleet.owned_count()
        if owned is not None:  # an instance of a fleet (alone, a process has no partitions)
            yield GaugeMetricFamily(
                "toolnexus_partitions_owned",
                "Partitions of the users this instance of the fleet owns.",
                owned,
            )
            yield CounterMetricFamily(
                "toolnexus_takeovers",
                "Partitions this instance took over from another (dead or stalled) instance.",
                self._fleet.takeovers,
            )
        if self._inbox is not None:
            yield GaugeMetricFamily(
                "toolnexus_inbox_lag_seconds",
                "Seconds the last update recorded by another instance waited in the inbox for this one.",
                self._inbox.lag_s,
            )
            lag = SummaryMetricFamily(
                "toolnexus_inbox_wait_seconds",
                "Updates recorded by another instance and handled here, and the seconds they waited.",
                count_value=self._inbox.claimed,
                sum_value=self._inbox.lag_total_s,
            )
            yield lag


def metrics_registry(
    prompts: PromptRegistry,
    hub: Hub,
    watch: ApiCounts,
    webhook: Redeliveries | None = None,
    fleet: FleetCounts = ALONE,
    inbox: InboxCounts | None = None,
) -> CollectorRegistry:
    """A fresh registry with the bot's collector in it (and the webhook's redeliveries in webhook mode; the
    partitions and the inbox's lag in a fleet)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_BotCollector(prompts, hub, watch, webhook, fleet, inbox))
    return registry

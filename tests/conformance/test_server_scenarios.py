"""The MCP conformance suite's server scenarios against the bot's gateway (`/mcp`), with a test agent token.

One bot for the module (PTB against the fake Bot API, the gateway on a local port, a SQLite database holding
Alice's agent token), its only MCP server the suite's reference tools (`tests/fakes/servers/conformance.py`,
named `c`). Each test runs one scenario of the 0.2.0-alpha.12 suite at one protocol version, in a process of its
own, with `tests/conformance/bearer.mjs` loaded into it: it adds `Authorization: Bearer <token>` to every
request and maps the reference tools' names (`test_simple_text` <-> `c__test_simple_text`). Every check must be
SUCCESS. (0.1.16's server scenarios are a subset of 0.2's, with fewer checks each: not run twice.)

Expected to fail (strict xfail), as they cannot apply to a gateway:

* `tools-call-elicitation`, `elicitation-sep1034-defaults`, `elicitation-sep1330-enums`: the suite checks that
  the server's question reaches the *agent*; the gateway brings every question a server asks to the person's
  phone instead (issue 34: it never hands a server's question to the agent). The test has the person decline
  the card that arrives in her chat, which shows where the question went.
* `tools-call-sampling`: the gateway forwards no `sampling/createMessage` to the agent (the bot declares no
  sampling to its servers: the server is told sampling is not supported).
* `logging-set-level`, `tools-call-with-logging`: the gateway relays no server log lines to the agent (no
  `logging` capability; 2025-11-25 only, logging is deprecated in 2026-07-28).
* `completion-complete`, `resources-list`, `prompts-list`, `caching` (its prompts and resources lists): the
  gateway serves tools only. The other `resources-*` and `prompts-*` scenarios fail alike and are not run.
* `server-sse-polling`: it needs the server to close the agent's SSE stream mid-call and resume it from an event
  store (SEP-1699); the gateway keeps no event store, and a server's tool cannot close the gateway's stream.
* `server-stateless` (2026-07-28): all its checks pass but two, which want a tool that needs a client capability
  the agent did not declare (`test_missing_capability`, sampling); no gateway tool needs one (see sampling).
* `tasks-mrtr-input`, `tasks-mrtr-composition` (the tasks extension, 2026-07-28): their tools (`confirm_delete`,
  `multi_input`, `test_tool_with_task`) ask the *agent* a question mid-task (`input_required`, answered with
  `tasks/update` or an MRTR round); the gateway brings every server's question to the person's phone, so its tasks
  are never `input_required` (those fixtures are not served). `tasks-status-notifications` is skipped by the suite
  itself (every check SKIPPED).

The tasks extension's other scenarios (`tasks-*`, 2026-07-28, run with the suite's `--force`) pass: the gateway
decides which calls are tasks (docs/tasks.md), from the reference tools' `execution.taskSupport`.

Not run at all: `input-required-result-*` (the 2026-07-28 form of a server asking the agent: the same reason as
elicitation), `sep-2164-resource-not-found` (resources), and the skills extension.

The suite comes from the npm registry (`.cache/conformance`, installed by `.ci/run`); where it is missing the
tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from bot.cli import LOOP
from tests.conformance import suite
from tests.fakes.servers.conformance import build_server
from tests.fakes.telegram.model import Msg
from tests.telegram.harness import ALICE_ID, Chat
from tests.web.agents import gateway_scene, make_token

pytestmark = [
    pytest.mark.anyio,
    # The bot silences PTB's nudge on its plain card calls when it starts (bot/telegram/bot.py); pytest puts the
    # warning filters back after each test, and this module's bot outlives the test that started it.
    pytest.mark.filterwarnings("ignore:Please use 'Bot:telegram.warnings.PTBUserWarning"),
]

NEXT = "0.2.0-alpha.12"
LEGACY, MODERN = "2025-11-25", "2026-07-28"
SERVER = "c"
"""The reference tools' server in the bot's config: its tools are `c__<tool>` on the gateway."""

BOTH_ERAS = (
    "tools-list",
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "server-sse-multiple-streams",
    "json-schema-2020-12",
    "dns-rebinding-protection",
)
LEGACY_ONLY = ("server-initialize", "server-session-lifecycle", "ping")
MODERN_ONLY = ("http-header-validation", "http-custom-header-server-validation")

ASKS_THE_PERSON = (
    "the gateway brings a server's question to the person's phone, never to the agent (the suite wants it at"
    " the agent); the person declines the card here"
)
NO_SAMPLING = "the gateway forwards no sampling request to the agent (the bot declares no sampling)"
NO_LOGGING = "the gateway relays no server log lines to the agent (it declares no logging)"
TOOLS_ONLY = "the gateway serves tools only (no completions, resources or prompts)"
NO_RESUME = (
    "SEP-1699 polling: the gateway keeps no event store to resume the agent's stream, and a server's tool"
    " cannot close the gateway's stream"
)
NO_CAPABILITY_TOOL = (
    "two checks want a tool needing a client capability the agent did not declare (test_missing_capability);"
    " no gateway tool needs one"
)
ASKS_THE_AGENT = (
    "its tools (confirm_delete, multi_input, test_tool_with_task) ask the agent a question mid-task (input_required,"
    " answered by tasks/update or an MRTR round); the gateway brings every server's question to the person's phone,"
    " so a gateway task is never input_required (these fixtures are not served)"
)
SUITE_SKIPS = "the suite skips it itself (its subscriptions/listen harness is pending): every check SKIPPED"
TASKS_2026 = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-required-task-error",
)
"""The suite's tasks extension scenarios the gateway passes (the reference fixtures `greet`, `slow_compute`,
`failing_job`, `protocol_error_job` behind it, their `execution.taskSupport` deciding which calls are tasks)."""
TASKS_ASKING = ("tasks-mrtr-input", "tasks-mrtr-composition")
"""The tasks extension's scenarios about a server's question reaching the agent."""
NOT_SERVED = ("completion-complete", "resources-list", "prompts-list")
"""One scenario of each family the gateway does not serve, in each era (the rest fail alike)."""
ELICITING = {
    "tools-call-elicitation": "Please provide your information",
    "elicitation-sep1034-defaults": "test_elicitation_sep1034_defaults",
    "elicitation-sep1330-enums": "test_elicitation_sep1330_enums",
}
"""Scenario -> what the card the person gets says."""


@dataclass(frozen=True)
class Case:
    version: str
    spec: str
    name: str
    xfail: str | None = None
    extension: bool = False
    """An extension's scenario (the suite runs it only when forced)."""

    @property
    def id(self) -> str:
        return f"{self.version}:{self.spec}:{self.name}"


CASES: list[Case] = [
    *(Case(NEXT, LEGACY, name) for name in (*LEGACY_ONLY, *BOTH_ERAS)),
    *(Case(NEXT, MODERN, name) for name in (*BOTH_ERAS, *MODERN_ONLY)),
    *(Case(NEXT, LEGACY, name, ASKS_THE_PERSON) for name in ELICITING),
    Case(NEXT, LEGACY, "tools-call-sampling", NO_SAMPLING),
    Case(NEXT, LEGACY, "logging-set-level", NO_LOGGING),
    Case(NEXT, LEGACY, "tools-call-with-logging", NO_LOGGING),
    Case(NEXT, LEGACY, "server-sse-polling", NO_RESUME),
    *(Case(NEXT, spec, name, TOOLS_ONLY) for spec in (LEGACY, MODERN) for name in NOT_SERVED),
    Case(NEXT, MODERN, "caching", TOOLS_ONLY),
    Case(NEXT, MODERN, "server-stateless", NO_CAPABILITY_TOOL),
    *(Case(NEXT, MODERN, name, extension=True) for name in TASKS_2026),
    *(Case(NEXT, MODERN, name, ASKS_THE_AGENT, extension=True) for name in TASKS_ASKING),
    Case(NEXT, MODERN, "tasks-status-notifications", SUITE_SKIPS, extension=True),
]


@dataclass
class Gateway:
    scene: Chat
    url: str
    token: str


@pytest.fixture(scope="module")
def anyio_backend() -> tuple[str, dict[str, object]]:
    return "asyncio", dict(LOOP)


@pytest.fixture(scope="module")
async def gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Gateway]:
    """One bot for every scenario of this module (of this worker): the reference tools, a token for Alice.

    The bot speaks 2025-11-25 to the reference server (whose questions are plain `elicitation/create`); the
    agent's era is each scenario's own."""
    _absent()
    tmp = tmp_path_factory.mktemp("gateway")
    async with gateway_scene(tmp, in_process={SERVER: build_server}, protocol="legacy") as (s, port, url):
        token = await make_token(url, ALICE_ID, "conformance")
        yield Gateway(s, f"http://127.0.0.1:{port}/mcp", token)


def _absent() -> None:
    why = suite.missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the conformance suite is {why}")
    pytest.skip(f"the conformance suite is {why}")


def _params() -> list[object]:
    return [
        pytest.param(
            c,
            id=c.id,
            marks=[pytest.mark.xfail(reason=c.xfail, strict=True, raises=AssertionError)] if c.xfail else [],
        )
        for c in CASES
    ]


@pytest.mark.parametrize("case", _params())
async def test_server_scenario(case: Case, gateway: Gateway, tmp_path: Path) -> None:
    """One scenario against the gateway as Alice's agent: every check SUCCESS."""
    asked = ELICITING.get(case.name)
    cards: list[Msg] = []
    before = max((m.message_id for m in gateway.scene.fake.messages(ALICE_ID)), default=0)
    async with anyio.create_task_group() as tg:
        if asked is not None:
            tg.start_soon(_decline, gateway.scene, asked, before, cards)
        run = await suite.server_scenario(
            case.name,
            case.version,
            case.spec,
            gateway.url,
            tmp_path / "out",
            token=gateway.token,
            prefix=SERVER + "__",
            force=case.extension,
        )
    if asked is not None and not cards:  # not an AssertionError: an xfail must not absorb it
        pytest.fail("the server's question never reached the person")
    bad = [c for c in run.checks if c["status"] != "SUCCESS"]
    assert run.checks and not bad, f"{bad}\n--- the suite said:\n{run.output[-6000:]}"


async def _decline(s: Chat, words: str, after: int, cards: list[Msg]) -> None:
    """The person declines the card asking `words` (the server's question, brought to her phone)."""
    card = await s.fake.wait_for(
        lambda m: (
            m.chat_id == ALICE_ID and m.message_id > after and words in m.text and "Decline" in m.buttons
        ),
        timeout=30,
    )
    cards.append(card)
    await s.alice.press(card, "Decline")

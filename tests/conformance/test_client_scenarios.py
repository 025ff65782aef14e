"""The MCP conformance suite's client scenarios, driven through the real bot: PTB against the fake Bot API,
a scripted person who taps the sign-in card (and answers the server's questions), and a test browser (httpx)
that follows the authorization server's redirect back to the bot's /oauth/callback. Every check the suite
reports must be SUCCESS.

A scenario the bot must refuse ends as soon as the person sees the refusal (the "is unavailable" line, or
a failed result), not on a timeout.

The suite comes from the npm registry (`.cache/conformance`, installed by `.ci/run`); where it is missing the
tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.conformance import suite
from tests.fakes.servers.oauth import follow
from tests.fakes.telegram.model import Msg
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID, Chat, bot_scene, is_result, result_body

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
PUBLIC = "https://bot.example.com"
NEXT, STABLE = "0.2.0-alpha.12", "0.1.16"
OAUTH: dict[str, Any] = {"auth": "oauth"}
PREREGISTERED = {**OAUTH, "client_id": "pre-registered-client", "client_secret": "pre-registered-secret"}
CIMD = {**OAUTH, "client_metadata_url": "https://conformance-test.local/client-metadata.json"}
RESULT_HEAD = re.compile(r"^(✅|❌|⚠️|⌛|⏹) \S+ · \S+", re.MULTILINE)
REFUSED = "refused"
"""Expected outcome of a scenario the bot must refuse (its server is unavailable, the call fails)."""
LEGACY_ISSUER = (
    "0.1.16's mock serves its 2025-03-26 metadata at the root well-known URL naming issuer <origin>/oauth; the"
    " SDK (mcp/client/auth/utils.py validate_metadata_issuer, RFC 8414 §3.3, SEP-2468) requires the issuer the"
    " URL was built from, the origin, and refuses (0.2.0-alpha.12's mock names the origin and passes)"
)


@dataclass(frozen=True)
class Case:
    version: str
    name: str
    server: dict[str, Any] = field(default_factory=lambda: dict(OAUTH))
    """The `[servers.c]` table besides its url."""
    steps: tuple[tuple[str, str], ...] = (("test-tool", "test"),)
    """What the person sends, in order, and how it must end: `/call c <tool ...>` and what its result must end
    with (or REFUSED); or a command (`/tools c`) and a text the bot's answer contains."""
    skipped: tuple[str, ...] = ()
    """Checks (by name) that may be SKIPPED: they exercise what the bot never sends (README says why)."""
    xfail: str | None = None
    """Why this scenario cannot pass (an upstream limitation); strict: it must fail for now."""

    @property
    def id(self) -> str:
        return f"{self.version}:{self.name}"


def refused(tool: str = "test-tool") -> tuple[tuple[str, str], ...]:
    return ((tool, REFUSED),)


# The bot never sends these (2026-07-28 is stateless: no initialize; it runs tools, and lists no resources or
# prompts; it declares elicitation, not roots or sampling).
UNSENT_METHODS = (
    *(f"ClientMcpMethodHeader_{m}" for m in ("initialize", "notifications_initialized", "resources_list")),
    *(f"ClientMcpMethodHeader_{m}" for m in ("resources_read", "prompts_list", "prompts_get")),
    *(f"ClientMcpNameHeader_{m}" for m in ("resources_read", "prompts_get")),
)
UNDECLARED = ("ClientDeclaresRootsCapability", "ClientDeclaresSamplingCapability")

AUTH_BOTH = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
]
CASES: list[Case] = [
    *(Case(v, name) for v in (NEXT, STABLE) for name in AUTH_BOTH),
    *(Case(v, "auth/pre-registration", PREREGISTERED) for v in (NEXT, STABLE)),
    *(Case(v, "auth/basic-cimd", CIMD) for v in (NEXT, STABLE)),
    *(
        Case(v, name, steps=refused())
        for v in (NEXT, STABLE)
        for name in ("auth/scope-retry-limit", "auth/resource-mismatch")
    ),
    Case(NEXT, "auth/2025-03-26-oauth-metadata-backcompat"),
    Case(STABLE, "auth/2025-03-26-oauth-metadata-backcompat", xfail=LEGACY_ISSUER),
    Case(NEXT, "auth/authorization-server-migration"),
    Case(NEXT, "auth/iss-supported"),
    Case(NEXT, "auth/iss-not-advertised"),
    *(
        Case(NEXT, name, steps=refused())
        for name in (
            "auth/iss-wrong-issuer",
            "auth/iss-supported-missing",
            "auth/iss-unexpected",
            "auth/iss-normalized",
            "auth/metadata-issuer-mismatch",
        )
    ),
    *(Case(v, "initialize", {}, (("/tools c", "c has no tools"),)) for v in (NEXT, STABLE)),
    *(
        Case(v, "tools_call", {}, (("add_numbers a=5 b=3", "The sum of 5 and 3 is 8"),))
        for v in (NEXT, STABLE)
    ),
    Case(NEXT, "request-metadata", {}, (("/tools c", "c has no tools"),), skipped=UNDECLARED),
    Case(
        NEXT,
        "http-standard-headers",
        {},
        (("/tools c", "test_headers"), ("test_headers", ""), ("my-hyphenated-tool", "")),
        skipped=UNSENT_METHODS,
    ),
    Case(NEXT, "json-schema-ref-no-deref", {}, (("/tools c", "lookup_user"),)),
    Case(
        NEXT,
        "sep-2322-client-request-state",
        {},
        (
            ("test_mrtr_echo_state", ""),
            ("test_mrtr_no_state", ""),
            ("test_mrtr_unrelated", ""),
            ("test_mrtr_no_result_type", ""),
        ),
    ),
    *(
        Case(v, "elicitation-sep1034-client-defaults", {}, (("test_client_elicitation_defaults", ""),))
        for v in (NEXT, STABLE)
    ),
]


def _absent() -> None:
    why = suite.missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the conformance suite is {why}")
    pytest.skip(f"the conformance suite is {why}")


def _params() -> list[Any]:
    marks = {c.id: [pytest.mark.xfail(reason=c.xfail, strict=True)] if c.xfail else [] for c in CASES}
    return [pytest.param(c, id=c.id, marks=marks[c.id]) for c in CASES]


@pytest.mark.parametrize("case", _params())
async def test_client_scenario(case: Case, tmp_path: Path) -> None:
    """One scenario: the person calls the mock's tool(s), signs in from the card, answers what the server asks;
    each call ends as expected (its result, or the refusal), and every check is SUCCESS."""
    _absent()
    ended: list[Msg] = []
    async with suite.scenario(case.name, case.version, tmp_path / "out") as running:
        port = free_port()
        servers = {"c": {"url": running.url, **case.server}}
        web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC}
        storage = f"sqlite:///{tmp_path / 'toolnexus.db'}"
        async with bot_scene(servers=servers, in_process={}, storage=storage, secret_key=KEY, web=web) as s:
            for step, expected in case.steps:
                command = step.startswith("/")
                asked = await s.alice.send(step if command else f"/call c {step}")
                with anyio.fail_after(30):
                    ended.append(await _drive(s, asked, f"http://127.0.0.1:{port}", command and expected))
        checks = await running.finish()
    for (step, expected), msg in zip(case.steps, ended, strict=True):
        if step.startswith("/"):
            continue  # it ended when the answer contained `expected`
        if expected == REFUSED:
            assert _refused(msg, None), msg.text
        else:
            head = RESULT_HEAD.search(msg.text)
            assert head is not None and head.group(1) == "✅", msg.text
            assert result_body(msg).rstrip().endswith(expected), msg.text
    bad = [
        c
        for c in checks
        if c["status"] != "SUCCESS" and not (c["status"] == "SKIPPED" and c["name"] in case.skipped)
    ]
    # On failure, the suite's own log too (its request log shows what the bot sent, for a flake seen once).
    assert checks and not bad, f"{bad}\n--- the suite said:\n{''.join(running.lines)[-6000:]}"


def _refused(m: Msg, after: Msg | None) -> bool:
    """The bot refused the call: its server is unavailable (e.g. the sign-in was refused), or it failed."""
    late = after is None or m.message_id > after.message_id
    return late and (" is unavailable: " in m.text or m.text.startswith("❌"))


async def _drive(s: Chat, asked: Msg, local: str, answer: str | bool = False) -> Msg:
    """Play the person until the call ends: tap each sign-in card and let the browser follow its link, answer
    a yes/no question Yes, submit a form as pre-filled. The call's result, or the refusal line (for a command,
    the bot's answer containing `answer`)."""
    handled: set[tuple[int, int]] = set()

    def ended(m: Msg) -> bool:
        if isinstance(answer, str):
            return m.from_bot and m.message_id > asked.message_id and answer in m.text
        return is_result(m, asked) or _refused(m, asked)

    def news(m: Msg) -> bool:
        mine = m.chat_id == ALICE_ID and m.message_id > asked.message_id
        return mine and (ended(m) or ((m.message_id, m.seq) not in handled and _actionable(m)))

    while True:
        msg = await s.fake.wait_for(news, timeout=25)
        if ended(msg):
            return msg
        handled.add((msg.message_id, msg.seq))
        if "needs you to sign in" in msg.text:
            link = re.search(r"http://localhost:\d+/\S+", msg.text)
            assert link is not None, msg.text
            await s.alice.press(msg, re.compile("^Open "))
            async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
                page = await browser.get(link.group(0))
            back = page.headers.get("location", "")
            if back.startswith(PUBLIC):
                await follow(back, local)
        elif "✅ Submit" in msg.buttons:
            await s.alice.press(msg, "✅ Submit")
        elif "Yes" in msg.buttons:
            await s.alice.press(msg, "Yes")


def _actionable(m: Msg) -> bool:
    labels = m.buttons
    signin = "needs you to sign in" in m.text and any(b.startswith("Open ") for b in labels)
    return signin or "✅ Submit" in labels or "Yes" in labels

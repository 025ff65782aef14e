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

from tests.bot.telegram_harness import ALICE_ID, bot_scene, is_result, result_body
from tests.conformance import suite
from tests.fake_telegram.model import Msg
from tests.servers.oauth import follow

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
    calls: tuple[tuple[str, str], ...] = (("test-tool", "test"),)
    """What the person calls (`/call c <this>`) and what its result must end with (or REFUSED)."""
    xfail: str | None = None
    """Why this scenario cannot pass (an upstream limitation); strict: it must fail for now."""

    @property
    def id(self) -> str:
        return f"{self.version}:{self.name}"


CASES: list[Case] = [
    Case(NEXT, "auth/metadata-default"),
    Case(NEXT, "auth/token-endpoint-auth-basic"),
    Case(NEXT, "auth/token-endpoint-auth-post"),
    Case(NEXT, "auth/token-endpoint-auth-none"),
    Case(NEXT, "auth/pre-registration", PREREGISTERED),
    Case(NEXT, "auth/basic-cimd", CIMD),
    Case(NEXT, "auth/iss-supported"),
    Case(NEXT, "auth/iss-wrong-issuer", calls=(("test-tool", REFUSED),)),
    Case(NEXT, "auth/iss-supported-missing", calls=(("test-tool", REFUSED),)),
    Case(NEXT, "auth/resource-mismatch", calls=(("test-tool", REFUSED),)),
    Case(STABLE, "auth/pre-registration", PREREGISTERED),
    Case(NEXT, "auth/metadata-var1"),
    Case(NEXT, "auth/metadata-var2"),
    Case(NEXT, "auth/metadata-var3"),
    Case(NEXT, "auth/scope-from-www-authenticate"),
    Case(NEXT, "auth/scope-from-scopes-supported"),
    Case(NEXT, "auth/scope-omitted-when-undefined"),
    Case(NEXT, "auth/scope-step-up"),
    Case(NEXT, "auth/scope-retry-limit", calls=(("test-tool", REFUSED),)),
    Case(NEXT, "auth/2025-03-26-oauth-metadata-backcompat"),
    Case(NEXT, "auth/2025-03-26-oauth-endpoint-fallback"),
    Case(NEXT, "auth/offline-access-scope"),
    Case(NEXT, "auth/offline-access-not-supported"),
    Case(NEXT, "auth/authorization-server-migration"),
    Case(NEXT, "auth/iss-not-advertised"),
    Case(NEXT, "auth/iss-unexpected", calls=(("test-tool", REFUSED),)),
    Case(NEXT, "auth/iss-normalized", calls=(("test-tool", REFUSED),)),
    Case(NEXT, "auth/metadata-issuer-mismatch", calls=(("test-tool", REFUSED),)),
    Case(STABLE, "auth/metadata-default"),
    Case(STABLE, "auth/metadata-var1"),
    Case(STABLE, "auth/metadata-var2"),
    Case(STABLE, "auth/metadata-var3"),
    Case(STABLE, "auth/basic-cimd", CIMD),
    Case(STABLE, "auth/scope-from-www-authenticate"),
    Case(STABLE, "auth/scope-from-scopes-supported"),
    Case(STABLE, "auth/scope-omitted-when-undefined"),
    Case(STABLE, "auth/scope-step-up"),
    Case(STABLE, "auth/scope-retry-limit", calls=(("test-tool", REFUSED),)),
    Case(STABLE, "auth/token-endpoint-auth-basic"),
    Case(STABLE, "auth/token-endpoint-auth-post"),
    Case(STABLE, "auth/token-endpoint-auth-none"),
    Case(STABLE, "auth/2025-03-26-oauth-metadata-backcompat", xfail=LEGACY_ISSUER),
    Case(STABLE, "auth/2025-03-26-oauth-endpoint-fallback"),
    Case(STABLE, "auth/resource-mismatch", calls=(("test-tool", REFUSED),)),
    Case(STABLE, "auth/offline-access-scope"),
    Case(STABLE, "auth/offline-access-not-supported"),
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
    ended: list[tuple[str, Msg]] = []
    async with suite.scenario(case.name, case.version, tmp_path / "out") as running:
        port = _free_port()
        servers = {"c": {"url": running.url, **case.server}}
        web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC}
        storage = f"sqlite:///{tmp_path / 'toolnexus.db'}"
        async with bot_scene(servers=servers, in_process={}, storage=storage, secret_key=KEY, web=web) as s:
            for call, expected in case.calls:
                asked = await s.alice.send(f"/call c {call}")
                with anyio.fail_after(30):
                    ended.append((expected, await _drive(s, asked, f"http://127.0.0.1:{port}")))
        checks = await running.finish()
    for expected, msg in ended:
        if expected == REFUSED:
            assert _refused(msg, None), msg.text
        else:
            head = RESULT_HEAD.search(msg.text)
            assert head is not None and head.group(1) == "✅", msg.text
            assert result_body(msg).rstrip().endswith(expected), msg.text
    bad = [c for c in checks if c["status"] != "SUCCESS"]
    assert checks and not bad, bad


def _refused(m: Msg, after: Msg | None) -> bool:
    """The bot refused the call: its server is unavailable (e.g. the sign-in was refused), or it failed."""
    late = after is None or m.message_id > after.message_id
    return late and (" is unavailable: " in m.text or m.text.startswith("❌"))


async def _drive(s: Any, asked: Msg, local: str) -> Msg:
    """Play the person until the call ends: tap each sign-in card and let the browser follow its link, answer
    a yes/no question Yes, submit a form as pre-filled. The call's result, or the refusal line."""
    handled: set[tuple[int, int]] = set()

    def news(m: Msg) -> bool:
        mine = m.chat_id == ALICE_ID and m.message_id > asked.message_id
        return mine and (
            is_result(m, asked) or _refused(m, asked) or ((m.message_id, m.seq) not in handled and _actionable(m))
        )

    while True:
        msg = await s.fake.wait_for(news, timeout=25)
        if is_result(msg, asked) or _refused(msg, asked):
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


def _free_port() -> int:
    from port_for import get_port

    port = get_port(None)
    assert port is not None
    return int(port)

"""The MCP conformance suite's client scenarios, driven through the real bot: PTB against the fake Bot API,
a scripted person who taps the sign-in card, and a test browser (httpx) that follows the authorization
server's redirect back to the bot's /oauth/callback. Every check the suite reports must be SUCCESS.

The suite comes from the npm registry (`.cache/conformance`, installed by `.ci/run`); where it is missing the
tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.bot.telegram_harness import ALICE_ID, bot_scene, is_result
from tests.conformance import suite
from tests.servers.oauth import follow

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
PUBLIC = "https://bot.example.com"
NEXT, STABLE = "0.2.0-alpha.12", "0.1.16"
PREREGISTERED = {"client_id": "pre-registered-client", "client_secret": "pre-registered-secret"}
CIMD = {"client_metadata_url": "https://conformance-test.local/client-metadata.json"}

# (suite version, scenario, how the bot is configured for it, whether the bot must refuse)
SCENARIOS: list[tuple[str, str, dict[str, Any], bool]] = [
    (NEXT, "auth/metadata-default", {}, False),
    (NEXT, "auth/token-endpoint-auth-basic", {}, False),
    (NEXT, "auth/token-endpoint-auth-post", {}, False),
    (NEXT, "auth/token-endpoint-auth-none", {}, False),
    (NEXT, "auth/pre-registration", PREREGISTERED, False),
    (NEXT, "auth/basic-cimd", CIMD, False),
    (NEXT, "auth/iss-supported", {}, False),
    (STABLE, "auth/pre-registration", PREREGISTERED, False),
    # Not yet driven here (see README "Conformance"): the refusing scenarios (iss-wrong-issuer,
    # iss-supported-missing, resource-mismatch: the bot refuses, the driver's end-of-call check needs work),
    # the rest of auth/*, sep-2322, tools_call, request-metadata, http-standard-headers,
    # json-schema-ref-no-deref, elicitation-sep1034-client-defaults.
]


def _absent() -> None:
    why = suite.missing()
    if why is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the conformance suite is {why}")
    pytest.skip(f"the conformance suite is {why}")


@pytest.mark.parametrize(
    ("version", "name", "oauth", "refused"),
    SCENARIOS,
    ids=[f"{v}:{n}" for v, n, _, _ in SCENARIOS],
)
async def test_client_scenario(version: str, name: str, oauth: dict[str, Any], refused: bool, tmp_path: Path) -> None:
    """One scenario: the person calls the mock's tool, signs in from the card; every check is SUCCESS."""
    _absent()
    async with suite.scenario(name, version, tmp_path / "out") as running:
        port = _free_port()
        servers = {"c": {"url": running.url, "auth": "oauth", **oauth}}
        web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC}
        storage = f"sqlite:///{tmp_path / 'toolnexus.db'}"
        async with bot_scene(servers=servers, in_process={}, storage=storage, secret_key=KEY, web=web) as s:
            asked = await s.alice.send("/call c test-tool")
            with anyio.fail_after(30):
                ended = await _sign_in_until_done(s, asked, f"http://127.0.0.1:{port}")
        checks = await running.finish()
    if refused:
        assert "test" not in ended.text.split("\n", 1)[-1] or "unavailable" in ended.text or "sign-in" in ended.text
    else:
        assert ended.text.rstrip().endswith("test"), ended.text
    bad = [c for c in checks if c["status"] != "SUCCESS"]
    assert checks and not bad, bad


async def _sign_in_until_done(s: Any, asked: Any, local: str) -> Any:
    """Tap each sign-in card and let the browser follow its link, until the call's result (or refusal)."""
    seen: set[int] = set()
    while True:
        msg = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID
            and m.message_id > asked.message_id
            and (is_result(m, asked) or ("needs you to sign in" in m.text and m.message_id not in seen)),
            timeout=25,
        )
        if is_result(msg, asked):
            return msg
        seen.add(msg.message_id)
        link = re.search(r"http://localhost:\d+/\S+", msg.text)
        assert link is not None, msg.text
        await s.alice.press(msg, re.compile("^Open "))
        async with httpx.AsyncClient(follow_redirects=False, timeout=10) as browser:
            page = await browser.get(link.group(0))
        back = page.headers.get("location", "")
        if back.startswith(PUBLIC):
            await follow(back, local)


def _free_port() -> int:
    from port_for import get_port

    port = get_port(None)
    assert port is not None
    return int(port)

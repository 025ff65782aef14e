"""The MCP conformance suite's authorization-server scenarios against the gateway's own OAuth (`[gateway] oauth`):
`authorization-server-metadata-endpoint` and `authorization-code-grant` (0.2.0-alpha.12; the only two it has).

The bot's public URL is its loopback address here (the suite must reach the issuer it is given). The code grant
needs a person: the suite prints the authorize URL and waits for its callback; the test is the browser (follows
the URL to the consent page and its poll) and Alice's phone (the `/start` link and Allow on the card), then
delivers the redirect to the suite's callback server, as a browser would. Every check must be SUCCESS.

The suite comes from the npm registry (`.cache/conformance`, installed by `.ci/run`); where it is missing the
tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.streams.text import TextReceiveStream

from tests.conformance import suite
from tests.ports import free_port
from tests.telegram.harness import bot_scene
from tests.web.oauth_agent import START, WAIT

pytestmark = pytest.mark.anyio

NEXT = "0.2.0-alpha.12"


@pytest.fixture(autouse=True)
def _installed() -> None:
    why = suite.missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the conformance suite is missing in CI: {why}")
        pytest.skip(why)


async def authorization_suite(
    out: Path, args: list[str], browser: Callable[[str], Awaitable[None]]
) -> list[dict[str, Any]]:
    """Run every authorization-server scenario with `args` (the code grant reads the metadata scenario's result,
    so they run in one process); `browser(url)` acts on the authorize URL the suite prints."""
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0", "NODE_COMPILE_CACHE": str(suite.COMPILE_CACHE)}
    command = [str(suite.NODE), str(suite.entry(NEXT)), "authorization", "-o", str(out), *args]
    lines: list[str] = []
    async with await anyio.open_process(command, env=env, stderr=-2) as process:
        assert process.stdout is not None
        acted = False
        with anyio.fail_after(60):
            async for text in TextReceiveStream(process.stdout):
                lines.append(text)
                found = re.search(r"^(https?://\S+/authorize\?\S+)$", "".join(lines), re.MULTILINE)
                if not acted and found:
                    acted = True
                    await browser(found.group(1))
            await process.wait()
    found_checks = sorted([path async for path in anyio.Path(out).rglob("checks.json")])
    assert found_checks, "".join(lines)
    checks = [c for path in found_checks for c in json.loads(await path.read_text())]
    return [c for c in checks if c.get("status") != "INFO"]


async def test_the_metadata_and_the_code_grant_pass_the_suites_authorization_server_checks(
    tmp_path: Path,
) -> None:
    port, callback = free_port(), free_port()
    issuer = f"http://127.0.0.1:{port}"
    web = {"listen": "127.0.0.1", "port": port, "public_url": issuer}
    storage = f"sqlite:///{tmp_path / 'bot.db'}"
    async with bot_scene(web=web, storage=storage, gateway={"enabled": True}) as s:
        async with httpx2.AsyncClient(trust_env=False, timeout=30.0) as http:
            registered = await http.post(
                issuer + "/register",
                json={
                    "client_name": "Conformance",
                    "redirect_uris": [f"http://127.0.0.1:{callback}/callback"],
                    "token_endpoint_auth_method": "none",
                },
            )
            client_id = registered.json()["client_id"]

            async def browser(url: str) -> None:
                page = await http.get(url, follow_redirects=True)
                start, wait = START.search(page.text), WAIT.search(page.text)
                assert start is not None and wait is not None, page.text
                await s.alice.send(f"/start {start.group(1)}")
                card = await s.fake.next_message(s.alice.id, timeout=15)
                await s.alice.press(card, "Allow")
                with anyio.fail_after(15):
                    while True:  # the page's poll
                        answer = (await http.get(issuer + wait.group(1))).json()
                        if answer["status"] != "waiting":
                            break
                        await anyio.sleep(0.05)
                await http.get(answer["redirect"])  # the suite's callback server

            checks = await authorization_suite(
                tmp_path / "suite",
                [
                    "--url",
                    issuer,
                    "--client-id",
                    client_id,
                    "--resource",
                    issuer + "/mcp",
                    "-p",
                    str(callback),
                ],
                browser,
            )
        ids = {c["id"] for c in checks}
        assert {
            "authorization-server-metadata",
            "authorization-server-metadata-cimd",
            "authorization-code-grant",
        } <= ids
        assert all(c["status"] == "SUCCESS" for c in checks), checks

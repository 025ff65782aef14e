"""Two instances of one bot on one PostgreSQL (a fleet): a Mini App answer, a replayed launch and an OAuth
callback land on the instance that does not hold the question, and still do exactly what they do on one.

Both instances are the real bot (PTB against one fake Bot API, uvicorn on 127.0.0.1, webhook mode, the bus on
PostgreSQL), started before anyone asks anything; Telegram's deliveries go to A, so A holds every question, and
the page's requests and the browser's return go where the test sends them, as a load balancer might.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest

from bot.core import Origin
from bot.store.engine import open_engine
from bot.store.fleet_state import ToolLists
from bot.telegram.tool_runs import LIST_KEEP_S, ToolButtons
from tests.fakes.servers.oauth import follow, serve_protected, sign_in
from tests.fakes.telegram import Msg
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID, Chat, bot_scene
from tests.web.support import (
    OPEN_FORM,
    PUBLIC_URL,
    SIX_ANSWERS,
    SIX_FIELDS,
    ask_form,
    launch_data,
    local_path,
    received,
)
from tests.web.test_webhook import SECRET

pytestmark = pytest.mark.anyio


KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
CONSENT = "Open 127.0.0.1"


def fleet_member(port: int) -> dict[str, Any]:
    return {
        "mode": "webhook",
        "webhook_secret": SECRET,
        "web": {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC_URL},
    }


@asynccontextmanager
async def two_instances(url: str, **scene: Any) -> AsyncIterator[tuple[Chat, int, int]]:
    """Instances A and B of one bot on the database `url`; Telegram delivers to A. Yields the scene (A's) and
    the local ports of A and B."""
    a_port, b_port = free_port(), free_port()
    async with (
        bot_scene(storage=url, **fleet_member(a_port), **scene) as a,
        bot_scene(world=a, storage=url, **fleet_member(b_port), **scene),
    ):
        a.fake.deliver_via_webhook(f"http://127.0.0.1:{a_port}/telegram", secret_token=SECRET)
        yield a, a_port, b_port


def has_open_form(m: Msg) -> bool:
    return OPEN_FORM in m.buttons


async def page(port: int, card: Msg, what: str, body: dict[str, Any]) -> httpx.Response:
    """POST to the card's page endpoint `what` on the instance listening on `port`."""
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        return await client.post(f"http://127.0.0.1:{port}{local_path(card)}/{what}", json=body)


async def test_a_page_answer_landing_on_the_other_instance_answers_the_prompt(postgresql_url: str) -> None:
    """B does not hold the form: it finds it by its token (form, check), passes the answer on, and tells the
    page it was taken once A answered; the server gets the values and A's card settles."""
    async with two_instances(postgresql_url) as (s, _a, b):
        call = await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        initdata = launch_data(s.alice, s.fake.token)
        form = await page(b, card, "form", {"initData": initdata})
        assert form.status_code == 200, form.text
        assert [f["name"] for f in form.json()["fields"]] == list(SIX_FIELDS["properties"])
        check = await page(b, card, "check", {"initData": initdata, "name": "guests", "value": "40"})
        assert check.status_code == 200 and check.json()["reason"] is not None
        bob = await page(b, card, "form", {"initData": launch_data(s.bob, s.fake.token)})
        assert bob.status_code == 403  # bound to its person on B too
        answer = await page(
            b, card, "answer", {"initData": initdata, "action": "accept", "values": SIX_ANSWERS}
        )
        assert (answer.status_code, answer.json()) == (200, {"ok": True, "action": "accept"})
        assert await received(s, call) == {"action": "accept", "content": {**SIX_ANSWERS, "guests": 4}}
        await s.fake.wait_for(lambda m: m is card and not m.buttons and "Guests: 4" in m.text)
        again = await page(
            b, card, "answer", {"initData": launch_data(s.alice, s.fake.token), "action": "decline"}
        )
        assert again.status_code == 410  # answered: the form is no longer open, on either instance


async def test_a_launch_answers_once_whichever_instances_it_is_replayed_on(postgresql_url: str) -> None:
    """One launch answers one form: replayed on the other instance (either way round) it gets 409 and the form
    it was replayed on stays open for a fresh launch."""
    async with two_instances(postgresql_url) as (s, a, b):
        for first, second in ((a, b), (b, a)):
            call1 = await ask_form(s.alice, SIX_FIELDS, "first form")
            card1 = await s.fake.wait_for(lambda m: has_open_form(m) and "first form" in m.text)
            launch = launch_data(s.alice, s.fake.token)
            declined = await page(first, card1, "answer", {"initData": launch, "action": "decline"})
            assert declined.status_code == 200, declined.text
            assert (await received(s, call1))["action"] == "decline"
            call2 = await ask_form(s.alice, SIX_FIELDS, "second form")
            card2 = await s.fake.wait_for(lambda m: has_open_form(m) and "second form" in m.text)
            replay = await page(second, card2, "answer", {"initData": launch, "action": "decline"})
            assert replay.status_code == 409, replay.text
            fresh = {
                "initData": launch_data(s.alice, s.fake.token),
                "action": "accept",
                "values": SIX_ANSWERS,
            }
            assert (await page(second, card2, "answer", fresh)).status_code == 200
            assert (await received(s, call2))["action"] == "accept"


async def test_an_oauth_callback_on_the_other_instance_completes_the_sign_in(postgresql_url: str) -> None:
    """The sign-in started on A (its SDK flow holds the PKCE verifier); the browser comes back to B: B's page
    says "Signed in" once A exchanged the code, A's card settles and the call completes. The same return again,
    on A, is refused as used."""
    async with serve_protected() as (_auth, url):
        servers = {"gh": {"url": url, "auth": "oauth"}}
        async with two_instances(postgresql_url, servers=servers, in_process={}, secret_key=KEY) as (s, a, b):
            await s.alice.send("/call gh whoami")
            card = await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and CONSENT in m.buttons, timeout=15)
            await s.alice.press(card, CONSENT)
            card = await s.fake.wait_for(lambda m: m is card and "Consent given" in m.text)
            link = card.button(CONSENT).url
            assert link is not None
            back = await sign_in(link, "alice")
            assert back.startswith(PUBLIC_URL + "/oauth/callback?")
            done = await follow(back, f"http://127.0.0.1:{b}")
            assert done.status_code == 200 and "You can go back to Telegram" in done.text, done.text
            await s.fake.wait_for(lambda m: m is card and "Signed in to gh" in m.text)
            await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "you are alice" in m.text, timeout=15)
            replayed = await follow(back, f"http://127.0.0.1:{a}")
            assert replayed.status_code == 400 and "already used" in replayed.text


async def test_an_unknown_sign_in_is_refused_on_any_instance(postgresql_url: str) -> None:
    async with serve_protected() as (_auth, url):
        servers = {"gh": {"url": url, "auth": "oauth"}}
        async with two_instances(postgresql_url, servers=servers, in_process={}, secret_key=KEY) as (
            _s,
            a,
            b,
        ):
            for port in (a, b):
                page_ = await follow(
                    f"{PUBLIC_URL}/oauth/callback?code=x&state=made-up", f"http://127.0.0.1:{port}"
                )
                assert page_.status_code == 400 and "unknown" in page_.text


async def test_a_tools_list_is_found_by_another_instance_until_it_expires(postgresql_url: str) -> None:
    """A list kept by one instance's buttons is read by another's (a tap after a takeover); a place outside the
    list, an unknown token and a list older than a week read as expired."""
    engines = [await open_engine(postgresql_url) for _ in range(2)]
    now = [1000.0]
    try:
        mine, theirs = (ToolButtons(lists=ToolLists(e, clock=lambda: now[0])) for e in engines)
        origin = Origin(chat_id=ALICE_ID, user_id=ALICE_ID)
        token = await mine.add("demo", ["deploy", "status"], origin)
        assert await theirs.get(token, 1) == ("demo", "status", origin)
        assert await theirs.get(token, 2) is None
        assert await theirs.get("unknown", 0) is None
        now[0] += LIST_KEEP_S + 1
        assert await theirs.get(token, 0) is None
    finally:
        with anyio.CancelScope(shield=True):
            for engine in engines:
                await engine.dispose()

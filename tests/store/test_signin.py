"""OAuth sign-in per person, end to end: the real bot (PTB against the fake Bot API) calls a protected MCP server
(the SDK's own server-side auth over streamable HTTP); a scripted browser signs in. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from anyio.streams.text import TextReceiveStream
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from bot.config import Secret, StorageConfig, parse_config
from bot.servers.check import probe
from bot.store import open_store
from bot.store.crypto import new_key
from bot.store.tables import audit, oauth_accounts
from bot.store.tokens import SignInStore
from tests.fakes.servers.oauth import follow, query_of, serve_protected, sign_in
from tests.fakes.telegram import Msg
from tests.ports import free_port
from tests.telegram.harness import ALICE_ID, BOB_ID, Chat, bot_scene

pytestmark = pytest.mark.anyio

KEY = "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4="
PUBLIC = "https://bot.example.com"
EXE = Path(sys.executable).with_name("toolnexus-bot")
CONSENT = "Open 127.0.0.1"


def is_sign_in_card(user_id: int) -> Any:
    def check(m: Msg) -> bool:
        return m.chat_id == user_id and "needs you to sign in" in m.text and CONSENT in m.buttons

    return check


@asynccontextmanager
async def scene(
    url: str, store_url: str, *, public: bool = True, world: Chat | None = None, **oauth: Any
) -> AsyncIterator[tuple[Chat, str]]:
    """The bot with one OAuth server `gh` (`oauth` adds to its table); with `public`, a web endpoint behind
    https://bot.example.com. Yields the scene and the local base URL the reverse proxy would forward to."""
    port = free_port()
    web = {"listen": "127.0.0.1", "port": port, "public_url": PUBLIC} if public else None
    async with bot_scene(
        servers={"gh": {"url": url, "auth": "oauth", **oauth}},
        in_process={},
        storage=store_url,
        secret_key=KEY,
        web=web,
        world=world,
    ) as s:
        yield s, f"http://127.0.0.1:{port}"


async def consent(s: Chat, user: Any, user_id: int) -> tuple[Msg, str]:
    """Wait for the person's sign-in card, tap the consent button; return the card and the link it reveals."""
    card = await s.fake.wait_for(is_sign_in_card(user_id), timeout=15)
    await user.press(card, CONSENT)
    card = await s.fake.wait_for(lambda m: m is card and "Consent given" in m.text)
    link = card.button(CONSENT).url
    assert link is not None
    return card, link


async def signed_in_call(s: Chat, local: str, user: Any, user_id: int, subject: str) -> Msg:
    """`/call gh whoami` by the person, who signs in through the callback; returns the result."""
    await user.send("/call gh whoami")
    card, link = await consent(s, user, user_id)
    back = await sign_in(link, subject)
    assert back.startswith(PUBLIC + "/oauth/callback?")
    page = await follow(back, local)
    assert page.status_code == 200 and "You can go back to Telegram" in page.text
    assert "https://t.me/" in page.text
    await s.fake.wait_for(lambda m: m is card and "Signed in to gh" in m.text)
    return await s.fake.wait_for(
        lambda m: m.chat_id == user_id and f"you are {subject}" in m.text, timeout=15
    )


async def next_result(s: Chat, user_id: int, text: str, after: Msg) -> Msg:
    """The person's next message containing `text`, newer than `after` (in the same chat)."""
    return await s.fake.wait_for(
        lambda m: m.chat_id == user_id and text in m.text and m.message_id > after.message_id, timeout=15
    )


async def test_a_first_call_asks_to_sign_in_and_then_completes_through_the_callback(store_url: str) -> None:
    """No token: the sign-in card (authorization host in bold, full URL), consent, link, sign-in in the
    browser, the callback page; the card settles and the call completes by itself."""
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        await s.alice.send("/call gh whoami")
        card = await s.fake.wait_for(is_sign_in_card(ALICE_ID), timeout=15)
        assert "Authorization server: <b>127.0.0.1</b>" in card.html
        assert "/authorize?" in card.text and "code_challenge_method=S256" in card.text
        assert (
            "resource=" in card.text
            and "redirect_uri=https%3A%2F%2Fbot.example.com%2Foauth%2Fcallback" in card.text
        )
        await s.alice.press(card, CONSENT)
        card = await s.fake.wait_for(lambda m: m is card and "Consent given" in m.text)
        back = await sign_in(card.button(CONSENT).url or "", "alice")
        page = await follow(back, local)
        assert page.status_code == 200 and "You can go back to Telegram" in page.text
        await s.fake.wait_for(lambda m: m is card and "Signed in to gh" in m.text and not m.buttons)
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "you are alice" in m.text, timeout=15)
        replayed = await follow(back, local)
        assert replayed.status_code == 400 and "already used" in replayed.text
    assert server.subjects_seen == ["alice"] and server.grants["authorization_code"] == 1


async def test_the_pasted_address_completes_the_sign_in_for_its_person_only(store_url: str) -> None:
    """Without a public URL the redirect is loopback; the address pasted by another person is refused, by
    the person it belongs to it finishes the sign-in and the call."""
    async with serve_protected() as (server, url), scene(url, store_url, public=False) as (s, _):
        await s.alice.send("/call gh whoami")
        card = await s.fake.wait_for(is_sign_in_card(ALICE_ID), timeout=15)
        assert "copy its address and send it here" in card.text
        assert "redirect_uri=http%3A%2F%2F127.0.0.1%3A8080%2Foauth%2Fcallback" in card.text
        await s.alice.press(card, CONSENT)
        card = await s.fake.wait_for(lambda m: m is card and "Consent given" in m.text)
        back = await sign_in(card.button(CONSENT).url or "", "alice")
        assert back.startswith("http://127.0.0.1:8080/oauth/callback?")
        await s.bob.send(back)
        refused = await s.fake.next_message(s.bob, containing="not yours")
        assert "unknown, not yours, or was already used" in refused.text
        await s.alice.send(back)
        await s.fake.wait_for(lambda m: m is card and "Signed in to gh" in m.text)
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "you are alice" in m.text, timeout=15)
        await s.alice.send(back)
        again = await s.fake.next_message(s.alice, containing="already used")
        assert again.chat_id == ALICE_ID
    assert server.subjects_seen == ["alice"]


async def test_two_people_get_two_tokens_and_logout_of_one_leaves_the_other(store_url: str) -> None:
    """Alice and Bob each sign in; the server sees two subjects; /accounts lists no token material;
    /logout of Alice revokes and deletes hers (her next call asks again) and Bob's still works."""
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        first = await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        bobs = await signed_in_call(s, local, s.bob, BOB_ID, "bob")
        assert server.subjects_seen == ["alice", "bob"]
        await s.alice.send("/accounts")
        listed = await s.fake.next_message(s.alice, containing="Your sign-ins")
        assert "gh" in listed.text and "http://127.0.0.1:" in listed.text and "expires" in listed.text
        assert not any(token in listed.text for token in server.issued)
        await s.alice.send("/logout gh")
        await s.fake.next_message(s.alice, containing="Signed out of gh")
        assert server.revocations == 1
        await s.bob.send("/call gh whoami")
        await next_result(s, BOB_ID, "you are bob", bobs)
        await s.alice.send("/call gh whoami")
        again = await next_result(s, ALICE_ID, "needs you to sign in", first)
        assert CONSENT in again.buttons
    assert server.subjects_seen == ["alice", "bob", "bob"]
    events = await audit_events(store_url)
    assert events.count("signed_in") == 2 and events.count("logged_out") == 1


async def test_the_call_right_after_logout_asks_to_sign_in_while_the_old_session_is_still_closing(
    store_url: str,
) -> None:
    """/logout closes the person's session; its close is held open at the server (a 2025-era session ends with a
    DELETE, which waits), and the call sent meanwhile gets a new session and a fresh sign-in card, not the
    closing one ("Connection closed"). Let go, the old session ends without a sign-in card of its own (its
    DELETE, refused for the revoked token, does not ask the person to sign in)."""
    async with serve_protected() as (server, url), scene(url, store_url, protocol="legacy") as (s, local):
        first = await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        closing, release = anyio.Event(), anyio.Event()

        async def hold_the_close() -> None:
            closing.set()
            await release.wait()

        server.on_session_end = hold_the_close
        try:
            await s.alice.send("/logout gh")
            await s.fake.next_message(s.alice, containing="Signed out of gh")
            with anyio.fail_after(10):
                await closing.wait()
            await s.alice.send("/call gh whoami")
            again = await next_result(s, ALICE_ID, "needs you to sign in", first)
            assert CONSENT in again.buttons
        finally:
            release.set()
        for _ in range(200):  # the old session ends; the new one waits for its sign-in: it is not open yet
            if await sessions_open(local) == 0:
                break
            await anyio.sleep(0.05)
        else:
            raise AssertionError("the signed-out session did not end")
        after = [m for m in s.fake.messages(s.alice, from_bot=True) if m.message_id > first.message_id]
        assert [m.text.split("\n")[0] for m in after] == ["Signed out of gh.", "🔑 gh needs you to sign in:"]
    assert server.subjects_seen == ["alice"]


async def sessions_open(local: str) -> float:
    """The bot's open MCP sessions, from its /metrics."""
    async with httpx.AsyncClient() as http:
        response = await http.get(local + "/metrics")
    samples = (s for f in text_string_to_metric_families(response.text) for s in f.samples)
    return next(s.value for s in samples if s.name == "toolnexus_mcp_sessions_open")


async def test_a_group_call_sends_the_sign_in_card_privately(store_url: str) -> None:
    """A call in a group: the card goes to the person's private chat, the group gets one line."""
    async with serve_protected() as (_, url), scene(url, store_url) as (s, _):
        await s.alice.send("/call gh whoami", chat=s.group)
        note = await s.fake.next_message(s.group, containing="sign-in link", timeout=15)
        assert "I sent you a sign-in link for gh in private" in note.text and not note.buttons
        await s.fake.wait_for(is_sign_in_card(ALICE_ID))
        assert not any("authorize?" in m.text for m in s.fake.messages(s.group))


async def test_a_foreign_or_made_up_state_is_refused_at_the_callback(store_url: str) -> None:
    """A callback with a state nobody is waiting for is refused with a page; the real sign-in still works."""
    async with serve_protected() as (_, url), scene(url, store_url) as (s, local):
        await s.alice.send("/call gh whoami")
        card, link = await consent(s, s.alice, ALICE_ID)
        forged = await follow(f"{PUBLIC}/oauth/callback?code=x&state=not-the-state", local)
        assert forged.status_code == 400 and "unknown" in forged.text
        back = await sign_in(link, "alice")
        wrong_issuer = back.replace("iss=", "iss=https%3A%2F%2Fevil.example&x=")
        refused = await follow(wrong_issuer, local)
        assert refused.status_code == 400 and "another authorization server" in refused.text
        told = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "another authorization server" in m.text, timeout=10
        )
        assert "Traceback" not in told.text
        await s.fake.wait_for(lambda m: m is card and "Cancelled" in m.text and not m.buttons)


async def test_an_expiring_token_is_refreshed_silently_before_and_after_a_restart(store_url: str) -> None:
    """A token close to its expiry is refreshed before use (the server would refuse the old one), in the
    same process and in a new one that only has the store; nobody is asked to sign in again."""
    async with serve_protected(access_ttl_s=30) as (server, url), scene(url, store_url) as (s, local):
        first = await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        server.expire_access_tokens()  # as if the 30 s had passed: only a refresh gets in now
        await s.alice.send("/call gh whoami")
        second = await next_result(s, ALICE_ID, "you are alice", first)
        refreshed = server.grants["refresh_token"]
        assert refreshed >= 1
        s.stop.set()
        with anyio.fail_after(10):
            await s.stopped.wait()
        server.expire_access_tokens()
        async with scene(url, store_url, world=s) as (s2, _):  # a new bot process on the same database
            await s2.alice.send("/call gh whoami")
            await next_result(s2, ALICE_ID, "you are alice", second)
    assert (await audit_events(store_url)).count("question_shown") == 1, "asked to sign in again"
    assert server.grants["authorization_code"] == 1
    assert server.grants["refresh_token"] > refreshed
    assert server.subjects_seen == ["alice"] * 3


async def test_a_revoked_refresh_token_shows_the_sign_in_card_again(store_url: str) -> None:
    """The server revoked everything: the refresh fails, the person gets the sign-in card (no error stack),
    and the failure is audited."""
    async with serve_protected(access_ttl_s=30) as (server, url), scene(url, store_url) as (s, local):
        first = await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        server.revoke_subject("alice")
        server.expire_access_tokens()
        await s.alice.send("/call gh whoami")
        card = await next_result(s, ALICE_ID, "needs you to sign in", first)
        assert CONSENT in card.buttons and "Traceback" not in card.text
    assert "refresh_failed" in await audit_events(store_url)


async def test_tokens_are_unreadable_without_the_key_and_never_logged(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database holds no token in the clear, the columns do not open with another key, and no log line
    carries a token, the code or the client secret."""
    for name in ("", "httpx2", "httpcore2", "mcp", "bot"):  # another test's set-up may have raised some
        caplog.set_level(logging.DEBUG, logger=name)
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
    async with open_store(StorageConfig(url=Secret(store_url))) as store, store.engine.connect() as conn:
        rows = (await conn.execute(select(oauth_accounts))).all()
    dump = repr(rows)
    assert rows and all(token not in dump for token in server.issued)
    secrets_ = [*server.issued, *(c.client_secret or "" for c in server.clients.values())]
    async with open_store(StorageConfig(url=Secret(store_url))) as store:
        assert await SignInStore(store.engine, new_key()).tokens(ALICE_ID, "gh") is None
        assert await SignInStore(store.engine, KEY).tokens(ALICE_ID, "gh") is not None
    logged = "\n".join(r.getMessage() + repr(r.args) for r in caplog.records)
    assert "POST http://127.0.0.1" in logged  # the bot's HTTP requests were captured, at DEBUG
    assert len(secrets_) >= 3 and not [s for s in secrets_ if s and s in logged]


async def audit_events(store_url: str) -> list[str]:
    async with open_store(StorageConfig(url=Secret(store_url))) as store, store.engine.connect() as conn:
        return [row.event for row in (await conn.execute(select(audit.c.event).order_by(audit.c.seq))).all()]


def test_scripted_browser_helpers_parse_queries() -> None:
    """query_of reads a redirect's parameters."""
    assert query_of("http://h/cb?code=a&state=b") == {"code": "a", "state": "b"}


async def test_the_console_signs_in_through_its_loopback_redirect(store_url: str, tmp_path: Path) -> None:
    """`toolnexus-bot console`: the sign-in link is printed, the browser comes back to the console's loopback
    page, and the call completes."""
    port = free_port()
    async with serve_protected() as (server, url):
        config = tmp_path / "bot.toml"
        config.write_text(
            f'[web]\nport = {port}\n[storage]\nurl = "{store_url}"\nsecret_key = "{KEY}"\n'
            f'[servers.gh]\nurl = "{url}"\nauth = "oauth"\n'
        )
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = await anyio.open_process(
            [str(EXE), "console", "--config", str(config)], env=env, stderr=subprocess.STDOUT
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            lines = TextReceiveStream(process.stdout)
            seen = ""

            async def until(text: str, after: str = "") -> str:
                """Read the console's output until `text` shows (after `after`, when given)."""
                nonlocal seen
                with anyio.fail_after(30):
                    while text not in (seen.partition(after)[2] if after else seen):
                        try:
                            seen += await lines.receive()
                        except anyio.EndOfStream:
                            raise AssertionError(seen) from None
                return seen

            await process.stdin.send(b"/call gh whoami\n")
            await until("[y]es")
            await process.stdin.send(b"y\n")
            after = "Open this link in your browser:\n"
            link = (await until("scope=tools", after)).split(after, 1)[1].split()[0]
            back = await sign_in(link, "carol")
            assert back.startswith(f"http://127.0.0.1:{port}/oauth/callback?")
            page = await follow(back, f"http://127.0.0.1:{port}")
            assert page.status_code == 200 and "You can go back to Telegram" in page.text
            await until("you are carol")
            assert "Signed in to gh" in seen
            await process.stdin.send(b"/quit\n")
            with anyio.fail_after(15):
                assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
            with anyio.CancelScope(shield=True):
                await process.aclose()
    assert server.subjects_seen == ["carol"]


async def test_tools_asks_to_sign_in_and_then_lists_the_tools(store_url: str) -> None:
    """/tools for a server with no token: the sign-in card, then the tool list by itself."""
    async with serve_protected() as (_, url), scene(url, store_url) as (s, local):
        await s.alice.send("/tools gh")
        _, link = await consent(s, s.alice, ALICE_ID)
        await follow(await sign_in(link, "alice"), local)
        listing = await s.fake.next_message(s.alice, containing="tap a tool", timeout=15)
        assert "whoami" in listing.buttons


async def test_a_cancelled_sign_in_ends_the_call_and_the_next_call_asks_again_at_once(store_url: str) -> None:
    """Cancel on the card: the call ends with one plain line (no stack), and the server is not put on
    back-off for it: the next call shows a new card straight away."""
    async with serve_protected() as (server, url), scene(url, store_url) as (s, _):
        await s.alice.send("/call gh whoami")
        card = await s.fake.wait_for(is_sign_in_card(ALICE_ID), timeout=15)
        await s.alice.press(card, "Cancel")
        told = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "sign-in to gh was cancelled" in m.text
        )
        assert "Traceback" not in told.text and "retrying" not in told.text
        await s.alice.send("/call gh whoami")
        again = await next_result(s, ALICE_ID, "needs you to sign in", told)
        assert CONSENT in again.buttons
    assert server.subjects_seen == []


async def test_check_reports_an_oauth_server_as_reachable_and_asking_for_sign_in() -> None:
    """`toolnexus-bot check` has no person to sign in: a 401 from an OAuth server is its expected answer."""
    async with serve_protected() as (_, url):
        config = parse_config(
            {
                "servers": {"gh": {"url": url, "auth": "oauth"}},
                "storage": {"url": "sqlite:///x", "secret_key": KEY},
            },
            {},
        )
        result = await probe(config.servers[0], 10)
    assert result.ok and "asks each person to sign in" in result.line


async def test_cancel_after_consent_ends_the_sign_in_and_its_link(store_url: str) -> None:
    """The consented card keeps a Cancel button: it settles the card and ends the call; the link's state
    is dead from then on."""
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        await s.alice.send("/call gh whoami")
        card, link = await consent(s, s.alice, ALICE_ID)
        await s.alice.press(card, "Cancel")
        await s.fake.wait_for(lambda m: m is card and "Cancelled" in m.text and not m.buttons)
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "sign-in to gh was cancelled" in m.text)
        late = await follow(await sign_in(link, "alice"), local)
        assert late.status_code == 400
    assert server.subjects_seen == []


async def test_servers_does_not_send_sign_in_cards(store_url: str) -> None:
    """/servers names an OAuth server the person is not signed in to, with the way to sign in, and sends no
    card; once signed in, it lists its tools."""
    async with serve_protected() as (_, url), scene(url, store_url) as (s, local):
        await s.alice.send("/servers")
        listed = await s.fake.next_message(s.alice, containing="Servers", timeout=15)
        assert "sign in first (/tools gh)" in listed.text
        assert not any("needs you to sign in" in m.text for m in s.fake.messages(ALICE_ID))
        await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        await s.alice.send("/servers")
        again = await s.fake.next_message(s.alice, containing="Servers", timeout=15)
        assert "gh</b>: 1 tools" in again.html or "gh: 1 tools" in again.text


async def test_stopping_the_bot_settles_a_consented_sign_in_card(store_url: str) -> None:
    """SIGTERM while the browser is still out: the consented card says the bot is stopping, no buttons."""
    async with serve_protected() as (_, url), scene(url, store_url) as (s, _):
        await s.alice.send("/call gh whoami")
        card, _link = await consent(s, s.alice, ALICE_ID)
        s.stop.set()
        with anyio.fail_after(10):
            await s.stopped.wait()
        assert "the bot is stopping" in card.text and not card.buttons


async def test_a_preregistered_client_sends_its_secret_by_basic_where_the_server_takes_only_basic(
    store_url: str,
) -> None:
    """A confidential client configured with client_id and client_secret, on a server that takes its secret
    only in an HTTP Basic header: the code's exchange, a refresh after a restart and the revocation at
    /logout all authenticate that way (none registers a new client)."""
    async with serve_protected(access_ttl_s=30) as (server, url):
        server.preregister("toolnexus", "s3cret:/+", "client_secret_basic", PUBLIC + "/oauth/callback")
        oauth: dict[str, Any] = {"client_id": "toolnexus", "client_secret": "s3cret:/+"}
        async with scene(url, store_url, **oauth) as (s, local):
            first = await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
            s.stop.set()
            with anyio.fail_after(10):
                await s.stopped.wait()
            server.expire_access_tokens()
            async with scene(url, store_url, world=s, **oauth) as (s2, _):  # a new process, the same database
                await s2.alice.send("/call gh whoami")
                await next_result(s2, ALICE_ID, "you are alice", first)
                await s2.alice.send("/logout gh")
                await s2.fake.next_message(s2.alice, containing="Signed out of gh")
    assert server.grants["authorization_code"] == 1 and server.grants["refresh_token"] >= 1
    assert server.authorized_clients == ["toolnexus"] and server.registrations == 0
    # (The SDK's own /revoke then wants client_secret in the form even after Basic: mcp 2.3.0's RevocationRequest.)
    assert {how for _, how in server.client_auth} == {"basic"} and ("/revoke", "basic") in server.client_auth


async def test_a_preregistered_client_follows_the_servers_metadata_or_the_configured_method(
    store_url: str,
) -> None:
    """The metadata offers only client_secret_post: the secret goes in the body; the configured
    token_endpoint_auth_method wins over the metadata."""
    async with serve_protected() as (server, url):
        server.metadata["token_endpoint_auth_methods_supported"] = ["client_secret_post"]
        server.preregister("by-post", "pw", "client_secret_post", PUBLIC + "/oauth/callback")
        server.preregister("by-basic", "pw", "client_secret_basic", PUBLIC + "/oauth/callback")
        async with scene(url, store_url, client_id="by-post", client_secret="pw") as (s, local):
            await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
            s.stop.set()
            with anyio.fail_after(10):
                await s.stopped.wait()
            method: dict[str, Any] = {"token_endpoint_auth_method": "client_secret_basic"}
            async with scene(url, store_url, world=s, client_id="by-basic", client_secret="pw", **method) as (
                s2,
                web,
            ):
                await signed_in_call(s2, web, s2.bob, BOB_ID, "bob")
    assert server.grants["authorization_code"] == 2 and server.registrations == 0
    assert [how for path, how in server.client_auth if path == "/token"] == ["post", "basic"]


async def test_the_bot_serves_its_client_metadata_document_and_uses_it_where_the_server_takes_one(
    store_url: str,
) -> None:
    """With an https public URL and a server advertising client_id_metadata_document_supported, the client id
    is <public_url>/oauth/client-metadata.json (no registration); the server fetches that document from the
    bot and finds the redirect URI in it. A server without the flag still gets a dynamic registration."""
    document_url = PUBLIC + "/oauth/client-metadata.json"
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        server.metadata["client_id_metadata_document_supported"] = True
        server.documents_at = local
        await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
        assert server.authorized_clients == [document_url] and server.registrations == 0
        assert server.documents[0] == {
            "client_id": document_url,
            "client_name": "toolnexus-bot",
            "redirect_uris": [PUBLIC + "/oauth/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }
        del server.metadata["client_id_metadata_document_supported"]
        await signed_in_call(s, local, s.bob, BOB_ID, "bob")
    assert server.registrations == 1 and server.authorized_clients[1] != document_url


async def test_the_callback_page_says_signed_in_only_once_the_code_is_exchanged(store_url: str) -> None:
    """The browser comes back with the right state but a code the server never issued: the page says the
    server refused it (not "Signed in"), the card is not marked signed in, the person is told."""
    async with serve_protected() as (server, url), scene(url, store_url) as (s, local):
        await s.alice.send("/call gh whoami")
        card, link = await consent(s, s.alice, ALICE_ID)
        state = query_of(link)["state"]
        page = await follow(f"{PUBLIC}/oauth/callback?code=made-up&state={state}&iss={server.issuer}", local)
        assert page.status_code == 400 and "Not signed in" in page.text and "Signed in<" not in page.text
        assert "refused the sign-in code (400 invalid_grant)" in page.text
        told = await s.fake.wait_for(
            lambda m: m.chat_id == ALICE_ID and "refused the sign-in code" in m.text and m is not card,
            timeout=10,
        )
        assert "Traceback" not in told.text
        await s.fake.wait_for(lambda m: m is card and "Cancelled" in m.text and not m.buttons)
        assert "Signed in" not in card.text
    assert server.subjects_seen == [] and "signed_in" not in await audit_events(store_url)


async def test_logout_after_a_restart_revokes_where_the_metadata_is_found_only_by_oidc_discovery(
    store_url: str,
) -> None:
    """The authorization server publishes its metadata by OpenID Connect discovery only: a new process, whose
    provider has discovered nothing yet, finds it the SDK's way and revokes the token at /logout."""
    async with serve_protected() as (server, url):
        server.oidc_only = True
        async with scene(url, store_url) as (s, local):
            await signed_in_call(s, local, s.alice, ALICE_ID, "alice")
            s.stop.set()
            with anyio.fail_after(10):
                await s.stopped.wait()
            async with scene(url, store_url, world=s) as (s2, _):  # a new process, the same database
                await s2.alice.send("/logout gh")
                await s2.fake.next_message(s2.alice, containing="Signed out of gh")
    assert server.revocations == 1

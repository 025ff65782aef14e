"""At `--log-level DEBUG` nothing a person typed reaches the log: a form, a sign-in and an approval run through
the real bot on SQLite and on PostgreSQL with the bot's own logging set-up, and the whole log is searched."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bot.logs import setup_logging
from tests.fakes.servers.elicit import build_server as build_elicit
from tests.fakes.servers.ledger import Ledger
from tests.fakes.servers.oauth import follow, serve_protected, sign_in
from tests.inprocess import logging_restored
from tests.ports import free_port
from tests.store.test_signin import KEY, PUBLIC, consent
from tests.telegram.harness import ALICE_ID, BOB_ID, bot_scene

pytestmark = pytest.mark.anyio

TYPED = "typed-answer-5b7e1"
ARGUMENT = "argument-value-c90d"
VERSION = "version-value-44af"
SCHEMA = {"type": "object", "properties": {"motto": {"type": "string"}}, "required": ["motto"]}


@pytest.fixture
def whole_log() -> Iterator[io.StringIO]:
    """The bot's logging set-up at DEBUG, and every record that reaches the root logger, as text."""
    with logging_restored():
        setup_logging("DEBUG")
        stream = io.StringIO()
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        # an operator's file handler: it sees what the bot's own sees, unfiltered
        logging.getLogger().addHandler(handler)
        yield stream


async def test_at_debug_no_typed_answer_argument_or_token_reaches_the_log(
    store_url: str, whole_log: io.StringIO
) -> None:
    """Alice answers a text question, signs in to an OAuth server, and calls a gated tool that Bob approves;
    the log (at DEBUG, the bot's own lines among it) holds none of her values, no token and no code."""
    ledger = Ledger()
    port = free_port()
    async with (
        serve_protected() as (auth, url),
        bot_scene(
            servers={
                "gh": {"url": url, "auth": "oauth"},
                "t": {"command": "in-process"},
                "prod": {"command": "in-process"},
            },
            in_process={"t": build_elicit, "prod": ledger.build},
            storage=store_url,
            secret_key=KEY,
            web={"listen": "127.0.0.1", "port": port, "public_url": PUBLIC},
            approvals=[{"servers": ["prod"], "tools": ["deploy"], "approvers": [BOB_ID, 3003], "quorum": 1}],
        ) as s,
    ):
        s.fake.user(id=3003, first_name="Carol")  # the other approver
        await s.alice.send("/call t ask_form " + json.dumps({"schema_json": json.dumps(SCHEMA)}))
        card = await s.fake.wait_for(lambda m: "motto" in m.text.lower() and bool(m.reply_markup))
        await s.alice.send(TYPED, reply_to=card)
        review = await s.fake.wait_for(lambda m: "Please review" in m.text and bool(m.reply_markup))
        await s.alice.press(review, "✅ Submit")
        await s.fake.wait_for(lambda m: TYPED in m.text and "✅" in m.text)

        await s.alice.send("/call gh whoami")
        _card, link = await consent(s, s.alice, ALICE_ID)
        back = await sign_in(link, "alice")
        page = await follow(back, f"http://127.0.0.1:{port}")
        assert page.status_code == 200
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and "you are alice" in m.text, timeout=15)

        await s.alice.send(f"/call prod deploy service={ARGUMENT} version={VERSION}")
        approval = await s.fake.wait_for(lambda m: m.chat_id == BOB_ID and "Approval" in m.text)
        await s.bob.press(approval, "✅ Approve")
        await s.fake.wait_for(lambda m: m.chat_id == ALICE_ID and f"deployed {ARGUMENT}" in m.text)
    assert ledger.calls == [("deploy", {"service": ARGUMENT, "version": VERSION})]
    log = whole_log.getvalue()
    assert logging.getLogger("bot.store").isEnabledFor(logging.DEBUG)  # the bot's own DEBUG lines would show
    logging.getLogger("asyncio").debug("an allow-listed library's line")
    assert "DEBUG asyncio: an allow-listed library's line" in whole_log.getvalue()  # so do a library's
    code = back.partition("code=")[2].partition("&")[0]
    private = [TYPED, ARGUMENT, VERSION, code, KEY, *auth.issued]
    assert len(private) >= 6 and all(private)
    assert [value for value in private if value in log] == []

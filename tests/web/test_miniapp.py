"""Long forms as a Mini App, over HTTP: when the Open form button appears, and what the page's endpoint takes.

The real bot (PTB against the fake Bot API, uvicorn on 127.0.0.1) and the real elicit test server; requests
play the page (the browser tests in test_miniapp_browser.py drive the page itself). Launch data is signed
with the fake's bot token, as Telegram signs it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from telegram import InlineKeyboardButton, WebAppInfo

from bot.config import MiniAppConfig, parse_config
from bot.telegram.render import web_app_button
from bot.web.miniapp import check_init_data, sign_init_data
from bot.web.miniapp.initdata import Launch, Refused
from mapping import FieldError, parse_schema, parse_text
from tests.fakes.telegram import Msg
from tests.telegram.harness import bot_scene
from tests.web.support import (
    EVERY_KIND,
    OPEN_FORM,
    PUBLIC_URL,
    SIX_ANSWERS,
    SIX_FIELDS,
    api,
    ask_form,
    launch_data,
    local_path,
    mini_scene,
    received,
)

pytestmark = pytest.mark.anyio

TOKEN = "123456:TEST-token"
ONE_SERVER: dict[str, Any] = {"servers": {"demo": {"command": "python"}}}


def has_open_form(m: Msg) -> bool:
    return OPEN_FORM in m.buttons


def one_field(prop: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"x": {"title": "X", **prop}}}


# -- launch data (pure) ---------------------------------------------------------------------------------


def test_launch_data_signed_for_this_bot_names_its_user() -> None:
    """Launch data signed with the bot's token, fresh, is taken and names its user."""
    raw = launch_data(42, TOKEN)
    checked = check_init_data(raw, TOKEN, now=time.time(), max_age_s=60)
    assert isinstance(checked, Launch) and checked.user_id == 42


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (launch_data(42, "999:other-bot"), "not signed"),
        (launch_data(42, TOKEN, age_s=3600), "too old"),
        (launch_data(42, TOKEN, age_s=-3600), "future"),
        (launch_data(42, TOKEN).replace("42", "43"), "not signed"),
        (launch_data(42, TOKEN) + "&user=x", "repeats"),
        ("", "no Telegram launch data"),
        (None, "no Telegram launch data"),
        ("a=1&&&", "malformed"),
        (sign_init_data({"auth_date": "1"}, TOKEN).replace("auth_date=1", "auth_date=2"), "not signed"),
    ],
    ids=[
        "other bot",
        "stale",
        "future",
        "edited user",
        "repeated key",
        "empty",
        "missing",
        "malformed",
        "edited",
    ],
)
def test_forged_stale_or_malformed_launch_data_is_refused(raw: object, why: str) -> None:
    """A signature by another token, an edit, an old or future auth_date, or garbage is refused, saying why."""
    checked = check_init_data(raw, TOKEN, now=time.time(), max_age_s=900)
    assert isinstance(checked, Refused) and why in checked.reason


def test_signed_launch_data_without_a_user_is_refused() -> None:
    """Launch data that checks out but names nobody cannot answer anyone's form."""
    raw = sign_init_data({"auth_date": str(int(time.time()))}, TOKEN)
    checked = check_init_data(raw, TOKEN, now=time.time(), max_age_s=900)
    assert isinstance(checked, Refused) and "no user" in checked.reason


# -- when the button appears ----------------------------------------------------------------------------


def test_the_open_form_button_is_telegrams_web_app_button_on_the_wire() -> None:
    """The card's button is what PTB's InlineKeyboardButton(web_app=WebAppInfo(url)) sends."""
    url = PUBLIC_URL + "/app/abc"
    ptb = InlineKeyboardButton(OPEN_FORM, web_app=WebAppInfo(url)).to_dict()
    assert web_app_button(OPEN_FORM, url) == ptb


async def test_a_long_form_in_a_private_chat_gets_open_form_beside_the_chat_flow() -> None:
    """Six fields in a private chat: the card offers Open form (the public URL's page under an opaque token)
    and still the chat flow's own buttons."""
    async with mini_scene() as (s, _):
        await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        url = card.button(OPEN_FORM).web_app
        assert url is not None and url.startswith(PUBLIC_URL + "/app/")
        token = url.rsplit("/", 1)[1]
        assert len(token) >= 12 and "elc-" not in url
        assert "Decline" in card.buttons and "Cancel" in card.buttons and "Reply" in card.text
        await s.alice.send("Ada", reply_to=card)  # the chat flow goes on; the button stays on the new card
        card = await s.fake.wait_for(lambda m: "<b>Email</b>" in m.html and has_open_form(m))


@pytest.mark.parametrize(
    ("schema", "offered"),
    [
        (one_field({"type": "string", "format": "date"}), True),
        (one_field({"type": "string", "format": "date-time"}), True),
        (one_field({"type": "array", "items": {"enum": [str(i) for i in range(9)]}}), True),
        (one_field({"type": "array", "items": {"enum": [str(i) for i in range(8)]}}), False),
        (one_field({"type": "string", "format": "email"}), False),
    ],
    ids=["date", "date-time", "9 options", "8 options", "one email"],
)
async def test_a_date_or_a_multi_select_over_eight_options_alone_gets_the_button(
    schema: dict[str, Any], offered: bool
) -> None:
    """One field is enough when it is a date, a date-time, or a multi-select over eight options."""
    async with mini_scene() as (s, _):
        await ask_form(s.alice, schema)
        card = await s.fake.wait_for(lambda m: "Decline" in m.buttons)
        assert has_open_form(card) is offered


async def test_groups_and_bots_without_a_public_url_keep_the_chat_flow_only() -> None:
    """The same long form asked in a group, or by a bot with no public URL, has no Open form button."""
    async with mini_scene() as (s, _):
        await s.alice.send(
            "/call t ask_form " + json.dumps({"schema_json": json.dumps(SIX_FIELDS)}), chat=s.group
        )
        card = await s.fake.wait_for(lambda m: m.chat_id == s.group and "Decline" in m.buttons)
        assert not has_open_form(card)
    async with bot_scene() as s:
        await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(lambda m: "Decline" in m.buttons)
        assert not has_open_form(card)


def test_miniapp_thresholds_come_from_the_config() -> None:
    """`[miniapp]` sets the thresholds; enabled = false turns the button off."""
    config = parse_config({**ONE_SERVER, "web": {"public_url": PUBLIC_URL}}, {})
    assert config.miniapp_on and config.miniapp == MiniAppConfig()
    off = parse_config({**ONE_SERVER, "web": {"public_url": PUBLIC_URL}, "miniapp": {"enabled": False}}, {})
    assert not off.miniapp_on
    assert not parse_config({**ONE_SERVER, "web": {}}, {}).miniapp_on
    tuned = parse_config({**ONE_SERVER, "miniapp": {"min_fields": 5, "many_options": 20}}, {})
    assert (tuned.miniapp.min_fields, tuned.miniapp.many_options) == (5, 20)


# -- the endpoint ---------------------------------------------------------------------------------------


async def test_a_page_answer_reaches_the_server_typed_and_settles_the_card() -> None:
    """Accepted values are parsed by mapping (the integer 4, the boolean true, the date as typed); the server
    gets them and the chat card is settled as a chat answer would be, listing them."""
    async with mini_scene() as (s, port):
        call = await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        initdata = launch_data(s.alice, s.fake.token)
        form = await api(port, card, "form", {"initData": initdata})
        assert form.status_code == 200
        assert [f["kind"] for f in form.json()["fields"]] == [
            "text",
            "email",
            "date",
            "integer",
            "boolean",
            "choice",
        ]
        answer = await api(
            port, card, "answer", {"initData": initdata, "action": "accept", "values": SIX_ANSWERS}
        )
        assert answer.status_code == 200, answer.text
        got = await received(s, call)
        assert got == {"action": "accept", "content": {**SIX_ANSWERS, "guests": 4}}
        assert type(got["content"]["guests"]) is int and got["content"]["vegan"] is True
        await s.fake.wait_for(lambda m: m is card and not m.buttons and "Guests: 4" in m.text)
        assert "Vegan menu: Yes" in card.text


async def test_bad_values_get_the_chat_flows_reasons_and_nothing_is_sent() -> None:
    """A check names the chat flow's reason for one value; an answer with bad values is a 422 listing each
    field's reason, the server receives nothing, and the form stays open (a decline then goes through)."""
    spec = parse_schema(EVERY_KIND)
    async with mini_scene() as (s, port):
        call = await ask_form(s.alice, EVERY_KIND)
        card = await s.fake.wait_for(has_open_form)
        initdata = launch_data(s.alice, s.fake.token)
        check = await api(port, card, "check", {"initData": initdata, "name": "guests", "value": "13"})
        expected = parse_text(spec.field("guests"), "13")
        assert isinstance(expected, FieldError)
        assert check.json() == {"reason": expected.reason}
        ok = await api(port, card, "check", {"initData": initdata, "name": "guests", "value": "12"})
        assert ok.json() == {"reason": None}
        values = {
            "name": "A",
            "email": "nope",
            "guests": "2.5",
            "vegan": "yes",
            "room": "<script>",
            "extras": ["x"],
        }
        bad = await api(port, card, "answer", {"initData": initdata, "action": "accept", "values": values})
        assert bad.status_code == 422
        errors = bad.json()["errors"]
        assert set(errors) == {"name", "email", "guests", "vegan", "room", "extras", "day", "starts"}
        assert errors["day"] == "this question needs an answer; it cannot be skipped"
        assert errors["vegan"] == "must be yes or no"
        assert card.buttons and not [
            m for m in s.fake.messages(s.alice, from_bot=True) if "ask_form" in m.text
        ]
        declined = await api(port, card, "answer", {"initData": initdata, "action": "decline"})
        assert declined.status_code == 200
        assert (await received(s, call))["action"] == "decline"


async def test_forged_foreign_stale_and_replayed_launches_are_refused_and_change_nothing() -> None:
    """Forged or stale launch data: 401; another person's: 403; once answered: 410; the same launch on
    another open form: 409. Each leaves the form open and the server waiting."""
    async with mini_scene() as (s, port):
        first = await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        body: dict[str, Any] = {"action": "accept", "values": SIX_ANSWERS}
        forged = await api(port, card, "answer", {**body, "initData": launch_data(s.alice, "1:forged")})
        stale = await api(
            port, card, "answer", {**body, "initData": launch_data(s.alice, s.fake.token, age_s=3600)}
        )
        bob = await api(port, card, "answer", {**body, "initData": launch_data(s.bob, s.fake.token)})
        bob_reads = await api(port, card, "form", {"initData": launch_data(s.bob, s.fake.token)})
        assert [r.status_code for r in (forged, stale, bob, bob_reads)] == [401, 401, 403, 403]
        assert "not signed" in forged.json()["error"] and "too old" in stale.json()["error"]
        assert "Decline" in card.buttons  # still open
        initdata = launch_data(s.alice, s.fake.token)
        assert (await api(port, card, "answer", {**body, "initData": initdata})).status_code == 200
        await received(s, first)
        again = await api(port, card, "answer", {**body, "initData": initdata})
        assert again.status_code == 410
        await ask_form(s.alice, SIX_FIELDS, message="Second form")
        second = await s.fake.wait_for(lambda m: "Second form" in m.text and has_open_form(m))
        replayed = await api(port, second, "answer", {**body, "initData": initdata})
        assert replayed.status_code == 409
        fresh = await api(
            port, second, "answer", {"action": "cancel", "initData": launch_data(s.alice, s.fake.token)}
        )
        assert fresh.status_code == 200


async def test_whichever_of_chat_and_page_finishes_first_answers() -> None:
    """Declined in the chat: the page's answer is then a 410. Answered on the page: a chat tap says expired."""
    async with mini_scene() as (s, port):
        call = await ask_form(s.alice, SIX_FIELDS)
        card = await s.fake.wait_for(has_open_form)
        await s.alice.press(card, "Decline")
        assert (await received(s, call))["action"] == "decline"
        late = await api(
            port,
            card,
            "answer",
            {"initData": launch_data(s.alice, s.fake.token), "action": "accept", "values": SIX_ANSWERS},
        )
        assert late.status_code == 410
        await ask_form(s.alice, SIX_FIELDS, message="Again")
        card = await s.fake.wait_for(lambda m: "Again" in m.text and has_open_form(m))
        stale_card = card.history[-1]
        done = await api(
            port, card, "answer", {"initData": launch_data(s.alice, s.fake.token), "action": "cancel"}
        )
        assert done.status_code == 200
        await s.fake.wait_for(lambda m: m is card and not m.buttons)
        assert stale_card.reply_markup  # the card had buttons a slow tap could still hit
        tap = await s.alice.press_data(
            card, next(b.callback_data for r in stale_card.reply_markup for b in r if b.text == "Decline")
        )
        assert tap.show_alert and "expired" in (tap.text or "")


async def test_the_page_itself_carries_no_prompt_data_and_loads_nothing_from_other_hosts() -> None:
    """GET /app/<token> is the same static page for any token, with a CSP allowing only Telegram's script."""
    async with mini_scene() as (s, port):
        await ask_form(s.alice, SIX_FIELDS, message="Secret message")
        card = await s.fake.wait_for(has_open_form)
        async with httpx.AsyncClient(trust_env=False, timeout=10) as client:
            page = await client.get(f"http://127.0.0.1:{port}{local_path(card)}")
            other = await client.get(f"http://127.0.0.1:{port}/app/not-a-token")
            script = await client.get(f"http://127.0.0.1:{port}/app/_/page.js")
        assert page.status_code == 200 and page.text == other.text and "Secret" not in page.text
        csp = page.headers["content-security-policy"]
        assert "script-src 'self' https://telegram.org;" in csp and "default-src 'none'" in csp
        assert "https://telegram.org/js/telegram-web-app.js" in page.text
        assert script.status_code == 200 and "innerHTML" not in script.text

"""Link cards show what a browser would open: real PTB against the fake Bot API, the real elicit test server
asking URL-mode questions; and the console, run as a person runs it, through a pipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bot.core import Origin, Prompt
from bot.telegram.render import MAX_TEXT, Card, consented_screen, prompt_screen, visible_len
from mapping import MAX_SHOWN_URL, Request, RequestKind, check_url
from tests.fakes.telegram import Msg
from tests.telegram.harness import Chat, bot_scene, is_result
from tests.zygote import run_bot_text, server_toml

LONG_URL = "https://good.com/authorize?" + "&".join(f"p{i}=v{i}" for i in range(300)) + "&last=THE-END"
REPO = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("toolnexus-bot")


async def ask_url(s: Chat, url: str) -> tuple[Msg, Msg]:
    """Alice makes the test server ask her to open `url`; her /call and the card."""
    call = await s.alice.send("/call t ask_url " + json.dumps({"url": url}))
    card = await s.fake.wait_for(lambda m: "open a link" in m.text and bool(m.buttons))
    return call, card


async def server_saw(s: Chat, call: Msg) -> dict[str, Any]:
    """The test server's report of the answer it got (the body of the call's result message)."""
    result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=10)
    answer: dict[str, Any] = json.loads(result.text.split("\n", 1)[1])
    return answer


@pytest.mark.anyio
async def test_a_link_too_long_to_show_whole_gets_no_button_and_decline_works() -> None:
    """The card shows the host, the start and the end and says it was cut; it offers Decline and Cancel only,
    a forged consent tap is refused, and Decline reaches the server."""
    assert len(LONG_URL) > MAX_SHOWN_URL
    async with bot_scene(protocol="legacy") as s:
        call, card = await ask_url(s, LONG_URL)
        assert card.buttons == ["Decline", "Cancel"]
        assert not any(b.url for row in card.reply_markup for b in row)
        assert "Host: <b>good.com</b>" in card.html
        assert "https://good.com/authorize?p0=v0" in card.text and "last=THE-END" in card.text
        assert "p150=v150" not in card.text and "Cut" in card.text
        decline = card.button("Decline").callback_data
        assert decline is not None
        forged = await s.alice.press_data(card, decline.rsplit(":", 1)[0] + ":o")  # the consent action
        assert forged.show_alert
        await s.alice.press(card, "Decline")
        assert (await server_saw(s, call))["action"] == "decline"
        card = await s.fake.wait_for(lambda m: m is card and not m.buttons)
        assert "Declined" in card.text or "declined" in card.text


@pytest.mark.anyio
async def test_a_backslash_before_the_at_shows_and_opens_the_host_a_browser_goes_to() -> None:
    """`https://evil.com\\@good.com/` goes to evil.com: that host is in bold and on the consent button, and the
    link button opens the URL as the browser reads it."""
    async with bot_scene(protocol="legacy") as s:
        call, card = await ask_url(s, "https://evil.com\\@good.com/")
        assert "Host: <b>evil.com</b>" in card.html and "backslash" in card.text
        await s.alice.press(card, "Open evil.com")
        assert (await server_saw(s, call))["action"] == "accept"
        await s.fake.wait_for(lambda m: m is card and "Done" in m.text)
        consented = card.history[1]  # between consent and the server's completion
        links = [b.url for row in consented.reply_markup for b in row if b.url]
        assert links == ["https://evil.com/@good.com/"]


@pytest.mark.anyio
@pytest.mark.parametrize("url", ["javascript:alert(1)", LONG_URL])
async def test_a_link_required_before_a_call_gets_no_button_when_it_cannot_be_opened(url: str) -> None:
    """-32042 (URL elicitation required) with a link that is not a web address, or too long to show whole:
    the card offers Decline and Cancel only, and Decline ends the call."""
    async with bot_scene(protocol="legacy") as s:
        call = await s.alice.send("/call t needs_auth " + json.dumps({"url": url}))
        card = await s.fake.wait_for(lambda m: "open a link" in m.text and bool(m.buttons))
        assert card.buttons == ["Decline", "Cancel"]
        assert ("not a web address" in card.text) or ("Cut" in card.text)
        await s.alice.press(card, "Decline")
        result = await s.fake.wait_for(lambda m: is_result(m, call), timeout=10)
        assert "authorization declined" in result.text


def test_a_card_with_the_longest_whole_link_and_every_warning_fits_one_message() -> None:
    """A link of nearly MAX_SHOWN_URL characters with a host as long as DNS allows, every kind of warning
    that can come together, and a long server message: the card still shows the whole link, every warning
    and the consent button."""
    host = "\uff41" + ".".join(["a" * 62] * 4)[1:] + "."  # 252 characters once the fullwidth a is read as a
    hidden = "\u202e\u202d\u2067\u2066\u200b\u200c\u200d\u2060\t\n\r\x0b"
    head = f"http://{'u' * 70}:pw@{host}\\x/{hidden}"
    url = head + "y" * (MAX_SHOWN_URL - len(head) - 80)
    check = check_url(url)
    assert check.consentable and len(check.href) > MAX_SHOWN_URL - 20 and len(check.warnings) == 8
    request = Request(id="elc-1-1", kind=RequestKind.AUTHORIZATION, prompt="m" * 5000, url=url, data=None)
    card = Card(Prompt(request=request, origin=Origin(chat_id=1, user_id=1), server="s" * 100), chat_id=1)
    screen = prompt_screen(card)
    assert visible_len(screen.text) <= MAX_TEXT and "shortened" not in screen.text
    assert screen.text.count("⚠️") == len(check.warnings) and check.href in screen.text
    assert screen.keyboard is not None and str(screen.keyboard[0][0]["text"]).startswith("Open ")
    assert "shortened" not in consented_screen(card).text


def console(config: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "TOOLNEXUS_"))}
    return run_bot_text(
        [str(EXE), "console", "--config", str(config)], input=stdin, cwd=REPO, env=environ, timeout=60
    )


@pytest.fixture
def elicit_config(tmp_path: Path) -> Path:
    """A console config with just the elicit test server over stdio."""
    path = tmp_path / "config.toml"
    path.write_text("[servers.t]\n" + server_toml("tests.fakes.servers.elicit"))
    return path


@pytest.mark.slow
def test_the_console_never_offers_a_link_too_long_to_show_whole(elicit_config: Path) -> None:
    """The console shows the host, start and end, says it was cut, refuses `y`, and /decline reaches the server."""
    done = console(
        elicit_config, "/call t ask_url " + json.dumps({"url": LONG_URL}) + "\ny\n/decline\n/quit\n"
    )
    assert done.returncode == 0, done.stderr
    assert "Host: good.com" in done.stdout and "Cut:" in done.stdout and "THE-END" in done.stdout
    assert "Open good.com?" not in done.stdout and "cannot be opened from here" in done.stdout
    assert '"action": "decline"' in done.stdout


@pytest.mark.slow
def test_the_console_shows_and_opens_the_host_a_browser_goes_to(elicit_config: Path) -> None:
    """`https://evil.com\\@good.com/` in the console: host evil.com, and the link to open is the browser's."""
    done = console(
        elicit_config,
        "/call t ask_url " + json.dumps({"url": "https://evil.com\\@good.com/"}) + "\ny\n/quit\n",
    )
    assert done.returncode == 0, done.stderr
    assert "Host: evil.com" in done.stdout and "Open evil.com?" in done.stdout
    assert "Open this link in your browser:\n  https://evil.com/@good.com/" in done.stdout
    assert '"action": "accept"' in done.stdout

"""The Mini App page in a real browser: Debian's headless Chromium driven by Playwright, the real bot behind it.

Telegram's `telegram-web-app.js` is replaced by a stand-in served through Playwright's request routing (it
reads the launch fragment as Telegram's does, and offers `initData`, the theme and a main button); every
other request that is not to the bot on 127.0.0.1 is aborted and recorded, so a page that loads anything
from another host fails its test. Screenshots go to the test's tmp folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page, Route, async_playwright, expect

from mapping import FieldError, parse_schema, parse_text
from tests.fakes.telegram import Msg
from tests.web.support import (
    EVERY_KIND,
    OPEN_FORM,
    ask_form,
    launch_data,
    local_path,
    mini_scene,
    received,
)

pytestmark = pytest.mark.anyio

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TELEGRAM_JS = "https://telegram.org/js/telegram-web-app.js"
LIGHT = {
    "bg_color": "#ffffff",
    "text_color": "#000000",
    "hint_color": "#707579",
    "link_color": "#3390ec",
    "button_color": "#3390ec",
    "button_text_color": "#ffffff",
    "secondary_bg_color": "#f4f4f5",
}
DARK = {
    "bg_color": "#212121",
    "text_color": "#ffffff",
    "hint_color": "#aaaaaa",
    "link_color": "#8774e1",
    "button_color": "#8774e1",
    "button_text_color": "#ffffff",
    "secondary_bg_color": "#181818",
}
STAND_IN = """
(function () {
  const launch = new URLSearchParams(location.hash.slice(1));
  const theme = JSON.parse(launch.get("tgWebAppThemeParams") || "{}");
  const clicks = [];
  const main = {
    text: "", isVisible: false,
    setText(text) { this.text = text; return this; },
    show() { this.isVisible = true; return this; },
    hide() { this.isVisible = false; return this; },
    onClick(handler) { clicks.push(handler); return this; },
    showProgress() { return this; }, hideProgress() { return this; },
    press() { clicks.forEach((handler) => handler()); },
  };
  const bg = parseInt((theme.bg_color || "#ffffff").slice(1), 16);
  const light = ((bg >> 16) & 255) * 0.299 + ((bg >> 8) & 255) * 0.587 + (bg & 255) * 0.114 > 128;
  window.Telegram = { WebApp: {
    initData: launch.get("tgWebAppData") || "",
    themeParams: theme,
    colorScheme: light ? "light" : "dark",
    MainButton: main,
    closed: false,
    ready() {}, expand() {}, close() { this.closed = true; },
  } };
})();
"""
"""Telegram's script, as far as the page uses it."""


def theme_fragment(initdata: str, theme: dict[str, str]) -> str:
    """The URL fragment Telegram opens a Mini App with."""
    return (
        f"#tgWebAppData={quote(initdata, safe='')}&tgWebAppVersion=8.0&tgWebAppPlatform=android"
        f"&tgWebAppThemeParams={quote(json.dumps(theme), safe='')}"
    )


@asynccontextmanager
async def chromium() -> AsyncIterator[tuple[Browser, list[str]]]:
    """Headless Chromium, and the list of requests to other hosts it tried (and was refused)."""
    elsewhere: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser, elsewhere
        finally:
            await browser.close()


async def open_page(
    browser: Browser, elsewhere: list[str], port: int, card: Msg, initdata: str, theme: dict[str, str]
) -> Page:
    """Open the card's form as Telegram would (a phone-sized window, its launch fragment), on 127.0.0.1."""
    context = await browser.new_context(
        viewport={"width": 400, "height": 720}, timezone_id="Europe/Berlin", locale="en-GB"
    )

    async def route(r: Route) -> None:
        url = r.request.url
        if url == TELEGRAM_JS:
            await r.fulfill(status=200, content_type="text/javascript", body=STAND_IN)
        elif url.startswith(f"http://127.0.0.1:{port}/"):
            await r.continue_()
        else:
            elsewhere.append(url)
            await r.abort()

    await context.route("**/*", route)
    page = await context.new_page()
    await page.goto(f"http://127.0.0.1:{port}{local_path(card)}{theme_fragment(initdata, theme)}")
    return page


async def test_every_field_kind_filled_by_label_reaches_the_server_typed(tmp_path: Path) -> None:
    """Native controls found by their labels: text, email, url, date, datetime-local, integer and number,
    yes/no radios, choice radios, checkboxes; a bad value shows the chat flow's reason beside its field
    before submit; Telegram's main button submits; the server gets typed content; the chat card settles."""
    guests = parse_schema(EVERY_KIND).field("guests")
    too_many = parse_text(guests, "13")
    assert isinstance(too_many, FieldError)
    async with mini_scene() as (s, port), chromium() as (browser, elsewhere):
        call = await ask_form(s.alice, EVERY_KIND, message="Book the room")
        card = await s.fake.wait_for(lambda m: OPEN_FORM in m.buttons)
        page = await open_page(browser, elsewhere, port, card, launch_data(s.alice, s.fake.token), LIGHT)
        await page.get_by_label("Name").fill("Ada Lovelace")
        await page.get_by_label("Email").fill("ada@example.com")
        await page.get_by_label("Website").fill("https://example.com/ada")
        await page.get_by_label("Day").fill("2026-12-24")
        await page.get_by_label("Starts at").fill("2026-12-24T19:30")
        guests_input = page.get_by_label("Guests")
        await expect(guests_input).to_have_attribute("type", "number")
        await expect(guests_input).to_have_attribute("min", "1")
        await expect(guests_input).to_have_attribute("max", "12")
        await expect(guests_input).to_have_attribute("aria-required", "true")
        await expect(page.get_by_label("Day")).to_have_attribute("type", "date")
        await expect(page.get_by_label("Starts at")).to_have_attribute("type", "datetime-local")
        await expect(page.get_by_label("Email")).to_have_attribute("type", "email")
        await expect(page.get_by_label("Website")).to_have_attribute("type", "url")
        await expect(page.get_by_label("Note")).not_to_have_attribute("aria-required", "true")
        await page.get_by_label("Guests").fill("13")
        await page.get_by_label("Guests").blur()
        reason = page.get_by_text("⚠️ " + too_many.reason)
        await expect(reason).to_be_visible()
        await page.get_by_label("Guests").fill("4")
        await page.get_by_label("Guests").blur()
        await expect(reason).to_have_count(0)
        await expect(page.get_by_label("Budget")).to_have_value("50.5")  # the default, pre-filled
        await page.get_by_role("group", name="Vegan menu").get_by_label("Yes").check()
        await page.get_by_label("Hall").check()
        await page.get_by_label("Wi-Fi").check()
        await page.get_by_label("Cake").check()
        await expect(page.get_by_role("button", name="Submit")).to_be_visible()
        await expect(page.get_by_role("button", name="Decline")).to_be_visible()
        await expect(page.get_by_role("button", name="Cancel")).to_be_visible()
        await page.screenshot(path=tmp_path / "form-light.png", full_page=True)
        assert await page.evaluate("Telegram.WebApp.MainButton.isVisible && Telegram.WebApp.MainButton.text")
        await page.evaluate("Telegram.WebApp.MainButton.press()")
        await expect(page.get_by_text("Sent.")).to_be_visible()
        got = await received(s, call)
        assert got == {
            "action": "accept",
            "content": {
                "name": "Ada Lovelace",
                "email": "ada@example.com",
                "site": "https://example.com/ada",
                "day": "2026-12-24",
                "starts": "2026-12-24T19:30:00+01:00",
                "guests": 4,
                "budget": 50.5,
                "vegan": True,
                "room": "h",
                "extras": ["wifi", "cake"],
            },
        }
        assert type(got["content"]["guests"]) is int
        await s.fake.wait_for(lambda m: m is card and not m.buttons and "Guests: 4" in m.text)
        assert elsewhere == []
    assert (tmp_path / "form-light.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_server_text_shows_literally_in_the_dark_theme(tmp_path: Path) -> None:
    """A server's `<script>` and markup in the message, a title and an option are shown as text and never
    run; the page takes Telegram's dark theme colours."""
    hostile: dict[str, Any] = {
        "type": "object",
        "properties": {
            "a": {
                "type": "string",
                "title": "<img src=x onerror=window.pwned=1>",
                "description": "<b>bold?</b>",
            },
            "b": {"type": "string", "enum": ["<i>x</i>", "y"]},
            "when": {"type": "string", "format": "date", "title": "When"},
        },
    }
    message = "<script>window.pwned = 2</script> Pick <b>one</b> & go"
    async with mini_scene() as (s, port), chromium() as (browser, elsewhere):
        call = await ask_form(s.alice, hostile, message=message)
        card = await s.fake.wait_for(lambda m: OPEN_FORM in m.buttons)
        page = await open_page(browser, elsewhere, port, card, launch_data(s.alice, s.fake.token), DARK)
        await expect(page.locator("h1")).to_have_text(message)
        await expect(page.get_by_label("<img src=x onerror=window.pwned=1>")).to_be_visible()
        await expect(page.get_by_text("<b>bold?</b>")).to_be_visible()
        await expect(page.get_by_label("<i>x</i>")).to_be_visible()
        assert await page.evaluate(
            "window.pwned === undefined && document.querySelectorAll('img, b, i').length === 0"
        )
        assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(33, 33, 33)"
        await page.screenshot(path=tmp_path / "form-dark.png", full_page=True)
        await page.get_by_role("button", name="Cancel").click()
        await expect(page.get_by_text("Cancelled.")).to_be_visible()
        assert (await received(s, call))["action"] == "cancel"
        assert elsewhere == []
    assert (tmp_path / "form-dark.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


async def test_a_forged_launch_is_refused_and_the_form_stays_open_in_the_chat() -> None:
    """Launch data signed with another token: the page says so and shows no form; the chat card still waits
    and a genuine launch can then decline it with the page's own Decline button."""
    async with mini_scene() as (s, port), chromium() as (browser, elsewhere):
        call = await ask_form(s.alice, EVERY_KIND)
        card = await s.fake.wait_for(lambda m: OPEN_FORM in m.buttons)
        forged = await open_page(
            browser, elsewhere, port, card, launch_data(s.alice, "42:not-this-bot"), LIGHT
        )
        await expect(forged.get_by_text("not signed by Telegram for this bot")).to_be_visible()
        assert await forged.locator("input").count() == 0
        assert "Decline" in card.buttons
        page = await open_page(browser, elsewhere, port, card, launch_data(s.alice, s.fake.token), LIGHT)
        await page.get_by_role("button", name="Decline").click()
        await expect(page.get_by_text("Declined.")).to_be_visible()
        assert (await received(s, call))["action"] == "decline"
        assert elsewhere == []


def test_chromium_is_installed() -> None:
    """The browser tests need Debian's chromium (`.ci/run` installs it when missing)."""
    assert shutil.which("chromium") == CHROMIUM

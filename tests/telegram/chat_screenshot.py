"""The README's chat screenshot: a real `deploy` run, rendered in Telegram's look and photographed. Does I/O.

    .venv/bin/python -m tests.telegram.chat_screenshot [--html] [OUT.png]   (default: tests/telegram/chat-deploy.png)

The real bot (PTB, hub, registry) runs against the fake Bot API with the demo server, as the end-to-end tests
do; a scripted Alice calls `deploy` and taps through it. Each card is recorded as the fake holds it after every
send and edit (its HTML as the bot sent it, its inline keyboard), the taps between them become service notes,
and the page is photographed by headless Chromium (/usr/bin/chromium, driven by Playwright as in
test_miniapp_browser.py). Not a test: run it by hand when the cards change, look at the picture, commit it.
The bot's emoji need a colour emoji font (Debian: fonts-noto-color-emoji), else they show as boxes.
"""

from __future__ import annotations

import html
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
from playwright.async_api import async_playwright

from tests.fakes.telegram import Msg
from tests.fakes.telegram.model import Keyboard
from tests.telegram.harness import bot_scene, is_result

CHROMIUM = "/usr/bin/chromium"
OUT = Path(__file__).with_name("chat-deploy.png")
WIDTH = 420
"""A phone's width in CSS pixels."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One thing on the chat page: a message as it looked then (`who` "bot" or "user"), or a tap ("tap")."""

    who: str
    html: str
    keyboard: Keyboard = ()
    edited: bool = False
    clock: str = ""


class Transcript:
    """What the person saw, in order: every message and every edit of it, as the fake held it then."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def add(self, msg: Msg) -> None:
        edited = msg.edit_count > 0
        when = msg.edit_dates[-1] if edited and msg.edit_dates else msg.date
        self.entries.append(
            Entry(
                "bot" if msg.from_bot else "user",
                msg.html,
                msg.reply_markup,
                edited,
                time.strftime("%H:%M", time.gmtime(when)),
            )
        )

    def tap(self, label: str) -> None:
        self.entries.append(Entry("tap", f"Alice taps <b>{html.escape(label)}</b>: the card is edited"))


async def record_deploy() -> Transcript:
    """Alice runs the demo's `deploy` to its result: environment, review, confirmation, review, result."""
    t = Transcript()
    async with bot_scene() as s:
        call = await s.alice.send("/call demo deploy")
        t.add(call)
        card = await s.fake.wait_for(lambda m: "Staging (safe to try)" in m.buttons)
        t.add(card)
        for label, then in [
            ("Staging (safe to try)", lambda m: m is card and "✅ Submit" in m.buttons),
            ("✅ Submit", lambda m: m is not card and m.from_bot and "Yes" in m.buttons),
        ]:
            await s.alice.press(card, label)
            t.tap(label)
            nxt = await s.fake.wait_for(then)
            if nxt is not card:  # the next question: the card above is settled ("Answer sent", no buttons)
                t.add(await s.fake.wait_for(lambda m: m is card and not m.buttons))
            t.add(nxt)
        confirm = nxt
        for label, then in [
            ("Yes", lambda m: m is confirm and "✅ Submit" in m.buttons),
            ("✅ Submit", lambda m: is_result(m, call)),
        ]:
            await s.alice.press(confirm, label)
            t.tap(label)
            t.add(await s.fake.wait_for(then))
    return t


CSS = """
* { box-sizing: border-box; }
body { margin: 0; width: %(width)dpx; font: 15px/1.35 Roboto, "Noto Sans", "DejaVu Sans", "Noto Color Emoji", sans-serif;
  color: #000; background: linear-gradient(160deg, #dbddbb 0%%, #a5c79a 45%%, #d5d88d 75%%, #88b884 100%%); }
header { position: sticky; top: 0; display: flex; align-items: center; gap: 10px; padding: 8px 12px;
  background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.15); }
.avatar { width: 40px; height: 40px; border-radius: 50%%; background: linear-gradient(#72d5fd, #2a9ef1);
  color: #fff; font-weight: 600; display: flex; align-items: center; justify-content: center; }
.name { font-weight: 600; } .sub { color: #707579; font-size: 13px; }
main { padding: 10px 8px 14px; display: flex; flex-direction: column; gap: 6px; }
.msg { max-width: 86%%; padding: 6px 9px 5px; border-radius: 12px; box-shadow: 0 1px 1px rgba(0,0,0,.13);
  white-space: pre-wrap; overflow-wrap: anywhere; display: flow-root; }
.bot .msg { background: #fff; border-bottom-left-radius: 4px; }
.user { align-self: flex-end; } .user .msg { background: #eeffde; border-bottom-right-radius: 4px; }
.bot { align-self: flex-start; max-width: 86%%; } .bot .msg { max-width: 100%%; }
.meta { float: right; margin: 6px 0 -4px 10px; font-size: 12px; color: #8b9e8c; }
.bot .meta { color: #a1aab3; } .user .meta::after { content: " ✓✓"; color: #4fae4e; }
.keyboard { margin-top: 3px; display: flex; flex-direction: column; gap: 3px; }
.row { display: flex; gap: 3px; }
.button { flex: 1; position: relative; padding: 8px 10px; border-radius: 8px; text-align: center;
  background: rgba(43, 82, 52, .32); color: #fff; font-size: 14px; font-weight: 500;
  backdrop-filter: blur(6px); }
.button.url::after { content: "↗"; position: absolute; top: 1px; right: 5px; font-size: 11px; }
.tap { align-self: center; margin: 4px 0; padding: 3px 10px; border-radius: 12px;
  background: rgba(51, 76, 45, .38); color: #fff; font-size: 13px; }
pre, code { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; }
pre { margin: 2px 0; white-space: pre-wrap; }
blockquote { margin: 2px 0; padding-left: 8px; border-left: 3px solid #3390ec; }
a { color: #3390ec; text-decoration: none; }
"""


def render(t: Transcript, title: str = "toolnexus-bot") -> str:
    """The transcript as one HTML page in Telegram's light look (its bubbles, buttons and wallpaper colours)."""
    parts = [
        "<!doctype html><meta charset=utf-8>",
        f"<style>{CSS % {'width': WIDTH}}</style>",
        f'<header><div class="avatar">TN</div><div><div class="name">{html.escape(title)}</div>'
        '<div class="sub">bot</div></div></header><main>',
    ]
    for e in t.entries:
        if e.who == "tap":
            parts.append(f'<div class="tap">{e.html}</div>')
            continue
        meta = f'<span class="meta">{"edited " if e.edited else ""}{e.clock}</span>'
        # The bot's HTML is Telegram's subset as the bot sent it (server text escaped by the bot); a person's
        # message is the fake's escaped plain text.
        parts.append(f'<div class="{e.who}"><div class="msg">{e.html.strip()}{meta}</div>')
        if e.keyboard:
            parts.append('<div class="keyboard">')
            for row in e.keyboard:
                cells = "".join(
                    f'<div class="button{" url" if b.url or b.web_app else ""}">{html.escape(b.text)}</div>'
                    for b in row
                )
                parts.append(f'<div class="row">{cells}</div>')
            parts.append("</div>")
        parts.append("</div>")
    parts.append("</main>")
    return "\n".join(parts)


async def photograph(page_html: str, out: Path) -> None:
    """The page in headless Chromium at a phone's width, the whole of it, as a PNG."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        try:
            page = await browser.new_page(viewport={"width": WIDTH, "height": 600})
            await page.set_content(page_html)
            await page.screenshot(path=out, full_page=True)
        finally:
            await browser.close()


async def main(out: Path) -> None:
    transcript = await record_deploy()
    page = render(transcript)
    if "--html" in sys.argv:  # the page too, to look at in a browser
        out.with_suffix(".html").write_text(page)
    await photograph(page, out)
    print(f"wrote {out} ({len(transcript.entries)} entries)")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    anyio.run(main, Path(args[0]) if args else OUT)

"""The public demo (issue 21): the shipped `config.example.toml` with `allow_everyone`, a thousand strangers.

I/O: starts the fake Bot API (enforcing Telegram's limits), the bot as its own process with the example config
as shipped (only the Bot API address, the token and `allow_everyone` changed), and scripted strangers who each
run the demo `deploy` flow: a choice, its review, a confirmation, its review, the result. Every result must
name this person's service and choice (no lost or crossed answers); figures are measured, never asserted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import anyio

from bench.scene import ROOT, BenchFake, bot_process, memory_kb, rate_limited_fake
from tests.fake_telegram import FakeUser, Msg

FIRST_STRANGER: Final = 500_000
TIMEOUT_S: Final = 1800.0
"""A stranger's wait for one step; at Telegram's 30 messages a second a thousand flows take minutes."""
SUBMIT: Final = "✅ Submit"
CHOICES: Final = (("staging", "Staging (safe to try)"), ("production", "Production (live)"))


def shipped_config(api_base_url: str) -> str:
    """`config.example.toml` as shipped, pointed at the fake and open to everyone."""
    text = (ROOT / "config.example.toml").read_text()
    for old, new in (
        ('api_base_url = "https://api.telegram.org/bot"', f'api_base_url = "{api_base_url}"'),
        ("allow_everyone = false", "allow_everyone = true"),
    ):
        if text.count(old) != 1:
            raise RuntimeError(f"config.example.toml changed: expected one line {old!r}")
        text = text.replace(old, new)
    return text


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, read from /proc."""
    found = [pid]
    for each in found:
        try:
            for task in Path(f"/proc/{each}/task").iterdir():
                found.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


class _Peaks:
    """Each process's peak RSS (VmHWM) as last seen, and the most processes seen at once."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.peak_kb: dict[int, int] = {}
        self.most_processes = 0

    def sample(self) -> None:
        pids = _tree(self.root)
        self.most_processes = max(self.most_processes, len(pids))
        for pid in pids:
            try:
                self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), memory_kb(pid).get("VmHWM", 0))
            except OSError:
                continue


def _card(text: str) -> Any:
    return lambda m: text in m.text and bool(m.reply_markup)


async def _tap(user: FakeUser, card: Msg, label: str) -> None:
    answer = await user.press(card, label, timeout=TIMEOUT_S)
    if answer.show_alert:
        raise AssertionError(f"{user.id}: tap on {label!r} refused: {answer.text!r}")


async def deploy(fake: BenchFake, user: FakeUser) -> tuple[float, str]:
    """One stranger's whole flow; returns (when the result arrived, the result's text)."""
    service = f"s{user.id}"
    environment, label = CHOICES[user.id % 2]
    await user.send(f"/call demo deploy service={service}")
    card = await fake.until(user.id, _card(f"Where should {service} be deployed?"), TIMEOUT_S)
    await _tap(user, card, label)
    await fake.until(user.id, lambda m: m is card and "Please review" in m.text, TIMEOUT_S)
    await _tap(user, card, SUBMIT)
    confirm = await fake.until(user.id, _card(f"Deploy {service} to {environment}?"), TIMEOUT_S)
    await _tap(user, confirm, "Yes")
    await fake.until(user.id, lambda m: m is confirm and "Please review" in m.text, TIMEOUT_S)
    await _tap(user, confirm, SUBMIT)
    result = await fake.until(user.id, lambda m: "Deployed " in m.text or "Deployment " in m.text, TIMEOUT_S)
    return time.monotonic(), result.text


async def public_demo(strangers: int, within_s: float = 1.0) -> dict[str, Any]:
    """`strangers` people each start the demo `deploy` within `within_s` and see it through."""
    fake = rate_limited_fake()
    async with (
        fake,
        bot_process(
            fake,
            {},
            unthrottled=False,
            config_text=shipped_config(fake.base_url),
            env={"TELEGRAM_BOT_TOKEN": fake.token},
        ) as bot,
    ):
        people = [fake.user(id=FIRST_STRANGER + i, first_name=f"S{i}") for i in range(strangers)]
        peaks = _Peaks(bot.pid)
        peaks.sample()
        done: dict[int, tuple[float, str]] = {}
        failed: list[str] = []
        t0 = time.monotonic()

        async def one(user: FakeUser) -> None:
            await anyio.sleep(within_s * (user.id - FIRST_STRANGER) / strangers)
            try:
                done[user.id] = await deploy(fake, user)
            except (AssertionError, TimeoutError) as exc:
                failed.append(f"{user.id}: {exc}")

        async def watch(stop: anyio.Event) -> None:
            while not stop.is_set():
                peaks.sample()
                with anyio.move_on_after(0.5):
                    await stop.wait()

        finished = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, finished)
            async with anyio.create_task_group() as people_tg:
                for user in people:
                    people_tg.start_soon(one, user)
            finished.set()
        peaks.sample()
        calls = fake.call_counts()
    crossed = [
        uid for uid, (_, text) in done.items() if f"Deployed s{uid} to {CHOICES[uid % 2][0]}" not in text
    ]
    refused = sum(1 for e in fake.errors if e.status == 429)
    messages = calls["sendMessage"] + calls["editMessageText"] - refused
    last = max((at for at, _ in done.values()), default=t0) - t0
    return {
        "strangers": strangers,
        "started_within_s": within_s,
        "completed": len(done) - len(crossed),
        "lost": strangers - len(done),
        "crossed": len(crossed),
        "failures": failed[:5],
        "peak_rss_mb_bot": round(peaks.peak_kb.get(bot.pid, 0) / 1024, 1),
        "peak_rss_mb_total": round(sum(peaks.peak_kb.values()) / 1024, 1),
        "processes_most": peaks.most_processes,
        "processes_seen": len(peaks.peak_kb),
        "last_result_s": round(last, 1),
        "messages_accepted": messages,
        "theoretical_min_s": round(messages / 30, 1),
        "fake_429s": refused,
        "bot_stderr_tail": bot.log_text[-500:],
    }


if __name__ == "__main__":
    import json
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    print(json.dumps(anyio.run(public_demo, count), indent=2))

"""The public demo (issue 21): the shipped `config.example.toml` with `allow_everyone`, a thousand strangers.

I/O: starts the fake Bot API (enforcing Telegram's limits), the bot as its own process with the example config
as shipped (only the Bot API address, the token and `allow_everyone` changed), and scripted strangers who each
run the demo `deploy` flow: a choice, its review, a confirmation, its review, the result. Every result must
name this person's service and choice (no lost or crossed answers); figures are measured, never asserted.

Every wait is bounded: a stranger whose call ends in a refusal or an error instead of the next step is counted
`refused` at once (with the line they were shown), and once no bot message has changed anywhere for `STALL_S`
while some still wait, the rest are counted `lost` (with the step each was waiting at). `python -m bench`
exits 1 when anyone was refused, lost or crossed (`went_wrong`).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import anyio

from bench.scene import ROOT, BenchFake, bot_process, memory_kb, rate_limited_fake
from tests.fakes.telegram import FakeUser, Msg

FIRST_STRANGER: Final = 500_000
TIMEOUT_S: Final = 1800.0
"""A stranger's longest wait for one step; at Telegram's 30 messages a second a thousand flows take minutes."""
STALL_S: Final = 60.0
"""Nothing the bot sends or edits changed for this long while strangers still wait: they are counted lost (the
bot sends to someone every few hundredths of a second while anyone's flow can go on)."""
ENDED: Final = ("❌", "⚠️", "⌛", "⏹", "🚫")
"""How a bot message that ends a person's flow otherwise than with the next step begins: a failed, timed out,
cancelled or refused call, or a question refused."""
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


class Refused(Exception):
    """The bot ended a stranger's flow with a refusal or an error instead of its next step (the line shown)."""


async def _step(fake: BenchFake, user: FakeUser, expected: Any, steps: dict[int, str], step: str) -> Msg:
    """Wait for `expected` in the person's chat, noted as their `step`; a message ending the flow raises."""
    steps[user.id] = step
    seen = await fake.until(user.id, lambda m: expected(m) or m.text.startswith(ENDED), TIMEOUT_S)
    if not expected(seen):
        raise Refused(seen.text)
    return seen


async def deploy(fake: BenchFake, user: FakeUser, steps: dict[int, str] | None = None) -> tuple[float, str]:
    """One stranger's whole flow; returns (when the result arrived, the result's text). `steps` gets what the
    person waits for at each moment.

    Raises:
        Refused: the bot ended the flow otherwise (a refused question, a failed call).
    """
    steps = {} if steps is None else steps
    service = f"s{user.id}"
    environment, label = CHOICES[user.id % 2]
    await user.send(f"/call demo deploy service={service}")
    card = await _step(fake, user, _card(f"Where should {service} be deployed?"), steps, "first question")
    await _tap(user, card, label)
    await _step(fake, user, lambda m: m is card and "Please review" in m.text, steps, "first review")
    await _tap(user, card, SUBMIT)
    confirm = await _step(fake, user, _card(f"Deploy {service} to {environment}?"), steps, "confirmation")
    await _tap(user, confirm, "Yes")
    await _step(fake, user, lambda m: m is confirm and "Please review" in m.text, steps, "second review")
    await _tap(user, confirm, SUBMIT)
    result = await _step(
        fake, user, lambda m: "Deployed " in m.text or "Deployment " in m.text, steps, "result"
    )
    return time.monotonic(), result.text


def _last_line(text: str) -> str:
    """The reason a refusal or error line ends with (its head names the person's own service)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def went_wrong(result: dict[str, Any]) -> int:
    """How many strangers of a `public_demo` result were refused, lost or crossed (0: every one completed)."""
    return int(result["refused"] + result["lost"] + result["crossed"])


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
        refused: dict[int, str] = {}
        failed: list[str] = []
        steps: dict[int, str] = {}
        t0 = time.monotonic()

        async def one(user: FakeUser) -> None:
            await anyio.sleep(within_s * (user.id - FIRST_STRANGER) / strangers)
            try:
                done[user.id] = await deploy(fake, user, steps)
            except Refused as exc:
                refused[user.id] = str(exc)
            except (AssertionError, TimeoutError) as exc:
                failed.append(f"{user.id}: {exc}")

        async def watch(stop: anyio.Event, people_scope: anyio.CancelScope) -> None:
            while not stop.is_set():
                peaks.sample()
                if time.monotonic() - max(fake.last_change, t0) > STALL_S:
                    stalled.append(round(time.monotonic() - t0, 1))
                    people_scope.cancel()  # the strangers still waiting are lost
                    return
                with anyio.move_on_after(0.5):
                    await stop.wait()

        finished = anyio.Event()
        stalled: list[float] = []
        async with anyio.create_task_group() as tg:
            async with anyio.create_task_group() as people_tg:
                tg.start_soon(watch, finished, people_tg.cancel_scope)
                for user in people:
                    people_tg.start_soon(one, user)
            finished.set()
        peaks.sample()
        calls = fake.call_counts()
    crossed = [
        uid for uid, (_, text) in done.items() if f"Deployed s{uid} to {CHOICES[uid % 2][0]}" not in text
    ]
    too_fast = sum(1 for e in fake.errors if e.status == 429)
    messages = calls["sendMessage"] + calls["editMessageText"] - too_fast
    last = max((at for at, _ in done.values()), default=t0) - t0
    lost = [user.id for user in people if user.id not in done and user.id not in refused]
    return {
        "strangers": strangers,
        "started_within_s": within_s,
        "completed": len(done) - len(crossed),
        "refused": len(refused),
        "lost": len(lost),
        "crossed": len(crossed),
        "refused_reasons": dict(Counter(_last_line(text) for text in refused.values()).most_common(3)),
        "refused_examples": [f"{uid}: {text}" for uid, text in list(refused.items())[:3]],
        "lost_waiting_for": dict(Counter(steps.get(uid, "start") for uid in lost)),
        "stalled_after_s": stalled[0] if stalled else None,
        "stall_s": STALL_S,
        "failures": failed[:5],
        "peak_rss_mb_bot": round(peaks.peak_kb.get(bot.pid, 0) / 1024, 1),
        "peak_rss_mb_total": round(sum(peaks.peak_kb.values()) / 1024, 1),
        "processes_most": peaks.most_processes,
        "processes_seen": len(peaks.peak_kb),
        "last_result_s": round(last, 1),
        "messages_accepted": messages,
        "theoretical_min_s": round(messages / 30, 1),
        "fake_429s": too_fast,
        "bot_stderr_tail": bot.log_text[-500:],
    }


if __name__ == "__main__":
    import json
    import sys

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    figures = anyio.run(public_demo, count)
    print(json.dumps(figures, indent=2))
    sys.exit(1 if went_wrong(figures) else 0)

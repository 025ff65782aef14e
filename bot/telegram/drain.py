"""The drain on SIGTERM: take no new work, let what runs finish, then leave what the store keeps. Does I/O.

A deploy (`systemctl restart`, `docker stop`, a rolling update) sends SIGTERM. The bot then takes no new work:
polling stops fetching (what is not fetched waits in Telegram's queue for the next process), and the webhook
answers 503 (Telegram delivers again, to the next process). Only taps on and replies to the cards of questions
pending in this process are still taken: a 2025-era question lives on its connection and cannot wait for the
next process. Running calls and their results get `[run] drain_s` to finish; calls that wait only for what the
store keeps (2026-07-28 questions, approvers) need no waiting for. Then the process leaves those as a crash
would leave them: no card settled, no row closed, nothing sent to the server; the next process takes them up.
A 2025-era question still open then is one a crash loses, but here it is ended as the process leaves: its card
says at once that it was lost, with **Run again** (drawn as the next process draws it after a crash, and working
there), and its server gets `cancel` rather than silence until the connection dies.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

import anyio
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import Application

from bot.core import Era, KeptQuestion, Prompt, PromptRegistry, RoundBook
from bot.telegram.restore import show_lost
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner

__all__ = ["drain", "take_answers"]

logger = logging.getLogger(__name__)

IDLE_CHECK_S: Final = 0.1
"""How often the drain looks whether work is left (what changes it comes from many places; this runs once in a
process's life)."""
POLL_S: Final = 10
"""The long poll while draining (cut short when the drain ends)."""
CONFIRM_WAIT_S: Final = 5.0
"""How long the drain's end waits for Telegram to confirm the answers it took (else they come again, to the next
process)."""
QUIET_LOOKS: Final = 2
"""Looks in a row that find no work before the drain counts the process idle (an update handed on just now may
not have started its run yet)."""


async def take_answers(
    app: Application,  # type: ignore[type-arg]
    answers: Callable[[Update], bool],
    allowed_updates: list[str],
) -> None:
    """Polling while draining: fetch updates, hand on those that `answers` a pending card, in order; at the first
    that is new work, stop fetching, leaving it and everything after it unconfirmed in Telegram's queue.

    Run with a cancel scope: when cancelled, the updates taken are confirmed (so the next process does not get
    them again) and the rest are left.
    """
    offset: int | None = None
    try:
        while True:
            try:
                updates = await app.bot.get_updates(
                    offset=offset, timeout=POLL_S, allowed_updates=allowed_updates
                )
            except TelegramError as exc:
                logger.info("draining: fetching answers failed (%s); no more are taken", exc)
                return
            for update in updates:
                if not answers(update):
                    logger.info("draining: new work waits in Telegram for the next process")
                    return
                await app.update_queue.put(update)
                offset = update.update_id + 1
    finally:
        if offset is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CONFIRM_WAIT_S):
                try:
                    await app.bot.get_updates(offset=offset, timeout=0, allowed_updates=allowed_updates)
                except TelegramError as exc:
                    logger.warning("draining: the answers taken could not be confirmed (%s)", exc)


async def drain(
    app: Application,  # type: ignore[type-arg]
    runner: ToolRunner,
    prompts: PromptRegistry,
    drain_s: float,
    stop: anyio.Event,
    book: RoundBook | None = None,
    surface: TelegramSurface | None = None,
) -> None:
    """Wait until no run has work left to finish (or `drain_s` passed, or `stop` was set: a hard stop), then
    leave what is kept: from here on, kept questions are left as they stand, and runs that wait only for kept
    things end without a word. The 2025-era questions among them (kept in `book`) end now: lost, on their cards
    (`surface`), and `cancel` to their servers."""
    with anyio.move_on_after(drain_s) as waited:
        await _idle(app, runner, stop)
    if waited.cancelled_caught:
        logger.info("draining: %g s passed; what is still running is stopped", drain_s)
    prompts.detach()
    if book is not None and surface is not None:
        lost = await _lost(book, prompts)

        async def show(prompt: Prompt) -> None:
            await show_lost(book, surface, runner, lost[prompt])

        told = await runner.leave_lost(list(lost), show)
        if told:
            logger.info("draining: %d 2025-era question(s) lost; their servers were told cancel", told)
    left = await runner.leave_kept()
    logger.info(
        "draining: done; %d call(s) wait for what the store keeps and go on in the next process", left
    )


async def _lost(book: RoundBook, prompts: PromptRegistry) -> dict[Prompt, KeptQuestion]:
    """The 2025-era questions pending in this process, each with its row (what its **Run again** repeats: the
    prompt has forgotten the call's arguments once they were written)."""
    pending = {p.request.id: p for p in prompts if p.pending and prompts.kept(p)}
    if not pending:
        return {}
    try:
        questions = await book.open_questions()
    except Exception:
        logger.exception(
            "draining: could not read the open questions; 2025-era ones are left as a crash would"
        )
        return {}
    return {pending[q.id]: q for q in questions if q.era is Era.LEGACY and q.id in pending}


async def _idle(app: Any, runner: ToolRunner, stop: anyio.Event) -> None:
    quiet = 0
    while quiet < QUIET_LOOKS and not stop.is_set():
        quiet = quiet + 1 if not runner.busy and app.update_queue.empty() else 0
        await anyio.sleep(IDLE_CHECK_S)

"""After a restart: the questions kept from before are settled or taken back up. Does I/O (store, Bot API).

A 2026-07-28 round whose questions are still open comes back as it stood: its cards keep their buttons (same
token, same version), and once answered the round is resumed on a fresh connection and the result reaches its
person as any call's does. A round whose deadline passed meanwhile is settled on its card as "expired while the
bot was down". A legacy question died with its connection: its card says so, with **Run again** (the same call,
the same arguments, for the same person: `ToolRunner.run_again_button`; after a drain the process before drew
that card already, `show_lost`, and this one takes its taps). A sign-in whose browser had not come back
cannot be finished by this process (the SDK kept its PKCE verifier in the process before): its card says the
link no longer works, and a new sign-in starts for that person and server, its card (with a fresh link) below.

A tool call made as a task that had not ended is polled again (`restore_tasks`): its status and result reach
its person as any call's do; one whose server is gone from the config, or whose task expired meanwhile, is
forgotten.

In a fleet an instance restores only the questions and tasks of the users it owns (`owns`): at start, and again
for the partitions it takes over from a dead, stalled or drained instance. Another live instance's are never
touched.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from anyio.abc import TaskGroup

from bot.core import (
    OUTCOME_TEXT,
    Era,
    KeptQuestion,
    KeptTask,
    Observer,
    Outcome,
    Prompt,
    RoundBook,
    TaskBook,
    ToolInfo,
)
from bot.errors import StoreError
from bot.servers.keeper import RoundKeeper
from bot.telegram.render import NAME_CLIP, Card, Screen, esc, settled_screen
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import ToolRunner
from mapping import Answer, MappingError, Request, RequestKind, elicitation_to_request, parse_schema

__all__ = ["restore_kept", "restore_tasks", "show_lost"]

logger = logging.getLogger(__name__)


async def restore_kept(
    book: RoundBook,
    surface: TelegramSurface,
    runner: ToolRunner,
    observer: Observer | None,
    tg: TaskGroup,
    *,
    servers: set[str],
    owns: Callable[[KeptQuestion], bool] = lambda question: True,
) -> int:
    """Settle or take back up every kept question `owns` says is this process's (alone: all of them);
    resumed rounds run in `tg`. Returns how many rounds were taken back up. Call once Telegram is reachable and
    before updates are taken (of those users)."""
    try:
        questions = await book.open_questions()
    except Exception:
        logger.exception("could not read the questions kept from before the restart")
        return 0
    questions = [q for q in questions if owns(q)]
    rounds: defaultdict[str, list[KeptQuestion]] = defaultdict(list)
    for question in questions:
        rounds[question.round_id].append(question)
    resumed = 0
    for kept in rounds.values():
        first = kept[0]
        open_ = [q for q in kept if q.answer is None]
        if first.era is Era.SIGNIN:
            await _sign_in_again(book, surface, observer, first, runner, tg, servers)
        elif first.era is Era.LEGACY or first.server not in servers:
            await _settle(book, surface, observer, kept, Outcome.LOST_IN_RESTART, runner)
        elif any(q.deadline <= time.time() for q in open_):
            await _settle(book, surface, observer, kept, Outcome.EXPIRED_WHILE_DOWN, runner)
        else:
            restored = []
            for question in open_:
                prompt = _prompt(question, book)
                if prompt is None:
                    continue
                if question.card_message_id is not None and question.card_chat_id is not None:
                    surface.restore_prompt(
                        prompt, question.card_chat_id, question.card_message_id, question.progress
                    )
                else:  # killed between saving the question and knowing its card: it is asked again
                    await surface.show_prompt(prompt)
                restored.append((prompt, question))
            tool = ToolInfo(first.server, first.tool, None, None, {})
            tg.start_soon(runner.resume, tool, first.arguments or {}, first.origin, kept, restored)
            resumed += 1
    if rounds:
        logger.info("questions kept from before the restart: %d round(s), %d resumed", len(rounds), resumed)
    return resumed


async def restore_tasks(
    book: TaskBook,
    runner: ToolRunner,
    tg: TaskGroup,
    *,
    servers: set[str],
    owns: Callable[[KeptTask], bool] = lambda task: True,
) -> int:
    """Poll again, in `tg`, every task a person's call made before the restart that `owns` says is this
    process's (alone: all of them); returns how many. A task whose server left the config or whose time on its
    server ran out is forgotten."""
    try:
        tasks = await book.open_tasks()
    except StoreError:
        logger.exception("could not read the tasks kept from before the restart")
        return 0
    tasks = [task for task in tasks if owns(task)]
    resumed = 0
    for task in tasks:
        if task.server in servers and (task.expires is None or task.expires > time.time()):
            tg.start_soon(runner.resume_task, task)
            resumed += 1
            continue
        try:
            await book.close(task.id)
        except StoreError:
            logger.exception("could not forget a task kept from before the restart")
    if tasks:
        logger.info("tasks kept from before the restart: %d, %d polled again", len(tasks), resumed)
    return resumed


def _prompt(question: KeptQuestion, book: RoundBook) -> Prompt | None:
    """The kept question as a prompt again: the same id and token, its deadline, its form."""
    request_wire = (question.input_requests or {}).get(question.input_key)
    params = request_wire.get("params") if isinstance(request_wire, dict) else None
    if not isinstance(params, dict):
        return None
    try:
        request = dataclasses.replace(elicitation_to_request(params), id=question.id)
        schema = (request.data or {}).get("schema")
        form = parse_schema(schema) if request.kind is RequestKind.INPUT else None
    except MappingError:
        return None  # it could be shown before this build; it cannot now
    return Prompt(
        request=request,
        origin=question.origin,
        server=question.server,
        form=form,
        token=question.token,
        deadline=time.monotonic() + (question.deadline - time.time()),
        keeper=RoundKeeper(book, question),
    )


async def _sign_in_again(
    book: RoundBook,
    surface: TelegramSurface,
    observer: Observer | None,
    question: KeptQuestion,
    runner: ToolRunner,
    tg: TaskGroup,
    servers: set[str],
) -> None:
    """A sign-in card left waiting for its browser: settled (its link cannot be finished here), and unless it
    expired meanwhile (or its server is gone from the config), a new sign-in for the same person and server."""
    outcome = Outcome.SIGN_IN_AGAIN if question.deadline > time.time() else Outcome.EXPIRED_WHILE_DOWN
    again = outcome is Outcome.SIGN_IN_AGAIN and question.server in servers
    params = ((question.input_requests or {}).get("") or {}).get("params") or {}
    prompt = Prompt(
        request=Request(
            id=question.id,
            kind=RequestKind.AUTHORIZATION,
            prompt=str(params.get("message", "")),
            url=params.get("url"),
        ),
        origin=question.origin,
        server=question.server,
        token=question.token,
        sign_in=True,
    )
    if observer is not None:
        await observer.prompt_ended(prompt, outcome, Answer(id=question.id, ok=False, reason=outcome.value))
    if question.card_chat_id is not None and question.card_message_id is not None:
        text = f"🔑 <b>Sign in to {esc(question.server, NAME_CLIP)}</b>\n\n⏹ <b>{esc(OUTCOME_TEXT[outcome])}</b>."
        if again:
            text += " Sign in with the new link below, then send your command again."
        await surface.settle_message(question.card_chat_id, question.card_message_id, Screen(text))
    try:
        await book.close(question.id)
    except Exception:
        logger.exception("could not forget a sign-in kept from before the restart")
    if again:
        tg.start_soon(runner.sign_in_again, question.server, question.origin)


async def _settle(
    book: RoundBook,
    surface: TelegramSurface,
    observer: Observer | None,
    kept: list[KeptQuestion],
    outcome: Outcome,
    runner: ToolRunner,
) -> None:
    """Settle a kept round's open cards with `outcome` (audited), and forget the round."""
    for question in kept:
        if question.answer is not None:
            continue
        prompt = _prompt(question, book)
        if prompt is not None and observer is not None:
            answer = Answer(id=question.id, ok=False, reason=outcome.value)
            await observer.prompt_ended(prompt, outcome, answer)
        if prompt is not None:
            await _settle_card(surface, question, prompt, outcome, runner)
    try:
        await book.close(*(q.id for q in kept))
    except Exception:
        logger.exception("could not forget the kept questions of a settled round")


async def show_lost(
    book: RoundBook, surface: TelegramSurface, runner: ToolRunner, question: KeptQuestion
) -> None:
    """A kept 2025-era question's card, now, as the next process will draw it after the restart: lost, with
    **Run again** (the same button: its token is the question's). That process settles the question: it audits
    it, closes its row and takes the button's taps; its own edit then changes nothing."""
    prompt = _prompt(question, book)
    if prompt is not None:
        await _settle_card(surface, question, prompt, Outcome.LOST_IN_RESTART, runner)


async def _settle_card(
    surface: TelegramSurface, question: KeptQuestion, prompt: Prompt, outcome: Outcome, runner: ToolRunner
) -> None:
    """Edit a kept question's card (if it was placed) to how it ended; a lost one gets **Run again**."""
    if question.card_chat_id is None or question.card_message_id is None:
        return
    card = Card(prompt=prompt, chat_id=question.card_chat_id, message_id=question.card_message_id)
    screen = settled_screen(card, outcome)
    if outcome is Outcome.LOST_IN_RESTART:
        keyboard: Any = [[runner.run_again_button(question)]]
        screen = Screen(screen.text, keyboard)
    await surface.settle_message(question.card_chat_id, question.card_message_id, screen)

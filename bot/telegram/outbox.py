"""Sending what the outbox kept for people this process has just taken up (`bot.store.outbox`). Does I/O (store,
Bot API).

When a process takes people up (a fleet's instance taking partitions over from one that died or stalled; a bot
alone at its start, after a kill), the results, settling edits and approval outcomes that other processes kept
for them and did not mark sent are sent from here, each person's in the order they were written, through the
flood control like any request (`bot.telegram.flood.resending`: sent only while this process acts for the
person, marked sent once Telegram answered). An edit that a later kept edit of the same message replaces is
moot (the card would only flash its older state): it is marked sent without going.

A message the dead process had sent, in the moment before its row was marked, goes a second time: its person
sees it twice (never not at all).
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from anyio.abc import TaskGroup
from telegram import Bot
from telegram.error import TelegramError

from bot.store.errors import StoreUnavailable
from bot.store.outbox import OutboxStore, Waiting
from bot.telegram.flood import Elsewhere, resending

__all__ = ["resend"]

logger = logging.getLogger(__name__)

_EDIT = "editMessageText"


async def resend(
    outbox: OutboxStore, bot: Bot, tg: TaskGroup, partitions: Collection[int] | None = None
) -> int:
    """Read what other processes kept for the people of `partitions` (None: everyone) and did not mark sent, and
    send it in `tg` (one task per person, their messages in order, people at once: the flood control spaces
    them); returns how many go (moot edits left out)."""
    try:
        waiting = await outbox.waiting(partitions)
    except StoreUnavailable as exc:
        logger.error("outbox: could not read the messages kept for the people taken up: %s", exc)
        return 0
    latest: dict[tuple[object, object], Waiting] = {}
    for request in waiting:
        if request.method == _EDIT:
            latest[_target(request)] = request
    people: dict[int, list[Waiting]] = {}
    for request in waiting:
        if request.method == _EDIT and latest[_target(request)] is not request:
            outbox.sent(request.key)  # moot: a later edit of the same message replaces it
            continue
        people.setdefault(request.user_id, []).append(request)
    going = sum(len(requests) for requests in people.values())
    if going:
        logger.info(
            "outbox: sending %d message(s) kept by another process for %d person(s)", going, len(people)
        )
    for user_id, requests in people.items():
        tg.start_soon(_send, bot, user_id, requests)
    return going


def _target(request: Waiting) -> tuple[object, object]:
    return request.params.get("chat_id"), request.params.get("message_id")


async def _send(bot: Bot, user_id: int, requests: list[Waiting]) -> None:
    for request in requests:
        try:
            with resending(user_id, request.key):
                await bot.do_api_request(request.method, api_kwargs=request.params)
        except Elsewhere:
            logger.info("outbox: user %s is another instance's now; it sends the rest", user_id)
            return
        except TelegramError as exc:  # marked sent all the same: it would be refused again
            logger.info("outbox: a kept %s for user %s was refused: %s", request.method, user_id, exc)

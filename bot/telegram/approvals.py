"""Approvals in Telegram: the cards of the approval service's requests (to the approval chat or each approver),
the requester's notices, and the taps on cards forwarded to the service. Does I/O.

The decision (quorum, votes, expiry, the compare-and-set, the waiting call) is the service's
(`bot.approvals`); this module only shows what the service tells it and forwards what people tap.
A request approved after a restart (its call's task is gone) is run from here, once, with the approved
arguments, and the result shown in the requester's chat; an agent's is not run (its call went with the process
that took it): the cards and the person are told so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from anyio.abc import TaskGroup
from telegram import User
from telegram.error import TelegramError

from bot.approvals import AGENT_GONE, GONE, STOPPING, ApprovalService, orphaned
from bot.core.approvals import ApprovalRecord, ApprovalStatus, Verdict, Vote, names
from bot.errors import StoreUnavailable
from bot.servers.hub import Hub
from bot.store.gateway_tasks import GatewayTaskStore, TaskState
from bot.telegram.access import Access
from bot.telegram.approval_cards import (
    agent_note,
    approval_screen,
    change_screen,
    reminder_screen,
    request_line,
)
from bot.telegram.callback_data import Action, Button
from bot.telegram.flood import Withdrawn, kept_for
from bot.telegram.render import NAME_CLIP, TITLE_CLIP, Screen, esc
from bot.telegram.second_factor import SecondFactors
from bot.telegram.surface import TelegramSurface
from bot.telegram.taps import TapAnswer
from bot.telegram.tool_runs import result_messages

__all__ = ["GONE", "STOPPING", "TelegramApprovals"]

logger = logging.getLogger(__name__)


class TelegramApprovals:
    """The Telegram host's `ApprovalShow` of `service`; `start` it in the bot's task group, `stop` it before the
    hub closes. `hub` runs the calls approved after a restart."""

    def __init__(
        self,
        service: ApprovalService,
        surface: TelegramSurface,
        hub: Hub,
        codes: SecondFactors | None = None,
        *,
        access: Access,
        tasks: GatewayTaskStore | None = None,
    ) -> None:
        self.service = service
        self.surface = surface
        self.hub = hub
        self.access = access
        """Who may use the bot now: an approved call of someone removed since it was asked is not run."""
        self.tasks = tasks
        """The gateway's tasks: an agent's call made as a task, approved after a restart, keeps its result there."""
        self.codes = codes
        """Asks an approver for the one-time code an approval needs (`second_factor`); None: no key to keep
        authenticator secrets with (a rule asking for one is a config error then)."""

    async def seen(self, user: User) -> None:
        """Remember a person's first name (every update passes here), for cards: stored when new or changed."""
        await self.service.seen(user.id, user.first_name)

    async def start(self, tg: TaskGroup) -> None:
        """Start the service with these cards (the requests a previous process left pending stay alive)."""
        await self.service.start(tg, self)

    def stop(self) -> None:
        """Release the calls waiting for approval (their requests stay pending in the store)."""
        self.service.stop()

    # -- taps ------------------------------------------------------------------------------------------

    async def on_tap(self, user: User, button: Button, card: tuple[int, int] | None = None) -> TapAnswer:
        """Approve, Reject or Change answer on `card` (chat, message), forwarded to the service; its line as a
        toast, a refusal as an alert (the cards are redrawn by the service through `redraw`)."""
        await self.seen(user)
        if button.action is Action.EDIT:
            cast = await self.service.change(button.token, user.id)
        else:
            vote = Vote.APPROVE if button.action is Action.YES else Vote.REJECT
            cast = await self.service.vote(button.token, user.id, user.first_name, vote, button.version, card)
            if cast.needs_code and self.codes is not None:
                return await self.codes.ask(user, button, card)
        return TapAnswer(cast.text, alert=cast.refused)

    # -- ApprovalShow ----------------------------------------------------------------------------------

    def _screen(self, record: ApprovalRecord, gone: bool = False) -> Screen:
        return approval_screen(
            record.ask,
            record.state,
            self.service.name_of,
            record.deadline,
            gone=gone,
            escalate_at=record.escalate_at,
            escalated_at=record.escalated_at,
        )

    async def post(self, record: ApprovalRecord) -> Sequence[tuple[int, int]]:
        chats = [record.ask.chat] if record.ask.chat is not None else sorted(record.ask.approvers)
        screen = self._screen(record)
        cards: list[tuple[int, int]] = []
        for chat_id in chats:
            try:
                cards.append((chat_id, await self.surface.send(chat_id, screen)))
            except TelegramError as exc:
                # An approver who never started the bot cannot be written to first; the others still can.
                logger.info("approval card to chat %s failed: %s", chat_id, exc)
        if not cards:
            await self._notify(record, "⚠️ No approver could be reached (have they started the bot?).")
        return cards

    async def redraw(self, record: ApprovalRecord, gone: bool = False) -> None:
        screen = self._screen(record, gone)
        for chat_id, message_id in record.cards:
            try:
                await self.surface.edit(chat_id, message_id, screen)
            except (TelegramError, Withdrawn) as exc:
                logger.info("approval card %s/%s could not be edited: %s", chat_id, message_id, exc)

    async def waiting(self, record: ApprovalRecord) -> int | None:
        try:
            return await self.surface.send(record.ask.origin.chat_id, change_screen(record.ask, record.state))
        except TelegramError as exc:
            logger.info("the notice of approval %s could not be sent: %s", record.id, exc)
            return None

    async def settled(self, record: ApprovalRecord, notice: int, verdict: Verdict | None) -> None:
        if verdict is not None and verdict.changing:
            text = "✏️ Changing your answer: the approvers will see the new one."
        else:
            text = (
                f"🔐 Your answer to <b>{esc(record.ask.server, NAME_CLIP)}</b>'s question"
                f"{agent_note(record.ask)}: " + esc(verdict.text if verdict is not None else "no decision")
            )
        try:
            with kept_for(record.ask.origin.user_id):  # an approval's outcome: in the outbox until sent
                await self.surface.edit(record.ask.origin.chat_id, notice, Screen(text))
        except (TelegramError, Withdrawn) as exc:
            logger.info("the notice of approval %s could not be edited: %s", record.id, exc)

    async def decided(self, record: ApprovalRecord, verdict: Verdict, waiting: bool) -> None:
        with kept_for(record.ask.origin.user_id):  # an approval's outcome: in the outbox until sent
            await self._decided(record, verdict, waiting)

    async def _decided(self, record: ApprovalRecord, verdict: Verdict, waiting: bool) -> None:
        title = f"{record.ask.server} · {record.ask.tool}"
        if verdict.approved and record.ask.question is None and orphaned(record, waiting):
            # An agent's call approved after a restart is not run (the service's rule): the cards and the
            # person say so, instead of "approved" and a result that never comes.
            await self.redraw(record, gone=True)
            await self._notify(
                record,
                f"⚠️ <b>{esc(title, TITLE_CLIP)}</b>{agent_note(record.ask)}: approved by "
                f"{esc(names(record.state.deciders))}, but {esc(AGENT_GONE)}",
            )
            return
        if verdict.status is ApprovalStatus.EXPIRED:
            if not waiting:  # a waiting call says it itself
                await self._notify(record, f"⌛ {request_line(record.ask)}: {esc(verdict.text)}")
            return
        if verdict.approved:
            await self._notify(
                record,
                f"🔓 Approved by {esc(names(record.state.deciders))}: <b>{esc(title, TITLE_CLIP)}</b>"
                + agent_note(record.ask),
            )
        if waiting:
            if record.ask.question is not None and not verdict.approved:
                await self._notify(
                    record,
                    f"🚫 <b>{esc(title, TITLE_CLIP)}</b>{agent_note(record.ask)}: your answer was "
                    + esc(verdict.text),
                )
            return
        if not verdict.approved:
            await self._notify(
                record, f"🚫 <b>{esc(title, TITLE_CLIP)}</b>{agent_note(record.ask)} — {esc(verdict.text)}"
            )
        elif record.ask.question is not None:
            # The question was asked by a process that is gone: there is no call left to answer.
            await self._notify(
                record, f"⚠️ <b>{esc(title, TITLE_CLIP)}</b>: approved, but the call that asked has ended"
            )

    async def run_approved(self, record: ApprovalRecord, verdict: Verdict) -> None:
        """Run the approved call; its result goes to the requester's chat, and for an agent's task (`Origin.task`)
        to the task, for the agent's poll (not run when the task was cancelled or is gone meanwhile)."""
        ask = record.ask
        task = ask.origin.task
        if not self.access.allows(ask.origin.user_id):
            # Removed from the people allowed since they asked (the rules are read at start): never run for them.
            logger.warning(
                "approval %s: its requester %s may no longer use the bot; not run",
                record.id,
                ask.origin.user_id,
            )
            if task is not None and self.tasks is not None:
                try:
                    await self.tasks.finish(
                        task, TaskState.FAILED, message="the agent's person may no longer use the bot"
                    )
                except StoreUnavailable:
                    logger.exception("could not end the task of approval %s", record.id)
            await self._notify(
                record,
                f"⚠️ <b>{esc(f'{ask.server} · {ask.tool}', TITLE_CLIP)}</b>{agent_note(ask)}: approved, but its "
                "requester may no longer use the bot; not run",
            )
            return
        if task is not None:
            try:
                kept = None if self.tasks is None else await self.tasks.runnable(task)
            except StoreUnavailable:
                logger.exception("could not read the task of approval %s", record.id)
                kept = None
            if kept is None:
                await self._notify(
                    record,
                    f"⚠️ <b>{esc(f'{ask.server} · {ask.tool}', TITLE_CLIP)}</b>{agent_note(ask)}: approved, but "
                    "the agent's task was cancelled or has expired, or its access ended; not run",
                )
                return
        arguments = dict(ask.content or {})
        outcome = await self.hub.call_tool(ask.server, ask.tool, arguments, ask.origin, approved=verdict)
        if task is not None and self.tasks is not None:
            try:
                await self.tasks.settle(task, outcome)
            except StoreUnavailable:
                logger.exception("could not keep the result of approval %s's task", record.id)
        with kept_for(ask.origin.user_id):  # the approved call's result: in the outbox until sent
            for text in result_messages(f"{ask.server} · {ask.tool}", outcome):
                await self._notify(record, text)

    async def remind(self, user_id: int, records: Sequence[ApprovalRecord]) -> None:
        try:
            await self.surface.send(user_id, reminder_screen(records, self.service.name_of))
        except TelegramError as exc:
            logger.info("the approval reminder to user %s failed: %s", user_id, exc)

    async def escalated(self, record: ApprovalRecord, added: frozenset[int]) -> Sequence[tuple[int, int]]:
        # Privately, also with an approval group: they may not be in it, and being asked is the point.
        screen = self._screen(record)
        cards: list[tuple[int, int]] = []
        for user_id in sorted(added):
            try:
                cards.append((user_id, await self.surface.send(user_id, screen)))
            except TelegramError as exc:
                logger.info("the escalated approval card to user %s failed: %s", user_id, exc)
        return cards

    async def _notify(self, record: ApprovalRecord, text: str) -> None:
        try:
            await self.surface.send(record.ask.origin.chat_id, Screen(text))
        except (TelegramError, Withdrawn) as exc:
            logger.info("the requester of approval %s could not be told: %s", record.id, exc)

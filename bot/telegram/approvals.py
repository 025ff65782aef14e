"""Approvals in Telegram: the hub's `Approver` (cards to the approval chat or each approver, the taps on them, the
verdict), kept in the store so a request outlives the process. Does I/O.

Each change is committed (and audited) before a card is edited or anyone is told. A request decided in the
process that asked for it wakes the waiting call; one decided after a restart (its call's task is gone) runs
the call from here, once, with the approved arguments, and shows the result in the requester's chat.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.abc import TaskGroup
from telegram import User
from telegram.error import TelegramError

from bot.core.approvals import ApprovalAsk, ApprovalStatus, Verdict, Vote, names, tally
from bot.servers.hub import Hub
from bot.store.approvals import ApprovalRecord, ApprovalStore, now_iso
from bot.store.errors import StoreUnavailable
from bot.telegram.approval_cards import approval_screen, change_screen, request_line
from bot.telegram.callback_data import Action, Button
from bot.telegram.render import NAME_CLIP, TITLE_CLIP, Screen, esc
from bot.telegram.surface import TelegramSurface
from bot.telegram.tool_runs import result_messages

__all__ = ["STOPPING", "Tap", "TelegramApprovals"]

logger = logging.getLogger(__name__)

STOPPING: Final = "the bot is stopping; the approval request stays open and the call runs once it is approved"
GONE: Final = "This approval request no longer exists."
_CAS_ATTEMPTS: Final = 5


@dataclass(frozen=True, slots=True)
class Tap:
    """What a tap gets back: a toast, or an alert for a refusal."""

    text: str
    alert: bool = False


@dataclass(slots=True)
class _Waiter:
    done: anyio.Event = field(default_factory=anyio.Event)
    verdict: Verdict | None = None


def verdict_of(record: ApprovalRecord) -> Verdict:
    """The requester's line for a final request."""
    state = record.state
    nothing = "the call was not made" if record.ask.question is None else "the server was told decline"
    if state.status is ApprovalStatus.APPROVED:
        return Verdict(state.status, f"approved by {names(state.deciders)}", record.id)
    if state.status is ApprovalStatus.REJECTED:
        return Verdict(state.status, f"rejected by {names(state.deciders)}; {nothing}", record.id)
    if state.status is ApprovalStatus.EXPIRED:
        return Verdict(state.status, f"not approved in time; {nothing}", record.id)
    return Verdict(state.status, f"the approval request was cancelled; {nothing}", record.id)


class TelegramApprovals:
    """Approval requests of the bot; `start` it in the bot's task group, `stop` it before the hub closes."""

    def __init__(
        self, store: ApprovalStore, surface: TelegramSurface, hub: Hub, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.surface = surface
        self.hub = hub
        self.clock = clock
        self.people: dict[int, str] = {}
        """Display names of people the bot has seen (first names), for cards."""
        self._waiters: dict[str, _Waiter] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._tg: TaskGroup | None = None
        self._stopping = False
        self._timers: set[anyio.CancelScope] = set()

    def name_of(self, user_id: int) -> str:
        return self.people.get(user_id) or f"user {user_id}"

    def seen(self, user: User) -> None:
        """Remember a person's first name (every update passes here)."""
        self.people[user.id] = user.first_name

    # -- lifecycle -------------------------------------------------------------------------------------

    async def start(self, tg: TaskGroup) -> None:
        """Become the hub's approver; keep the requests a previous process left pending alive (their cards
        stay live, their deadlines hold)."""
        self._tg = tg
        self.hub.approver = self
        self.hub.names = self.name_of
        try:
            pending = await self.store.pending()
        except StoreUnavailable:
            logger.exception("could not read the pending approval requests")
            return
        for record in pending:
            for user_id, name in record.names.items():
                self.people.setdefault(user_id, name)
            tg.start_soon(self._expire_at, record.id, record.deadline)

    def stop(self) -> None:
        """Release the calls waiting here (their requests stay pending in the store, for the next start)."""
        self._stopping = True
        for scope in self._timers:
            scope.cancel()
        self.hub.approver = None
        self.hub.no_approver_reason = "the bot is stopping"
        for waiter in self._waiters.values():
            waiter.verdict = Verdict(ApprovalStatus.PENDING, STOPPING)
            waiter.done.set()

    # -- the hub's Approver ----------------------------------------------------------------------------

    async def decide(self, ask: ApprovalAsk, approval_id: str | None = None) -> Verdict:
        """Store the request (or, with `approval_id`, bind a request being changed to the new content), show its
        cards, wait for the verdict (or the deadline). Never raises for outcomes."""
        nothing = "the call was not made" if ask.question is None else "the server was told decline"
        if self._stopping:
            return Verdict(ApprovalStatus.CANCELLED, f"the bot is stopping; {nothing}")
        record: ApprovalRecord | None = None
        try:
            if approval_id is not None:
                current = await self.store.get(approval_id)
                if current is not None and current.state.status is ApprovalStatus.CHANGING:
                    record = await self.store.rebind(current, ask)
            fresh = record is None
            if record is None:
                known = {u: self.people[u] for u in (*ask.approvers, ask.origin.user_id) if u in self.people}
                gate = "call" if ask.question is None else "answers"
                record = await self.store.create(ask, gate, self.clock() + ask.timeout_s, known)
        except StoreUnavailable:
            logger.exception("could not store an approval request")
            return Verdict(ApprovalStatus.CANCELLED, f"the approval request could not be recorded; {nothing}")
        waiter = self._waiters[record.id] = _Waiter()
        notice: int | None = None
        try:
            if fresh:
                # Taps wait until the cards are stored: a tap's redraw must find every card.
                async with self._lock(record.id):
                    await self._send_cards(record)
            else:
                await self._redraw(record)
            if ask.question is not None:
                notice = await self._send_notice(record)
            with anyio.move_on_after(max(0.0, record.deadline - self.clock())):
                await waiter.done.wait()
            if waiter.verdict is None:
                await self._expire(record.id)
            verdict = waiter.verdict or Verdict(
                ApprovalStatus.CANCELLED, f"the approval request could not be settled; {nothing}"
            )
            return verdict
        finally:
            del self._waiters[record.id]
            if notice is not None:
                with anyio.CancelScope(shield=True):
                    await self._end_notice(record, notice, waiter.verdict)

    async def withdraw(self, approval_id: str) -> None:
        """The requester gave up changing the answer (declined or cancelled the question): the request ends."""
        async with self._lock(approval_id):
            try:
                record = await self.store.get(approval_id)
                ended = None if record is None else await self.store.finish(record, ApprovalStatus.CANCELLED)
            except StoreUnavailable:
                logger.exception("could not withdraw approval %s", approval_id)
                return
        if ended is not None:
            await self._redraw(ended)

    async def _send_notice(self, record: ApprovalRecord) -> int | None:
        """Gate "answers": tell the requester their answer waits, with a way to change it."""
        try:
            return await self.surface.send(record.ask.origin.chat_id, change_screen(record.ask, record.state))
        except TelegramError as exc:
            logger.info("the notice of approval %s could not be sent: %s", record.id, exc)
            return None

    async def _end_notice(self, record: ApprovalRecord, message_id: int, verdict: Verdict | None) -> None:
        if verdict is not None and verdict.changing:
            text = "✏️ Changing your answer: the approvers will see the new one."
        else:
            text = f"🔐 Your answer to <b>{esc(record.ask.server, NAME_CLIP)}</b>'s question: " + esc(
                verdict.text if verdict is not None else "no decision"
            )
        try:
            await self.surface.edit(record.ask.origin.chat_id, message_id, Screen(text))
        except TelegramError as exc:
            logger.info("the notice of approval %s could not be edited: %s", record.id, exc)

    # -- cards -----------------------------------------------------------------------------------------

    def _screen(self, record: ApprovalRecord) -> Screen:
        return approval_screen(record.ask, record.state, self.name_of, record.deadline)

    async def _send_cards(self, record: ApprovalRecord) -> None:
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
        try:
            await self.store.set_cards(record, cards)
        except StoreUnavailable:
            logger.exception("could not store where the approval cards are")

    async def _redraw(self, record: ApprovalRecord) -> None:
        screen = self._screen(record)
        for chat_id, message_id in record.cards:
            try:
                await self.surface.edit(chat_id, message_id, screen)
            except TelegramError as exc:
                logger.info("approval card %s/%s could not be edited: %s", chat_id, message_id, exc)

    async def _notify(self, record: ApprovalRecord, text: str) -> None:
        try:
            await self.surface.send(record.ask.origin.chat_id, Screen(text))
        except TelegramError as exc:
            logger.info("the requester of approval %s could not be told: %s", record.id, exc)

    # -- taps ------------------------------------------------------------------------------------------

    def _lock(self, approval_id: str) -> anyio.Lock:
        return self._locks.setdefault(approval_id, anyio.Lock())

    async def on_tap(self, user: User, button: Button) -> Tap:
        """Approve or Reject: refused with an alert (not an approver, own request, already decided), or
        counted, committed, and the cards edited."""
        self.seen(user)
        if button.action is Action.EDIT:
            return await self._change(user, button)
        vote = Vote.APPROVE if button.action is Action.YES else Vote.REJECT
        async with self._lock(button.token):
            for _ in range(_CAS_ATTEMPTS):
                try:
                    record = await self.store.get(button.token)
                except StoreUnavailable:
                    logger.exception("could not read approval %s", button.token)
                    return Tap("The approval store is unavailable; try again.", alert=True)
                if record is None:
                    return Tap(GONE, alert=True)
                counted = tally(record.state, user.id, user.first_name, vote, now_iso(), button.version)
                if counted.refusal is not None:
                    return Tap(counted.refusal, alert=True)
                assert counted.ballot is not None
                try:
                    updated = await self.store.vote(record, counted.state, counted.ballot)
                except StoreUnavailable:
                    logger.exception("could not store a vote on approval %s", record.id)
                    return Tap("Your vote could not be recorded; try again.", alert=True)
                if updated is not None:
                    break
            else:
                return Tap("The request changed meanwhile; try again.", alert=True)
        await self._redraw(updated)
        if updated.state.status is not ApprovalStatus.PENDING:
            await self._decided(updated)
        if vote is Vote.REJECT:
            return Tap("Rejected.")
        return Tap(f"Approved ({len(updated.state.approvals)} of {updated.state.quorum}).")

    async def _change(self, user: User, button: Button) -> Tap:
        """The requester's Change answer: votes stop counting, the cards say so, the question is asked again."""
        async with self._lock(button.token):
            try:
                record = await self.store.get(button.token)
            except StoreUnavailable:
                logger.exception("could not read approval %s", button.token)
                return Tap("The approval store is unavailable; try again.", alert=True)
            if record is None:
                return Tap(GONE, alert=True)
            if user.id != record.ask.origin.user_id:
                return Tap(f"Only {record.ask.requester} can change this answer.", alert=True)
            waiter = self._waiters.get(record.id)
            if (
                record.state.status is not ApprovalStatus.PENDING
                or waiter is None
                or waiter.verdict is not None
            ):
                return Tap("This answer can no longer be changed.", alert=True)
            try:
                changing = await self.store.start_change(record)
            except StoreUnavailable:
                logger.exception("could not start changing approval %s", record.id)
                return Tap("The approval store is unavailable; try again.", alert=True)
            if changing is None:
                return Tap("The request changed meanwhile; try again.", alert=True)
            waiter.verdict = Verdict(ApprovalStatus.PENDING, "changing the answer", record.id, changing=True)
            waiter.done.set()
        await self._redraw(changing)
        return Tap("Change your answer in the question below.")

    async def _decided(self, record: ApprovalRecord) -> None:
        """Tell the requester; wake the waiting call, or (after a restart) run the approved call from here."""
        verdict = verdict_of(record)
        title = f"{record.ask.server} · {record.ask.tool}"
        if verdict.approved:
            await self._notify(
                record, f"🔓 Approved by {esc(names(record.state.deciders))}: <b>{esc(title, TITLE_CLIP)}</b>"
            )
        waiter = self._waiters.get(record.id)
        if waiter is not None:
            waiter.verdict = verdict
            waiter.done.set()
            if record.ask.question is not None and not verdict.approved:
                await self._notify(
                    record, f"🚫 <b>{esc(title, TITLE_CLIP)}</b>: your answer was {esc(verdict.text)}"
                )
            return
        if not verdict.approved:
            await self._notify(record, f"🚫 <b>{esc(title, TITLE_CLIP)}</b> — {esc(verdict.text)}")
            return
        if record.ask.question is not None:
            # The question was asked by a process that is gone: there is no call left to answer.
            await self._notify(
                record, f"⚠️ <b>{esc(title, TITLE_CLIP)}</b>: approved, but the call that asked has ended"
            )
            return
        if self._tg is not None:
            self._tg.start_soon(self._run_approved, record, verdict)

    async def _run_approved(self, record: ApprovalRecord, verdict: Verdict) -> None:
        """The call of a request approved after the process that asked for it ended."""
        ask = record.ask
        arguments = dict(ask.content or {})
        outcome = await self.hub.call_tool(ask.server, ask.tool, arguments, ask.origin, approved=verdict)
        for text in result_messages(f"{ask.server} · {ask.tool}", outcome):
            await self._notify(record, text)

    # -- deadlines -------------------------------------------------------------------------------------

    async def _expire_at(self, approval_id: str, deadline: float) -> None:
        """The deadline of a request a previous process left pending (`stop` ends the wait: the bot's task group
        must not wait for it)."""
        with anyio.CancelScope() as scope:
            self._timers.add(scope)
            try:
                await anyio.sleep(max(0.0, deadline - self.clock()))
                await self._expire(approval_id)
            finally:
                self._timers.discard(scope)

    async def _expire(self, approval_id: str) -> None:
        """End a request still pending at its deadline: committed, cards edited, the requester told."""
        async with self._lock(approval_id):
            try:
                record = await self.store.get(approval_id)
                if record is None:
                    return
                expired = None
                if record.state.open:
                    expired = await self.store.finish(record, ApprovalStatus.EXPIRED)
            except StoreUnavailable:
                logger.exception("could not expire approval %s", approval_id)
                return
        waiter = self._waiters.get(approval_id)
        if expired is None:
            if waiter is not None and waiter.verdict is None and not record.state.open:
                waiter.verdict = verdict_of(record)  # decided by another process meanwhile
                waiter.done.set()
            return
        await self._redraw(expired)
        verdict = verdict_of(expired)
        if waiter is not None:
            waiter.verdict = verdict
            waiter.done.set()
        else:
            await self._notify(expired, f"⌛ {request_line(expired.ask)}: {esc(verdict.text)}")

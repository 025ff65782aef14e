"""Running a tool from Telegram: collect missing arguments, a status message with progress, the result. Does I/O."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import secrets
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Final

import anyio
from telegram.error import TelegramError

from bot.core import (
    CallStatus,
    KeptQuestion,
    KeptTask,
    Origin,
    Progress,
    Prompt,
    PromptRegistry,
    ToolInfo,
    ToolOutcome,
    clip,
)
from bot.core.call_args import ArgumentCheck, asking_again, check_arguments, sub_schema, to_ask, unknown_text
from bot.core.relay import ToolListShare
from bot.servers.hub import Flight, Hub, Unavailable
from bot.store.errors import StoreUnavailable
from bot.telegram.access import Access
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.flood import Elsewhere, Withdrawn, after_cards, kept_for, unless
from bot.telegram.render import (
    NAME_CLIP,
    TEXT_CLIP,
    TITLE_CLIP,
    InlineButton,
    Keyboard,
    Screen,
    callback_button,
    esc,
    progress_text,
)
from bot.telegram.surface import TelegramSurface
from mapping import Request, RequestKind, UnsupportedSchema, new_request_id, parse_schema

logger = logging.getLogger(__name__)

CHUNK: Final = 3500
MAX_MESSAGES: Final = 4
PROGRESS_EVERY_S: Final = 1.0
"""Telegram allows about one message per second per chat; progress edits never go faster."""
LIST_KEEP_S: Final = 7 * 24 * 3600.0
"""How long a `/tools` list's buttons work in a fleet (`ToolButtons`)."""
TOOL_LISTS_KEPT: Final = 5000
"""`/tools` lists whose buttons are remembered in one process (oldest forgotten)."""
RERUNS_KEPT: Final = 5000
"""**Run again** buttons remembered (oldest forgotten)."""
LEAVE_GRACE_S: Final = 2.0
"""How long a drain's end waits for the calls of the 2025-era questions it answered `cancel` to end (the server
has the answer then) before it stops them (`ToolRunner.leave_lost`)."""
STATUS_AFTER_S: Final = 1.0
"""A call gets its status message once it has run this long (or at its first progress report): a quicker call
shows only its result, so it costs one message, not two, of the 30 a second Telegram allows a bot."""

_ICON = {
    CallStatus.OK: "✅",
    CallStatus.TOOL_ERROR: "❌",
    CallStatus.FAILED: "⚠️",
    CallStatus.UNAVAILABLE: "⚠️",
    CallStatus.TIMED_OUT: "⌛",
    CallStatus.CANCELLED: "⏹",
    CallStatus.REFUSED: "🚫",
}
_LABEL = {
    CallStatus.TOOL_ERROR: "tool error",
    CallStatus.FAILED: "failed",
    CallStatus.UNAVAILABLE: "server unavailable",
    CallStatus.TIMED_OUT: "timed out",
    CallStatus.CANCELLED: "cancelled",
}


def result_messages(title: str, outcome: ToolOutcome) -> list[str]:
    """The result as HTML messages within Telegram's limits (long output split, then trimmed with a note).

    A refused call is one line, or nothing when the person was told about that limit recently.
    """
    if outcome.status is CallStatus.REFUSED:
        text = f"🚫 <b>{esc(title, TITLE_CLIP)}</b> — refused: {esc(outcome.text, TEXT_CLIP)}"
        return [text] if outcome.text else []
    label = _LABEL.get(outcome.status)
    header = f"{_ICON[outcome.status]} <b>{esc(title, TITLE_CLIP)}</b>" + (f" — {label}" if label else "")
    body = outcome.text.strip()
    as_code = outcome.structured is not None and not any(b.strip() for b in outcome.blocks)
    if not body:
        return [header + ("\n<i>(no output)</i>" if outcome.status is CallStatus.OK else "")]
    # Only what can be shown is split (a result may be megabytes long): trimmed first, then cut in one pass.
    chunks, shown_up_to = _split(body, CHUNK, MAX_MESSAGES)
    messages = []
    for i, chunk in enumerate(chunks):
        text = f"<pre>{esc(chunk)}</pre>" if as_code else esc(chunk)
        messages.append(f"{header}\n{text}" if i == 0 else text)
    not_shown = len(body) - shown_up_to
    if outcome.omitted is None:
        messages[-1] += "\n\n<i>… output trimmed: the rest was not shown.</i>"
    elif not_shown or outcome.omitted:
        messages[-1] += (
            f"\n\n<i>… output trimmed: {not_shown + outcome.omitted} more characters not shown.</i>"
        )
    return messages


_LINE_BREAKS = re.compile(r"\n*")


def _split(text: str, size: int, limit: int) -> tuple[list[str], int]:
    """At most `limit` chunks of at most `size` characters, cut at a line break in the second half of a chunk
    where there is one; and where the text not chunked begins. Linear in what is chunked, never in `text`."""
    chunks: list[str] = []
    start = 0
    while start < len(text) and len(chunks) < limit:
        end = start + size
        if end >= len(text):
            chunks.append(text[start:])
            return chunks, len(text)
        cut = text.rfind("\n", start + size // 2, end)
        cut = end if cut < 0 else cut
        chunks.append(text[start:cut])
        start = _LINE_BREAKS.match(text, cut).end()  # type: ignore[union-attr]  # `\n*` always matches
    return chunks, start


class ToolButtons:
    """`/tools` lists: a short random token per list -> (server, tool names, where and for whom); each button
    names its tool by its place in the list. Bounded in memory, oldest forgotten.

    The chat and the person are kept with the token: only whoever asked for the list may use its buttons, and
    the call runs where the list was asked for, whatever happened to the list's message since.

    The fleet's `lists` keep them for the other processes: in a fleet (in the database) a tap may be handled by
    another instance than the one that sent the list (a takeover moved the person), which finds the list there;
    alone, there is no other process. A list is kept `LIST_KEEP_S` (a
    week): the chat shows it for as long as the person scrolls, and a week-old list still reads as the tools
    the person may run; an older one says it expired, and `/tools` gives a fresh one.
    """

    def __init__(self, lists: ToolListShare, capacity: int = TOOL_LISTS_KEPT) -> None:
        self._entries: OrderedDict[str, tuple[str, list[str], Origin]] = OrderedDict()
        self._capacity = capacity
        self._lists = lists

    async def add(self, server: str, tools: list[str], origin: Origin) -> str:
        """Keep the list; its token."""
        token = secrets.token_urlsafe(9)
        self._entries[token] = (server, tools, origin)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        try:
            await self._lists.keep(token, server, tools, origin, LIST_KEEP_S)
        except StoreUnavailable as exc:  # the list works here; a takeover would find it gone
            logger.warning("a /tools list is kept by this instance only: %s", exc)
        return token

    async def get(self, token: str, index: int) -> tuple[str, str, Origin] | None:
        """The server, the tool at `index` and who asked where; None when the list is unknown or expired."""
        entry = self._entries.get(token)
        if entry is None:
            try:
                entry = await self._lists.get(token, LIST_KEEP_S)
            except StoreUnavailable as exc:
                logger.warning("could not read a /tools list: %s", exc)
        if entry is None or not 0 <= index < len(entry[1]):
            return None
        server, tools, origin = entry
        return server, tools[index], origin


@dataclass(slots=True)
class _Status:
    """One call's status message: not sent until the call is slow or reports progress (`STATUS_AFTER_S`)."""

    chat_id: int
    message_id: int | None
    title: str
    latest: Progress | None = None
    last_edit: float = 0.0
    dirty: bool = False
    """The message lags behind `latest` (or is not sent yet)."""
    keeper: bool = False
    """A task is bringing the message up to date (it ends when nothing is left to show)."""
    asker: tuple[Origin, str] | None = None
    """Whose cards (person, server) stand for this call: the last answered one may take its result."""
    flight: Flight | None = None
    """The call as it runs: how many questions it has asked (`Caller.asked`)."""
    asked_before: int = 0
    """Questions the call had asked when the message was sent: a card asked since stands below it."""

    @property
    def asked(self) -> int:
        caller = self.flight.caller if self.flight is not None else None
        return caller.asked if caller is not None else 0


class ToolRunner:
    """Runs calls for Telegram users; one instance per bot."""

    def __init__(self, hub: Hub, prompts: PromptRegistry, surface: TelegramSurface, access: Access) -> None:
        self.hub = hub
        self.prompts = prompts
        self.surface = surface
        self.access = access
        self._reruns: OrderedDict[str, tuple[str, str, dict[str, Any], Origin]] = OrderedDict()
        self._running: Counter[tuple[Origin, str]] = Counter()
        """Calls running per person and server: a result is folded into an answered card only when just one
        call could have asked it."""
        self._flights: dict[anyio.CancelScope, tuple[Flight, anyio.Event]] = {}
        """Every run in progress, by the scope that ends it: what its call waits for (a drain looks), and set
        once it has ended."""
        self._whose: dict[anyio.CancelScope, int] = {}
        """Every run in progress, by the scope that ends it: the person it runs for."""
        self._left: set[Flight] = set()
        """Runs whose question was left as lost at a drain's end (`leave_lost`): they end without a word."""

    async def run(
        self,
        tool: ToolInfo,
        args: dict[str, Any],
        origin: Origin,
        kept: list[KeptQuestion] | None = None,
        restored: list[tuple[Prompt, KeptQuestion]] | None = None,
        task: KeptTask | None = None,
    ) -> None:
        """Ask for missing required arguments, then call and report; never raises for outcomes. A person not
        allowed gets nothing run and nothing sent (the gate should have stopped them; this holds if it did not).

        With `kept`, the call is a round kept from before a restart (`bot.telegram.restore`), resumed; with
        `task`, a task made by the process before, polled again."""
        if not self.access.allows(origin.user_id):
            logger.warning(
                "a call of %s for user %s, who is not allowed, was refused", tool.name, origin.user_id
            )
            return
        key = (origin, tool.server)
        self._running[key] += 1
        scope, flight, ended = anyio.CancelScope(), Flight(), anyio.Event()
        self._flights[scope] = (flight, ended)
        self._whose[scope] = origin.user_id
        try:
            with scope:
                await self._run(tool, args, origin, kept, restored, flight, task)
        finally:
            del self._flights[scope]
            del self._whose[scope]
            self._left.discard(flight)
            ended.set()
            self._running[key] -= 1
            if not self._running[key]:
                del self._running[key]

    def users_running(self) -> set[int]:
        """The people with a call of theirs running here (a fleet never gives away their partition)."""
        return {origin.user_id for origin, _ in self._running}

    @property
    def busy(self) -> bool:
        """Whether a run has work a drain waits for: a call running, a result on its way, a question that cannot
        outlive the process. Calls waiting only for approvers or 2026-07-28 answers are not (they are kept)."""
        return any(not flight.parked for flight, _ in self._flights.values())

    async def leave_kept(self) -> int:
        """The process leaves after a drain: runs whose every wait is kept in the store end here without a word
        (no result, no card edited: the next process takes them up, as after a crash); returns how many, once
        they have ended."""
        left = [(scope, ended) for scope, (flight, ended) in self._flights.items() if flight.kept]
        for scope, _ in left:
            scope.cancel()
        for _, ended in left:
            await ended.wait()
        return len(left)

    def leave(self, lost: Callable[[int], bool]) -> int:
        """The people `lost` says are another instance's now: their runs here end at once without a word (no
        result, no card edited, nothing more sent to their servers: the new owner carries on what is kept);
        returns how many."""
        left = [scope for scope, user_id in self._whose.items() if lost(user_id)]
        for scope in left:
            scope.cancel()
        return len(left)

    async def leave_lost(
        self,
        prompts: list[Prompt],
        show: Callable[[Prompt], Awaitable[None]],
        grace_s: float = LEAVE_GRACE_S,
    ) -> int:
        """The process leaves after a drain, and these kept 2025-era questions cannot wait for the next one: each
        still pending gets `cancel` to its server and `show` (its card says it was lost, with **Run again**), and
        the calls that asked them end without a word, once their servers have taken the answers (the calls end)
        or after `grace_s`. Returns how many were left so (one answered at the last moment goes on as answered)."""
        left = [prompt for prompt in prompts if self.prompts.leave(prompt)]
        runs = [
            (scope, flight, ended)
            for scope, (flight, ended) in self._flights.items()
            if flight.caller is not None and flight.caller.asking & set(left)
        ]
        self._left.update(flight for _, flight, _ in runs)  # before the call can see its answer
        for prompt in left:
            await show(prompt)
        with anyio.move_on_after(grace_s):
            for _, _, ended in runs:
                await ended.wait()
        for scope, _, ended in runs:
            scope.cancel()
            await ended.wait()
        return len(left)

    async def resume(
        self,
        tool: ToolInfo,
        args: dict[str, Any],
        origin: Origin,
        kept: list[KeptQuestion],
        restored: list[tuple[Prompt, KeptQuestion]],
    ) -> None:
        """A round kept from before a restart: wait for its cards, resume the call, show the result."""
        await self.run(tool, args, origin, kept, restored)

    async def resume_task(self, task: KeptTask) -> None:
        """A task made by the process before a restart: poll it again, show the result."""
        tool = ToolInfo(task.server, task.tool, None, None, {})
        await self.run(tool, task.arguments or {}, task.origin, task=task)

    async def sign_in_again(self, server: str, origin: Origin) -> None:
        """A sign-in its person had not finished when the process before stopped: connecting to `server` as them
        asks them to sign in again (a new card, a new link); nothing runs after it (which call wanted it, the
        process before may not have known: the card that said so asks them to send their command again)."""
        if not self.access.allows(origin.user_id):
            return
        try:
            await self.hub.list_tools(server, origin)
        except Unavailable as exc:
            logger.info("signing in again to %s did not complete: %s", server, exc.reason)

    def run_again_button(self, question: KeptQuestion) -> InlineButton:
        """**Run again** for a legacy question lost in a restart: the same call, the same arguments, only for
        the same person (the button's token is looked up here; nothing in it is trusted).

        The button's token is the question's own (random, kept in its row): whichever process draws the card (the
        one that drains, at once; the next one, which is the one to take the tap) draws the same button."""
        args = question.arguments or {}
        return self._run_again(question.server, question.tool, args, question.origin, question.token)

    def _run_again(
        self, server: str, tool: str, args: dict[str, Any], origin: Origin, token: str | None = None
    ) -> InlineButton:
        """**Run again** for this call (a lost question's, or one whose connection broke after an answer)."""
        token = token or secrets.token_urlsafe(9)
        # The person taps it: an agent's lost call runs again as the person's own (their rules and limits).
        origin = replace(origin, agent=None)
        self._reruns[token] = (server, tool, args, origin)
        while len(self._reruns) > RERUNS_KEPT:
            self._reruns.popitem(last=False)
        return callback_button("🔁 Run again", Button(Kind.RERUN, token, 0, Action.CALL).pack())

    def rerun(self, token: str) -> tuple[str, str, dict[str, Any], Origin] | None:
        """What a **Run again** button repeats (server, tool, arguments, whose call), or None when unknown."""
        return self._reruns.get(token)

    async def _run(
        self,
        tool: ToolInfo,
        args: dict[str, Any],
        origin: Origin,
        kept: list[KeptQuestion] | None = None,
        restored: list[tuple[Prompt, KeptQuestion]] | None = None,
        flight: Flight | None = None,
        task: KeptTask | None = None,
    ) -> None:
        """Check the arguments by the tool's schema (an unknown name ends it, naming the real ones), ask for
        missing required ones and those that did not fit, then call and report; never raises for outcomes."""
        if kept is None and task is None:
            check = check_arguments(tool.input_schema, args)
            if check.unknown:
                await self.surface.send(origin.chat_id, Screen(esc(unknown_text(tool.name, check), 1000)))
                return
            missing = to_ask(tool.input_schema, args, check)
            if missing:
                extra = await self._ask_arguments(tool, missing, origin, check)
                if extra is None:
                    return
                args = {**{k: v for k, v in args.items() if k not in missing}, **extra}
        status = _Status(
            origin.chat_id, None, f"{tool.server} · {tool.name}", asker=(origin, tool.server), flight=flight
        )
        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None
        async with anyio.create_task_group() as tg:

            def show_status() -> None:
                status.dirty = True
                if not status.keeper:
                    status.keeper = True
                    tg.start_soon(self._keep_status, status)

            def status_due() -> None:
                nonlocal timer
                if status.message_id is not None or flight in self._left:
                    return
                # Until the status message is out, look again every second: the card waiting for this person
                # (or, answered, for the result) stands for the call, and a status below it would push it up;
                # and a status on its way gives way to a card that comes first (`unless` in `_keep_status`), and
                # to cards on their way to anyone (`after_cards`: in a flood of questions, the cards go first).
                timer = loop.call_later(STATUS_AFTER_S, status_due)
                if not status.keeper and not self._card_stands_for(origin, tool.server):
                    show_status()

            async def on_progress(progress: Progress) -> None:
                if flight in self._left:
                    return
                status.latest = progress
                shown = status.message_id is not None or status.keeper
                if shown or not self._card_stands_for(origin, tool.server):
                    show_status()  # else the timer shows it once the card is answered

            # A loop timer, not a sleeping task: most calls end before it fires, and a task per call would
            # cost more than the message it saves.
            timer = loop.call_later(STATUS_AFTER_S, status_due)
            try:
                outcome = await self.hub.call_tool(
                    tool.server,
                    tool.name,
                    args,
                    origin,
                    on_progress,
                    kept=kept,
                    restored=restored,
                    flight=flight,
                    task=task,
                )
            finally:
                timer.cancel()
            if status.keeper:  # a status task runs (most calls end before one starts)
                tg.cancel_scope.cancel()
        await self._end(flight, status, outcome, tool, args, origin)

    async def _end(
        self,
        flight: Flight | None,
        status: _Status,
        outcome: ToolOutcome,
        tool: ToolInfo,
        args: dict[str, Any],
        origin: Origin,
    ) -> None:
        """Show a run's outcome, unless its question was left as lost at a drain's end (its card says so, with
        Run again) or the person is no longer this instance's (the new owner carries on)."""
        if flight in self._left:
            return
        if await self.prompts.fence.acts_for(origin.user_id):
            again = [[self._run_again(tool.server, tool.name, args, origin)]] if outcome.again else None
            try:
                with kept_for(origin.user_id):  # in the outbox until sent: a kill loses no result
                    await self._show(status, outcome, again)
            except Elsewhere:
                logger.info("the result of a call of user %s is left to their new owner", origin.user_id)

    async def _keep_status(self, status: _Status) -> None:
        """Send the status message, or edit it to the latest progress (one edit a second at most); ends when
        it is up to date, so a call waiting on its person keeps no task."""
        try:
            while status.dirty:
                wait = status.last_edit + PROGRESS_EVERY_S - anyio.current_time()
                if wait > 0:
                    await anyio.sleep(wait)
                status.dirty, status.last_edit = False, anyio.current_time()
                screen = Screen(progress_text(status.title, status.latest))
                # Shielded: a status message that went out must be known, or the result lands beside it and
                # leaves it saying "Running" for good; an edit must land before the result's.
                with self.prompts.shielded_io():
                    try:
                        if status.message_id is None:
                            with unless(functools.partial(self._status_moot, status)), after_cards():
                                status.asked_before = status.asked
                                status.message_id = await self.surface.send(status.chat_id, screen)
                        else:
                            resent = await self.surface.edit(status.chat_id, status.message_id, screen)
                            status.message_id = resent or status.message_id
                    except Withdrawn:
                        status.dirty = False  # cards came first: the timer looks again
                    except TelegramError:
                        logger.info("status message failed", exc_info=True)
        finally:
            status.keeper = False

    def _status_moot(self, status: _Status) -> bool:
        return status.asker is not None and self._card_stands_for(*status.asker)

    def _card_stands_for(self, origin: Origin, server: str) -> bool:
        """Whether a card of `server`'s for `origin` stands for their call: waiting for them, or answered and
        waiting for the call's result."""
        return self.prompts.asking(origin, server) or self.surface.awaits_result(origin, server)

    async def _show(self, status: _Status, outcome: ToolOutcome, keyboard: Keyboard | None = None) -> None:
        """The result: on the card just answered, on the status message, or below; `keyboard` under its last
        message (never folded into a card)."""
        messages = result_messages(status.title, outcome)
        if status.message_id is not None and status.asked > status.asked_before:
            # A card came below the status message since it was sent: the result goes below that card, where
            # its person looks (edited in place above it, it would go unseen).
            await self.surface.retire(status.chat_id, status.message_id)
            status.message_id = None
        if status.asker is not None:
            # The result goes on the card just answered, when this call is the only one that could have asked
            # it and no status message stands for the call; else that card is settled first, above the result.
            alone = (
                status.message_id is None
                and self._running[status.asker] == 1
                and bool(messages)
                and keyboard is None
            )
            if await self.surface.fold_result(*status.asker, messages[0] if alone else None):
                messages.pop(0)
        if status.message_id is not None and messages:
            text = messages.pop(0)
            await self.surface.edit(
                status.chat_id, status.message_id, Screen(text, None if messages else keyboard)
            )
        for i, text in enumerate(messages, 1):
            await self.surface.send(status.chat_id, Screen(text, keyboard if i == len(messages) else None))

    async def _ask_arguments(
        self, tool: ToolInfo, names: list[str], origin: Origin, check: ArgumentCheck
    ) -> dict[str, Any] | None:
        schema = sub_schema(tool.input_schema, names, check.refused)
        try:
            spec = parse_schema(schema)
        except UnsupportedSchema as exc:
            example = json.dumps({n: "…" for n in names}, ensure_ascii=False)
            await self.surface.send(
                origin.chat_id,
                Screen(
                    f"<b>{esc(tool.name, NAME_CLIP)}</b> needs {esc(', '.join(names), TEXT_CLIP)}, which I cannot ask as a form "
                    f"({esc(exc.reason, 200)}). Pass them as JSON:\n<code>/call {esc(tool.server, NAME_CLIP)} "
                    f"{esc(tool.name, NAME_CLIP)} {esc(clip(example, 300))}</code>"
                ),
            )
            return None
        request = Request(
            id=new_request_id(),
            kind=RequestKind.INPUT,
            prompt=asking_again(tool.name, check)
            if check.invalid
            else f"To call {tool.name}, please fill in:",
            data={"schema": schema},
        )
        answer = await self.prompts.ask(Prompt(request=request, origin=origin, server=tool.server, form=spec))
        return answer.data if answer.ok else None

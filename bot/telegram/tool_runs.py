"""Running a tool from Telegram: collect missing arguments, a status message with progress, the result. Does I/O."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import anyio
from telegram.error import TelegramError

from bot.core import CallStatus, Origin, Progress, Prompt, PromptRegistry, ToolInfo, ToolOutcome
from bot.core.call_args import missing_required, sub_schema
from bot.servers.hub import Hub
from bot.telegram.render import Screen, clip, esc, progress_text
from bot.telegram.surface import TelegramSurface
from mapping import Request, RequestKind, UnsupportedSchema, new_request_id, parse_schema

logger = logging.getLogger(__name__)

CHUNK: Final = 3500
MAX_MESSAGES: Final = 4
PROGRESS_EVERY_S: Final = 1.0
"""Telegram allows about one message per second per chat; progress edits never go faster."""
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
        text = f"🚫 <b>{esc(title, 100)}</b> — refused: {esc(outcome.text, 300)}"
        return [text] if outcome.text else []
    label = _LABEL.get(outcome.status)
    header = f"{_ICON[outcome.status]} <b>{esc(title, 100)}</b>" + (f" — {label}" if label else "")
    body = outcome.text.strip()
    as_code = outcome.structured is not None and not any(b.strip() for b in outcome.blocks)
    if not body:
        return [header + ("\n<i>(no output)</i>" if outcome.status is CallStatus.OK else "")]
    chunks = _split(body, CHUNK)
    shown, rest = chunks[:MAX_MESSAGES], chunks[MAX_MESSAGES:]
    messages = []
    for i, chunk in enumerate(shown):
        text = f"<pre>{esc(chunk)}</pre>" if as_code else esc(chunk)
        messages.append(f"{header}\n{text}" if i == 0 else text)
    if rest:
        messages[-1] += f"\n\n<i>… output trimmed: {sum(len(c) for c in rest)} more characters not shown.</i>"
    return messages


def _split(text: str, size: int) -> list[str]:
    chunks: list[str] = []
    while len(text) > size:
        cut = text.rfind("\n", size // 2, size)
        cut = size if cut < 0 else cut
        chunks.append(text[:cut])
        text = text[cut:].lstrip("\n")
    chunks.append(text)
    return chunks


class ToolButtons:
    """`/tools` buttons: short random tokens -> (server, tool, where and for whom); bounded, oldest forgotten.

    The chat is kept here, not read from the tap: a tap's update arrives without the message it was on
    (`bot.telegram.bot`).
    """

    def __init__(self, capacity: int = 5000) -> None:
        self._entries: OrderedDict[str, tuple[str, str, Origin]] = OrderedDict()
        self._capacity = capacity

    def add(self, server: str, tool: str, origin: Origin) -> str:
        token = secrets.token_urlsafe(9)
        self._entries[token] = (server, tool, origin)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return token

    def get(self, token: str) -> tuple[str, str, Origin] | None:
        return self._entries.get(token)


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


class ToolRunner:
    """Runs calls for Telegram users; one instance per bot."""

    def __init__(self, hub: Hub, prompts: PromptRegistry, surface: TelegramSurface) -> None:
        self.hub = hub
        self.prompts = prompts
        self.surface = surface

    async def run(self, tool: ToolInfo, args: dict[str, Any], origin: Origin) -> None:
        """Ask for missing required arguments, then call and report; never raises for outcomes."""
        missing = missing_required(tool.input_schema, args)
        if missing:
            extra = await self._ask_arguments(tool, missing, origin)
            if extra is None:
                return
            args = {**args, **extra}
        status = _Status(origin.chat_id, None, f"{tool.server} · {tool.name}")
        loop = asyncio.get_running_loop()
        async with anyio.create_task_group() as tg:

            def show_status() -> None:
                status.dirty = True
                if not status.keeper:
                    status.keeper = True
                    tg.start_soon(self._keep_status, status)

            def status_due() -> None:
                nonlocal timer
                if self.prompts.asking(origin, tool.server):
                    # The card waiting for this person stands for the call, and a status below it would push
                    # it up: look again in a second (the call may still run once the card is answered).
                    timer = loop.call_later(STATUS_AFTER_S, status_due)
                else:
                    show_status()

            async def on_progress(progress: Progress) -> None:
                status.latest = progress
                shown = status.message_id is not None or status.keeper
                if shown or not self.prompts.asking(origin, tool.server):
                    show_status()  # else the timer shows it once the card is answered

            # A loop timer, not a sleeping task: most calls end before it fires, and a task per call would
            # cost more than the message it saves.
            timer = loop.call_later(STATUS_AFTER_S, status_due)
            try:
                outcome = await self.hub.call_tool(tool.server, tool.name, args, origin, on_progress)
            finally:
                timer.cancel()
            if status.keeper:  # a status task runs (most calls end before one starts)
                tg.cancel_scope.cancel()
        await self._show(status, outcome)

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
                with anyio.CancelScope(shield=True):
                    try:
                        if status.message_id is None:
                            status.message_id = await self.surface.send(status.chat_id, screen)
                        else:
                            resent = await self.surface.edit(status.chat_id, status.message_id, screen)
                            status.message_id = resent or status.message_id
                    except TelegramError:
                        logger.info("status message failed", exc_info=True)
        finally:
            status.keeper = False

    async def _show(self, status: _Status, outcome: ToolOutcome) -> None:
        messages = result_messages(status.title, outcome)
        if status.message_id is not None and messages:
            await self.surface.edit(status.chat_id, status.message_id, Screen(messages.pop(0)))
        for text in messages:
            await self.surface.send(status.chat_id, Screen(text))

    async def _ask_arguments(self, tool: ToolInfo, names: list[str], origin: Origin) -> dict[str, Any] | None:
        schema = sub_schema(tool.input_schema, names)
        try:
            spec = parse_schema(schema)
        except UnsupportedSchema as exc:
            example = json.dumps({n: "…" for n in names}, ensure_ascii=False)
            await self.surface.send(
                origin.chat_id,
                Screen(
                    f"<b>{esc(tool.name, 64)}</b> needs {esc(', '.join(names), 300)}, which I cannot ask as a form "
                    f"({esc(exc.reason, 200)}). Pass them as JSON:\n<code>/call {esc(tool.server, 64)} "
                    f"{esc(tool.name, 64)} {esc(clip(example, 300))}</code>"
                ),
            )
            return None
        request = Request(
            id=new_request_id(),
            kind=RequestKind.INPUT,
            prompt=f"To call {tool.name}, please fill in:",
            data={"schema": schema},
        )
        answer = await self.prompts.ask(Prompt(request=request, origin=origin, server=tool.server, form=spec))
        return answer.data if answer.ok else None

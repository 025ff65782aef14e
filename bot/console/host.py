"""The terminal host: the same bridge as the Telegram bot, with prompts as plain questions. Does I/O.

Reads commands and answers line by line, so it works interactively and with a pipe:
`printf '/call demo deploy\\n2\\ny\\ns\\n' | toolnexus-bot console`. At a terminal a call runs while the
prompt stays open, so `/cancel` or Ctrl-C stops it at once; through a pipe every line is read in turn.

Everything it prints passes `printable` first: a server's text (a question, a field's title, a tool's
description, a result, a progress message) reaches the terminal without control characters, so an ANSI or
OSC escape sequence cannot repaint the screen, move the cursor or retitle the window. Bad input is quoted
back cut to `ECHO_LIMIT` characters.

Two parts, each whole when built: the screen (`ConsoleScreen`, the `Surface` the prompt registry shows questions
on, so built before it) and the command loop (`Console`, given the screen and the hub).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio
from anyio.abc import TaskGroup

from bot.console.forms import FormWalker, is_cancel
from bot.console.terminal import INTERRUPT, LineSource, progress_bar
from bot.core import (
    OUTCOME_TEXT,
    CallStatus,
    Origin,
    Outcome,
    Progress,
    Prompt,
    ToolInfo,
    ToolOutcome,
)
from bot.core.call_args import (
    CallArgsError,
    CallCommand,
    asking_again,
    check_arguments,
    not_found_text,
    parse_arguments,
    split_call,
    sub_schema,
    to_ask,
    unknown_text,
)
from bot.servers.hub import Hub, Unavailable
from mapping import (
    UnsupportedSchema,
    parse_schema,
)
from mapping.urls import check_url

CONSOLE_USER = Origin(chat_id=0, user_id=0)
_CONTROLS: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but tab and newline, DEL, and C1 controls (one-byte CSI, OSC, ST among them)."""


def printable(text: str) -> str:
    """`text` without control characters: newline and tab stay, escape sequences lose their ESC (or CSI)
    and show as harmless text."""
    return _CONTROLS.sub("", text)


HELP = """Commands:
  /servers                      the configured servers
  /tools [server]               list tools
  /call <server> <tool> [args]  call a tool; args: a JSON object or key=value pairs
  /call <tool> [args]           when the tool name is unique
  /cancel                       cancel the running call (at a terminal also Ctrl-C, at once)
  /help, /quit                  /quit or Ctrl-D leaves
While a question is asked: type the answer; Enter keeps the shown value; /skip, /decline, /cancel (or Ctrl-C)."""
PROMPT: Final = "toolnexus> "
RUNNING: Final = "  A call is running: /cancel or Ctrl-C stops it; other commands wait until it ends."


class ConsoleScreen:
    """The terminal of one person, as a `Surface`: questions asked there one at a time, links to open, lines.

    It is built first (the prompt registry shows questions on it); the command loop (`Console`) reads its lines
    and shows questions only inside `showing`. A `/cancel` typed while a link's flow is awaited is handed to the
    command loop (`cancels`), which holds the hub.
    """

    def __init__(self, reader: LineSource, write: Callable[[str], None] | None = None) -> None:
        self.reader = reader
        self._write = write or _stdout
        self._turn = anyio.Lock()
        self._scopes: dict[str, anyio.CancelScope] = {}
        self._tg: TaskGroup | None = None
        self._eof = False
        self._questions = 0
        """Questions being asked (or waiting for their turn): while any is, the call's `/cancel` watch rests."""
        self._no_questions = anyio.Event()
        self._no_questions.set()
        self._watch: anyio.CancelScope | None = None
        self.forms = FormWalker(self.next_line, self.say)
        self._cancel, self.cancels = anyio.create_memory_object_stream[None](math.inf)
        """The person's `/cancel` of a flow awaited in a browser: the command loop cancels their call."""

    def say(self, text: str = "") -> None:
        self._write(printable(text))

    @asynccontextmanager
    async def showing(self) -> AsyncIterator[None]:
        """Questions are shown (each in a task of its own) while inside; those still open end when it is left."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield
            finally:
                tg.cancel_scope.cancel()
                self._cancel.close()
                self.cancels.close()

    # -- Surface -------------------------------------------------------------------------------------

    async def show_prompt(self, prompt: Prompt) -> None:
        assert self._tg is not None  # questions come from calls, run inside `showing`
        self._question_opened()
        self._tg.start_soon(self._interact, prompt)

    async def settle_prompt(self, prompt: Prompt, outcome: Outcome) -> None:
        scope = self._scopes.pop(prompt.token, None)
        if scope is not None:
            scope.cancel()
        if outcome is Outcome.ANSWERED and prompt.request.url is not None:
            self.say(f"  Open this link in your browser:\n  {check_url(prompt.request.url).href}")
            if prompt.awaits_completion:
                assert self._tg is not None
                self._question_opened()
                self._tg.start_soon(self._await_completion, prompt)
            return
        if prompt.sign_in and outcome is Outcome.COMPLETED:
            self.say(f"  [{prompt.server}] Signed in to {prompt.server}.")
        elif outcome is not Outcome.ANSWERED:
            self.say(f"  [{prompt.server}] {OUTCOME_TEXT[outcome]}.")

    async def report_unsupported(self, origin: Origin, server: str, message: str, reason: str) -> None:
        self.say(f"[{server}] asked something this client cannot show: {reason}\n  ({message})")

    async def notify(self, origin: Origin, text: str) -> None:
        self.say(text)

    # -- lines ---------------------------------------------------------------------------------------

    async def next_line(self, prompt: str = "") -> str | None:
        if self._eof:
            return None
        line = await self.reader.readline(printable(prompt))
        self._eof = line is None
        return line

    async def next_cancel(self) -> str | None:
        """Read lines while no question is open, until `/cancel`, Ctrl-C or Ctrl-D (None); other lines are told
        to wait. The line that cancels."""
        while True:
            if self._questions:
                await self._no_questions.wait()
                continue
            with anyio.CancelScope() as scope:
                self._watch = scope
                line = await self.next_line(PROMPT)
            self._watch = None
            if scope.cancelled_caught:
                continue  # a question took the prompt over
            if line is None or is_cancel(line):
                return line
            if line.strip():
                self.say(RUNNING)

    def _question_opened(self) -> None:
        self._questions += 1
        if self._no_questions.is_set():
            self._no_questions = anyio.Event()
        if self._watch is not None:
            self._watch.cancel()

    def _question_closed(self) -> None:
        self._questions -= 1
        if self._questions == 0:
            self._no_questions.set()

    # -- prompts -------------------------------------------------------------------------------------

    async def _interact(self, prompt: Prompt) -> None:
        try:
            async with self._turn:
                if not prompt.pending:
                    return
                with anyio.CancelScope() as scope:
                    self._scopes[prompt.token] = scope
                    answer = await self.forms.ask(prompt)
                    prompt.answer(answer)
                self._scopes.pop(prompt.token, None)
        finally:
            self._question_closed()

    async def _await_completion(self, prompt: Prompt) -> None:
        try:
            async with self._turn:
                if prompt.completed.is_set():
                    return
                with anyio.CancelScope() as scope:
                    self._scopes[prompt.token] = scope
                    self.say("  Press Enter when you have finished there (or /cancel).")
                    line = await self.next_line("done? > ")
                    if line is None or is_cancel(line):
                        self._cancel.send_nowait(None)
                    else:
                        prompt.complete_by_hand()
                self._scopes.pop(prompt.token, None)
        finally:
            self._question_closed()


class Console:
    """The command loop of one person at a terminal, on its screen and the hub."""

    def __init__(self, screen: ConsoleScreen, hub: Hub) -> None:
        self.screen = screen
        self.hub = hub
        self.say = screen.say

    async def run(self) -> None:
        """Read commands until /quit or end of input."""
        async with self.screen.showing(), anyio.create_task_group() as tg:
            tg.start_soon(self._take_cancels)
            self.say("toolnexus console. /help for commands.")
            while (line := await self.screen.next_line(PROMPT)) is not None:
                if line == INTERRUPT:  # Ctrl-C with nothing running: a fresh prompt, as in a shell
                    continue
                if line.strip() in ("/quit", "/exit"):
                    break
                await self.command(line.strip())
            tg.cancel_scope.cancel()

    async def _take_cancels(self) -> None:
        """A `/cancel` typed while a link's flow is awaited cancels the call waiting for it."""
        async for _ in self.screen.cancels:
            self.hub.cancel(CONSOLE_USER)

    def interrupt(self) -> bool:
        """SIGINT (Ctrl-C outside a terminal prompt): cancel the running call or question; False if none."""
        if self.hub.cancel(CONSOLE_USER):
            self.say("  Cancelling...")  # the call's outcome (or the question's) says "Cancelled" once it is
            return True
        return False

    async def command(self, line: str) -> None:
        if not line:
            return
        word, _, rest = line.partition(" ")
        if word in ("/help", "/start"):
            self.say(HELP)
        elif word == "/servers":
            for status in [await self.hub.probe(name, CONSOLE_USER) for name in self.hub.server_names()]:
                state = (
                    f"ok, {status.tool_count} tools, {status.protocol}"
                    if status.connected
                    else f"unavailable: {status.error}"
                )
                self.say(f"  {status.name} ({status.transport}): {state}")
        elif word == "/tools":
            for name in [rest.strip()] if rest.strip() else self.hub.server_names():
                try:
                    tools = await self.hub.list_tools(name, CONSOLE_USER)
                except Unavailable as exc:
                    self.say(f"  {name}: unavailable: {exc.reason}")
                    continue
                for tool in tools:
                    self.say(
                        f"  {name} {tool.name}"
                        + (f": {_first_line(tool.description)}" if tool.description else "")
                    )
        elif word == "/call":
            await self._call(rest)
        elif word == "/cancel":
            count = self.hub.cancel(CONSOLE_USER)
            self.say(
                f"  Cancelled {count} running call(s) and question(s)." if count else "  Nothing to cancel."
            )
        elif word in ("/skip", "/decline"):
            self.say(f"  {word} answers a question, and nothing is being asked now.")
        else:
            self.say("  Unknown command. /help lists them.")

    async def _call(self, text: str) -> None:
        try:
            cmd = split_call(text, self.hub.server_names())
        except CallArgsError as exc:
            self.say(f"  {exc}")
            return
        tool = await self._find_tool(cmd)
        if tool is None:
            return
        try:
            args = parse_arguments(cmd.raw_args, tool.input_schema)
        except CallArgsError as exc:
            self.say(f"  {exc}")
            return
        check = check_arguments(tool.input_schema, args)
        if check.unknown:
            self.say(f"  {unknown_text(tool.name, check)}")
            return
        missing = to_ask(tool.input_schema, args, check)
        if missing:
            if check.invalid:
                self.say("  " + asking_again(tool.name, check).replace("\n", "\n  "))
            extra = await self._ask_arguments(tool, missing, check.refused)
            if extra is None:
                self.say("  Not called.")
                return
            args = {**{k: v for k, v in args.items() if k not in missing}, **extra}
        self.say(f"  Calling {tool.server}/{tool.name}...")
        if self.screen.reader.interactive:
            outcome = await self._call_watching(tool, args)
        else:
            outcome = await self.hub.call_tool(tool.server, tool.name, args, CONSOLE_USER, self._progress)
        self._show_outcome(outcome)

    async def _call_watching(self, tool: ToolInfo, args: dict[str, object]) -> ToolOutcome:
        """Run the call while the prompt stays open for `/cancel` (and Ctrl-C); questions take the prompt over."""
        hub = self.hub
        outcomes: list[ToolOutcome] = []
        async with anyio.create_task_group() as tg:

            async def call() -> None:
                outcomes.append(
                    await hub.call_tool(tool.server, tool.name, args, CONSOLE_USER, self._progress)
                )
                tg.cancel_scope.cancel()

            tg.start_soon(call)
            await self._watch_for_cancel()
        self.screen.reader.set_status("")
        return outcomes[0]

    async def _watch_for_cancel(self) -> None:
        """Read lines while no question is open; `/cancel`, Ctrl-C or Ctrl-D cancel the call (runs until cancelled)."""
        while True:
            line = await self.screen.next_cancel()
            self.hub.cancel(CONSOLE_USER)
            self.say("  Cancelling the call...")
            if line is None:
                await anyio.sleep_forever()  # end of input: leave once the call has ended

    async def _find_tool(self, cmd: CallCommand) -> ToolInfo | None:
        server, name = cmd.server, cmd.tool
        found: list[ToolInfo] = []
        for candidate in [server] if server else self.hub.server_names():
            try:
                found += [t for t in await self.hub.list_tools(candidate, CONSOLE_USER) if t.name == name]
            except Unavailable as exc:
                if server:
                    self.say(f"  {server}: unavailable: {exc.reason}")
                    return None
        if len(found) == 1:
            return found[0]
        if not found:
            self.say(f"  {not_found_text(cmd, self.hub.server_names())}" + ("" if server else " Try /tools."))
        else:
            self.say(
                f"  {name!r} is on several servers: "
                + ", ".join(t.server for t in found)
                + "; name the server."
            )
        return None

    async def _ask_arguments(
        self, tool: ToolInfo, names: list[str], refused: frozenset[str] = frozenset()
    ) -> dict[str, object] | None:
        try:
            spec = parse_schema(sub_schema(tool.input_schema, names, refused))
        except UnsupportedSchema as exc:
            self.say(f"  {tool.name} needs {', '.join(names)}; pass them as JSON ({exc.reason}).")
            return None
        if not refused:
            self.say(f"  {tool.name} needs some arguments.")
        answer = await self.screen.forms.walk(spec)
        return answer if isinstance(answer, dict) else None

    async def _progress(self, progress: Progress) -> None:
        if self.screen.reader.interactive:  # one line under the prompt, updated in place
            self.screen.reader.set_status(
                printable("  " + progress_bar(progress.fraction, progress.progress, progress.message))
            )
            return
        fraction = progress.fraction
        bar = f"{fraction:.0%}" if fraction is not None else f"{progress.progress:g}"
        self.say(f"  ... {bar}" + (f" {progress.message}" if progress.message else ""))

    def _show_outcome(self, outcome: ToolOutcome) -> None:
        label = {CallStatus.OK: "Result", CallStatus.TOOL_ERROR: "Tool error"}.get(
            outcome.status, outcome.status.value.replace("_", " ").capitalize()
        )
        self.say(f"{label}:\n{outcome.text}" if outcome.text else f"{label}.")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _stdout(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()

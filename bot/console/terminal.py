"""Line input for the console: a pipe read as is, or a terminal with prompt, line editing and history. Does I/O.

Both give the console the same three things: a line, `INTERRUPT` (Ctrl-C at a terminal) and None (end of
input, Ctrl-D). On a terminal, `prompt_toolkit` edits the line, keeps the history (up and down arrows), shows
a status line above the prompt (a running call's progress bar) and keeps other output above the prompt.
"""

from __future__ import annotations

import sys
import threading
from typing import Final, Protocol, TextIO

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.history import InMemoryHistory

__all__ = ["INTERRUPT", "LineReader", "LineSource", "TerminalReader", "progress_bar"]

INTERRUPT: Final = "\x03"
"""What `readline` returns for Ctrl-C at a terminal (the character Ctrl-C types)."""

BAR_WIDTH: Final = 20


class LineSource(Protocol):
    """Where the console's lines come from."""

    interactive: bool
    """A person at a terminal (prompts and a status line are shown) rather than a pipe."""

    async def readline(self, prompt: str = "") -> str | None:
        """The next line (without its end), `INTERRUPT`, or None at end of input."""
        ...

    def set_status(self, text: str) -> None:
        """The one status line shown above the prompt; "" removes it."""
        ...


class LineReader:
    """Lines from a text stream (a pipe), read by a daemon thread so a blocked read never holds up exit.

    Prompts and the status line are not shown: the output stays plain lines, one per message.
    """

    interactive = False

    def __init__(self, stream: TextIO) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str | None](1000)
        self._stream = stream

    def start(self) -> None:
        token = anyio.lowlevel.current_token()

        def pump() -> None:
            for line in self._stream:
                anyio.from_thread.run_sync(self._send.send_nowait, line.rstrip("\r\n"), token=token)
            anyio.from_thread.run_sync(self._send.send_nowait, None, token=token)

        threading.Thread(target=pump, name="console-stdin", daemon=True).start()

    async def readline(self, prompt: str = "") -> str | None:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            return None

    def set_status(self, text: str) -> None:
        return None


class TerminalReader:
    """A terminal: `prompt_toolkit` line editing and history, Ctrl-C as `INTERRUPT`, Ctrl-D as end of input.

    A read may be cancelled (a question arrives while the console waits for `/cancel`); the line being typed
    is then dropped and the terminal restored.
    """

    interactive = True

    def __init__(self) -> None:
        self._status = ""
        self._session: PromptSession[str] = PromptSession(history=InMemoryHistory())

    async def readline(self, prompt: str = "") -> str | None:
        try:
            # handle_sigint=False: Ctrl-C is a key while the prompt runs; the console's own SIGINT receiver
            # must stay installed for the moments in between (prompt_toolkit would remove it).
            return await self._session.prompt_async(lambda: self._message(prompt), handle_sigint=False)
        except KeyboardInterrupt:
            return INTERRUPT
        except EOFError:
            return None

    def set_status(self, text: str) -> None:
        self._status = text
        app = self._session.app
        if app.is_running:
            app.invalidate()

    def _message(self, prompt: str) -> str:
        # The status line sits right above the prompt and is redrawn in place (no bottom toolbar: that one
        # needs the terminal to answer cursor position requests, which not every terminal does).
        return f"{self._status}\n{prompt}" if self._status else prompt


def progress_bar(fraction: float | None, done: float, message: str | None) -> str:
    """`[#######.............]  35% message`, or `... 7 message` when the total is unknown."""
    if fraction is None:
        head = f"... {done:g}"
    else:
        fraction = min(max(fraction, 0.0), 1.0)
        filled = round(fraction * BAR_WIDTH)
        head = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:4.0%}"
    return head + (f" {message}" if message else "")


def choose_reader(stdin: TextIO = sys.stdin, stdout: TextIO = sys.stdout) -> LineReader | TerminalReader:
    """A terminal reader when both ends are a terminal, else the plain line reader (pipes, files)."""
    if stdin.isatty() and stdout.isatty():
        return TerminalReader()
    return LineReader(stdin)

"""Wires the console host: registry, hub, the line source (a terminal or a pipe) and signals. Does I/O."""

from __future__ import annotations

import signal
from contextlib import ExitStack

import anyio
from prompt_toolkit.patch_stdout import patch_stdout

from bot.config import Config
from bot.console.host import Console
from bot.console.terminal import LineReader, choose_reader
from bot.core import PromptRegistry
from bot.servers.hub import Hub

INTERRUPTED = 130
"""The exit status after SIGINT or SIGTERM with nothing to cancel (128 + SIGINT, as shells report it)."""


async def run_console(config: Config) -> int:
    """Run the console until /quit, Ctrl-D or end of input (0), or SIGINT with nothing running / SIGTERM (130).

    SIGINT (Ctrl-C when no terminal prompt has the keyboard, e.g. with piped input) cancels the running
    call or question, as `/cancel` does.
    """
    reader = choose_reader()
    if isinstance(reader, LineReader):
        reader.start()
    console = Console(reader)
    prompts = PromptRegistry(console, config.elicitation.timeout_s)
    interrupted = False
    with ExitStack() as stack:
        if reader.interactive:
            stack.enter_context(patch_stdout(raw=True))  # output from other tasks lands above the prompt
        async with Hub(config, prompts) as hub, anyio.create_task_group() as tg:
            hub.no_approver_reason = "the console has no approvers"  # gated calls are refused, never run


            async def on_signal() -> None:
                nonlocal interrupted
                with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                    async for signum in signals:
                        if signum == signal.SIGINT and console.hub is not None and console.interrupt():
                            continue
                        interrupted = True
                        tg.cancel_scope.cancel()
                        return

            tg.start_soon(on_signal)
            await console.run(hub, prompts)
            tg.cancel_scope.cancel()
    return INTERRUPTED if interrupted else 0

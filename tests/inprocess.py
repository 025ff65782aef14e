"""`toolnexus-bot ARGS` run as `bot.cli.main(ARGS)` in the test's own process, for commands whose process is not
the point (`audit`, `db upgrade`): the same arguments, environment, exit status, stdout and stderr as the
installed command, without the second or so of CPU a new process spends importing the bot.

`main` runs on the test's thread when that is the main thread with no event loop running (a plain test: `check`
installs its SIGTERM handler, which only the main thread may), else on a thread of its own (it calls
`anyio.run`, which an async test's running loop would refuse), with `sys.stdout`/`sys.stderr` redirected to buffers and the environment the command would get; the logging set-up
`main` installs (handlers, levels, the redacting record factory) is undone afterwards, so later tests in the
same worker see the logging they started with. Where the process is the point (signals, SIGKILL, a terminal,
the bot running beside the test) the tests keep starting the installed command.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import subprocess
import threading
from collections.abc import Iterator

from bot.cli import main


@contextlib.contextmanager
def logging_restored() -> Iterator[None]:
    """Logging as it was before the block: the root's handlers and level, every logger's level and filters (the
    refusal logger's once-an-hour filter included), and the record factory. For anything that runs `setup_logging`."""
    factory = logging.getLogRecordFactory()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    loggers = {
        name: (logger.level, list(logger.filters))
        for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    try:
        yield
    finally:
        logging.setLogRecordFactory(factory)
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in handlers:
            root.addHandler(handler)
        root.setLevel(level)
        for name, logger in list(logging.root.manager.loggerDict.items()):
            if not isinstance(logger, logging.Logger):
                continue
            if name not in loggers:  # made during the command: the level getLogger would have given it
                logger.setLevel(logging.NOTSET)
                continue
            old_level, old_filters = loggers[name]
            logger.setLevel(old_level)
            logger.filters[:] = old_filters


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    """What the tests' `run` helpers give the command: no TELEGRAM_/TOOLNEXUS_ variables of the caller's, plus `env`."""
    saved = dict(os.environ)
    try:
        for name in [n for n in os.environ if n.startswith(("TELEGRAM_", "TOOLNEXUS_"))]:
            del os.environ[name]
        os.environ.update(env or {})
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def toolnexus(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`toolnexus-bot ARGS` in this process: its exit status, stdout and stderr, as `subprocess.run` gives them."""
    out, err = io.StringIO(), io.StringIO()
    status: list[int] = []
    failure: list[BaseException] = []

    def command() -> None:
        try:
            status.append(main(list(args)))
        except SystemExit as exc:  # argparse refusing the arguments
            status.append(exc.code if isinstance(exc.code, int) else 2)
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    try:
        asyncio.get_running_loop()
        plain = False
    except RuntimeError:
        plain = threading.current_thread() is threading.main_thread()
    with (
        _environment(env),
        logging_restored(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        if plain:
            command()
        else:
            thread = threading.Thread(target=command, name="toolnexus-bot in process")
            thread.start()
            thread.join()
    if failure:
        raise failure[0]
    return subprocess.CompletedProcess(["toolnexus-bot", *args], status[0], out.getvalue(), err.getvalue())

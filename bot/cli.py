"""Command line: `toolnexus-bot [--config PATH]`, `toolnexus-bot check`, `toolnexus-bot console`. Does I/O.

Config is read here and only here. Exit status: 0 fine, 1 a server check failed (or the bot stopped on an
error), 2 a bad config (a token the Bot API rejects at start included). Nothing printed carries a secret: the
bot's failures are logged (redacted, bot.logs), never left to Python's traceback printer.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

import anyio

from bot.config import Config, ConfigError, load_config, parse_config
from bot.logs import setup_logging

logger = logging.getLogger("bot")

DEMO_CONFIG = {"servers": {"demo": {"command": "python", "args": ["-m", "bot.demo_server"], "title": "Demo"}}}


def _options(*, defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes. Without `defaults` (a sub-command's copy), an option left out sets
    nothing, so one given before the sub-command is kept."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        help="TOML config (see config.example.toml)",
        default=None if defaults else argparse.SUPPRESS,
    )
    common.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        default="INFO" if defaults else argparse.SUPPRESS,
    )
    return common


def _parser() -> argparse.ArgumentParser:
    common = _options(defaults=False)
    parser = argparse.ArgumentParser(
        prog="toolnexus-bot",
        description="A Telegram bot that is an MCP client. Without a sub-command it runs the bot.",
        parents=[_options(defaults=True)],
    )
    sub = parser.add_subparsers(dest="command", metavar="{run,check,console}")
    sub.add_parser("run", parents=[common], help="run the Telegram bot (the default)")
    sub.add_parser("check", parents=[common], help="validate the config and connect to every server")
    sub.add_parser(
        "console", parents=[common], help="the bridge in this terminal (demo server without --config)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `toolnexus-bot` script and `python -m bot`."""
    args = _parser().parse_args(argv)
    command = args.command or "run"
    try:
        config = _load(args.config, command)
        if command == "run":
            config.require_telegram()
    except ConfigError as exc:
        _print_problems(exc.problems)
        return 2
    setup_logging(
        "WARNING" if command == "console" and args.log_level == "INFO" else args.log_level, _secrets(config)
    )
    if command == "check":
        from bot.servers.check import check

        return anyio.run(check, config)
    if command == "console":
        from bot.console.main import run_console

        return anyio.run(run_console, config)
    from bot.telegram.app import StartFailed, run_bot

    try:
        return anyio.run(run_bot, config)
    except StartFailed as failed:
        if failed.config:
            _print_problems([failed.problem])
            return 2
        print(f"toolnexus-bot: {failed.problem}", file=sys.stderr)
        return 1
    except Exception:  # the top level: logged (without secrets), never left to a bare traceback
        logger.exception("the bot stopped on an error")
        return 1


def _print_problems(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"config error: {problem}", file=sys.stderr)


def _secrets(config: Config) -> tuple[str, ...]:
    """Every secret the config holds: the bot token, the webhook secret, servers' header values (and the
    credential of a `Bearer ...` value on its own, when it is long enough not to be a common word)."""
    telegram = config.telegram
    found = [s.get() for s in (telegram.token, telegram.webhook.secret_token) if s is not None]
    for server in config.servers:
        for value in server.reveal_headers().values():
            credential = value.partition(" ")[2]
            found += [value, credential if len(credential) >= 8 else ""]
    return tuple(s for s in found if s)


def _load(path: str | None, command: str) -> Config:
    if path is not None:
        return load_config(path)
    if command == "console":
        return parse_config(DEMO_CONFIG, os.environ)
    raise ConfigError([f"--config: required for {command!r} (try: --config config.example.toml)"])

"""Command line: `toolnexus-bot [--config PATH]`, `check`, `console`, `audit`, `db upgrade`. Does I/O.

Config is read here and only here. Exit status: 0 fine, 1 a server check failed (or the audit chain is
broken, or the database cannot be used), 2 a bad config.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

import anyio

from bot.config import Config, ConfigError, load_config, parse_config
from bot.logs import setup_logging

DEMO_CONFIG = {"servers": {"demo": {"command": "python", "args": ["-m", "bot.demo_server"], "title": "Demo"}}}


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", help="TOML config (see config.example.toml)")
    common.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser = argparse.ArgumentParser(
        prog="toolnexus-bot",
        description="A Telegram bot that is an MCP client. Without a sub-command it runs the bot.",
        parents=[common],
    )
    sub = parser.add_subparsers(dest="command", metavar="{run,check,console,audit,db}")
    sub.add_parser("run", parents=[common], help="run the Telegram bot (the default)")
    sub.add_parser("check", parents=[common], help="validate the config and connect to every server")
    sub.add_parser(
        "console", parents=[common], help="the bridge in this terminal (demo server without --config)"
    )
    _store_parsers(sub, common)
    return parser


def _store_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    from bot.store.commands import parse_since

    audit = sub.add_parser("audit", parents=[common], help="print the audit log, or --verify its hash chain")
    audit.add_argument("--since", type=parse_since, metavar="DATE", help="only events from DATE (ISO, UTC)")
    audit.add_argument("--user", type=int, metavar="ID", help="only events of this Telegram user id")
    audit.add_argument("--server", metavar="NAME", help="only events of this server")
    audit.add_argument("--format", choices=["jsonl", "csv"], default="jsonl")
    audit.add_argument(
        "--verify", action="store_true", help="check the chain; exit 1 naming the first bad row"
    )
    db = sub.add_parser("db", parents=[common], help="database maintenance")
    db.add_argument("action", choices=["upgrade"], help="upgrade: apply the schema migrations")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `toolnexus-bot` script and `python -m bot`."""
    args = _parser().parse_args(argv)
    command = args.command or "run"
    try:
        config = _load(args.config, command)
        token = config.require_telegram().get() if command == "run" else ""
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    hook_secret = config.telegram.webhook_secret.get() if config.telegram.webhook_secret else ""
    setup_logging(
        "WARNING" if command == "console" and args.log_level == "INFO" else args.log_level,
        (token, hook_secret),
    )
    if command == "check":
        from bot.servers.check import check

        return anyio.run(check, config)
    if command in ("audit", "db"):
        return _store_command(args, config)
    if command == "console":
        from bot.console.main import run_console

        return anyio.run(run_console, config)
    from bot.store import StoreUnavailable
    from bot.telegram.app import run_bot

    unavailable: list[StoreUnavailable] = []
    try:
        return anyio.run(run_bot, config)
    except* StoreUnavailable as group:  # raised inside run_bot's task group
        unavailable.extend(e for e in group.exceptions if isinstance(e, StoreUnavailable))
    for failure in unavailable:
        print(failure, file=sys.stderr)
    return 1


def _store_command(args: argparse.Namespace, config: Config) -> int:
    from bot.store.commands import audit_command, db_upgrade

    if args.command == "db":
        return anyio.run(db_upgrade, config)
    return anyio.run(
        functools.partial(
            audit_command,
            config,
            since=args.since,
            user_id=args.user,
            server=args.server,
            fmt=args.format,
            verify=args.verify,
        )
    )


def _load(path: str | None, command: str) -> Config:
    if path is not None:
        return load_config(path)
    if command == "console":
        return parse_config(DEMO_CONFIG, os.environ)
    raise ConfigError([f"--config: required for {command!r} (try: --config config.example.toml)"])

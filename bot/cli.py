"""Command line: `toolnexus-bot [--config PATH]`, `check`, `console`, `audit`, `agents`, `db upgrade`, `keygen`.
Does I/O.

Config is read here and only here. Exit status: 0 fine, 1 a server check failed (or the audit chain is
broken, or the database cannot be used), 2 a bad config.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import anyio

from bot.config import Config, ConfigError, StorageConfig, load_config, parse_config
from bot.failures import failure_line
from bot.logs import setup_logging

logger = logging.getLogger("bot.cli")

CONFIG_ENV = "TOOLNEXUS_CONFIG"
"""Stands in for `--config` in every sub-command (the container image sets it)."""

LOOP: Final = {"use_uvloop": sys.platform != "win32"}
"""anyio's asyncio backend on uvloop (a dependency except on Windows, where asyncio's own loop runs): 7-8 %
fewer instructions per elicitation than asyncio's loop (bench a, 2026-12-06). The tests run on it too
(tests/conftest.py), and `--log-level DEBUG` names it."""

DEMO_CONFIG = {"servers": {"demo": {"command": "python", "args": ["-m", "bot.demo_server"], "title": "Demo"}}}


def _options(*, defaults: bool) -> argparse.ArgumentParser:
    """The options every command takes. Without `defaults` (a sub-command's copy), an option left out sets
    nothing, so one given before the sub-command is kept."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        metavar="PATH",
        help=f"TOML config (see config.example.toml); default ${CONFIG_ENV}",
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
    parser.add_argument("--version", action="version", version=f"toolnexus-bot {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="{run,check,console,audit,agents,db,keygen}")
    sub.add_parser("run", parents=[common], help="run the Telegram bot (the default)")
    check = sub.add_parser("check", parents=[common], help="validate the config and connect to every server")
    _check_options(check)
    sub.add_parser(
        "console", parents=[common], help="the bridge in this terminal (demo server without --config)"
    )
    _store_parsers(sub, common)
    sub.add_parser("keygen", help="print a fresh [storage] secret_key (it encrypts OAuth tokens)")
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
    audit.add_argument(
        "action",
        nargs="?",
        choices=["checkpoint", "public-key", "reseal"],
        help="checkpoint: sign the chain's length and head now and print the line; public-key: the key that "
        "checks it; reseal: seal a chain written without a key under it (prints the old head)",
    )
    audit.add_argument(
        "--checkpoint", metavar="LINE", help="with --verify: a checkpoint line the chain must hold"
    )
    audit.add_argument(
        "--public-key",
        metavar="KEY",
        help="with --verify: the key every checkpoint must be signed with (then only [storage] is read)",
    )
    _agents_parser(sub, common)
    db = sub.add_parser("db", parents=[common], help="database maintenance")
    db.add_argument("action", choices=["upgrade"], help="upgrade: apply the schema migrations")


def _agents_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    agents = sub.add_parser("agents", parents=[common], help="list or revoke the gateway's agent tokens")
    agents.add_argument(
        "action",
        choices=["list", "revoke"],
        help="list: the live tokens, never their text; revoke: a person's token (all of theirs without --name)",
    )
    agents.add_argument(
        "--user", type=int, metavar="ID", help="the tokens' Telegram user id (revoke needs it)"
    )
    agents.add_argument("--name", metavar="N", help="with revoke: the token's name")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `toolnexus-bot` script and `python -m bot`."""
    try:
        return _main(argv)
    except BrokenPipeError:  # whoever read our output stopped reading (`... | head -1`): not an error
        from bot.store.commands import quiet_broken_pipe

        quiet_broken_pipe(sys.stdout)
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    command = args.command or "run"
    if command == "keygen":
        from bot.store.crypto import new_key

        # The key alone is the last word, so a script can take it (`... | tail -n1`).
        print("A new [storage] secret_key (keep it secret: without it stored sign-ins cannot be read):")
        print(new_key())
        return 0
    if command == "audit" and args.verify and args.public_key is not None and args.action is None:
        return _public_verify(args)
    try:
        config = _load(args.config, command)
        if command in ("run", "check"):  # `check` passes exactly what `run` would accept
            config.require_telegram()
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    setup_logging(
        "WARNING" if command == "console" and args.log_level == "INFO" else args.log_level, _secrets(config)
    )
    if command == "check":
        from bot.store.store import audit_note

        note = audit_note(config.storage)
        if note is not None:
            print(note)
        return _reporting(config, args.log_level, _check, config, args.timeout)
    if command in ("audit", "db"):
        return _store_command(args, config)
    if command == "agents":
        from bot.store.agent_commands import agents_command

        if args.action == "revoke" and args.user is None:
            print("agents revoke: --user ID is required (add --name N for one token)", file=sys.stderr)
            return 2
        return _run(functools.partial(agents_command, config, args.action, user_id=args.user, name=args.name))
    if command == "console":
        from bot.compose.console import run_console

        return _reporting(config, args.log_level, run_console, config)
    from bot.compose.telegram import run_bot

    return _reporting(config, args.log_level, run_bot, config)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("toolnexus-bot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _reporting(config: Config, log_level: str, command: Callable[..., Awaitable[int]], *args: object) -> int:
    """Run `command`; an expected failure (no network, DNS, a rejected token, a port in use) is one line.

    With `--log-level DEBUG` the traceback follows, through the logging set-up that redacts the token.
    """
    try:
        return _run(command, *args)
    except KeyboardInterrupt:  # Ctrl-C before a command's own handler was installed (or after it left)
        return 130
    except Exception as exc:  # the top level: every failure ends here as a line, not a raw traceback
        line = failure_line(exc, config)
        if line is None:
            logger.exception("toolnexus-bot stopped by an unexpected error (please report it)")
            return 1
        print(f"error: {line}", file=sys.stderr)
        if log_level == "DEBUG":
            logger.debug("the failure in full", exc_info=exc)
        return 1


def _run(command: Callable[..., Awaitable[int]], *args: object) -> int:
    """`command(*args)` on the bot's event loop (`LOOP`), named first at DEBUG."""
    return anyio.run(_on_loop, command, *args, backend_options=LOOP)


async def _on_loop(command: Callable[..., Awaitable[int]], *args: object) -> int:
    loop = type(asyncio.get_running_loop())
    logger.debug("event loop: %s.%s", loop.__module__, loop.__qualname__)
    return await command(*args)


async def _check(config: Config, timeout_s: float) -> int:
    """`check`: what `run` would refuse at start is refused here with its line (a database folder it may not
    write), then every server is probed."""
    from bot.servers.check import check
    from bot.store.store import check_storage

    check_storage(config.storage)
    return await check(config, timeout_s)


def _check_options(check: argparse.ArgumentParser) -> None:
    from bot.servers.check import DEFAULT_TIMEOUT_S

    check.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long each server may take to answer (default {DEFAULT_TIMEOUT_S:g})",
    )


def _secrets(config: Config) -> tuple[str, ...]:
    """Every secret the config holds: the bot token, the webhook secret, servers' header values (and the
    credential of a `Bearer ...` value on its own, when it is long enough not to be a common word)."""
    telegram = config.telegram
    found = [s.get() for s in (telegram.token, telegram.webhook_secret) if s is not None]
    if config.storage is not None and config.storage.secret_key is not None:
        found.append(config.storage.secret_key.get())
    for server in config.servers:
        if server.oauth is not None and server.oauth.client_secret is not None:
            found.append(server.oauth.client_secret.get())
        for value in server.reveal_headers().values():
            credential = value.partition(" ")[2]
            found += [value, credential if len(credential) >= 8 else ""]
    return tuple(s for s in found if s)


def _public_verify(args: argparse.Namespace) -> int:
    """`audit --verify --public-key KEY [--checkpoint LINE]`: what a host that holds no secret runs. Of the
    config only `[storage]` is read (`load_storage`), so the token and the rest need not be set there, nor
    the secret's variable."""
    from bot.config import load_storage

    path = args.config if args.config is not None else os.environ.get(CONFIG_ENV) or None
    try:
        if path is None:
            raise ConfigError([f"--config: required for 'audit' (or set {CONFIG_ENV})"])
        storage = load_storage(path)
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"config error: {problem}", file=sys.stderr)
        return 2
    setup_logging(args.log_level, ())
    return _audit(args, storage)


def _store_command(args: argparse.Namespace, config: Config) -> int:
    from bot.store.commands import db_upgrade

    if args.command == "db":
        return _run(db_upgrade, config)
    assert config.storage is not None  # load_config always sets one
    return _audit(args, config.storage)


def _audit(args: argparse.Namespace, storage: StorageConfig) -> int:
    from bot.store.commands import audit_command

    return _run(
        functools.partial(
            audit_command,
            storage,
            since=args.since,
            user_id=args.user,
            server=args.server,
            fmt=args.format,
            verify=args.verify,
            checkpoint=args.checkpoint,
            public_key=args.public_key,
            action=args.action,
        )
    )


def _load(path: str | None, command: str) -> Config:
    path = path if path is not None else os.environ.get(CONFIG_ENV) or None
    if path is not None:
        return load_config(path)
    if command == "console":
        return parse_config(DEMO_CONFIG, os.environ)
    raise ConfigError(
        [f"--config: required for {command!r} (try: --config config.example.toml, or set {CONFIG_ENV})"]
    )

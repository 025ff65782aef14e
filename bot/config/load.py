"""Reading a configuration: a TOML file → `Config`, or `ConfigError` with every problem, one line each.

Strings may use `${VAR}` (an unset VAR is a problem) or `${VAR:-default}` (used when VAR is unset or empty);
`$${` is a literal `${`. A problem line is built from pydantic's `loc` and message only, never from the input,
so no secret can reach a log.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from typing import Any, Final, cast

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from bot.config._table import Context, Table, table_in
from bot.config.model import Config, ConfigError
from bot.config.servers import ServerConfig
from bot.config.storage import STORAGE_FILE, StorageConfig, state_folder

_SHAPES: Final = {
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
    "dict_type": "must be a table",
    "tuple_type": "must be an array of tables",
    "missing": "required",
}
"""pydantic's own errors that can reach a user, in this file's words."""
_FLATTENED: Final = ("oauth",)
"""Model fields whose keys sit in their parent's table in the file (`ServerConfig.oauth`)."""


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> Config:
    """Read and parse a TOML config file.

    Raises:
        ConfigError: the file is missing, unreadable or not TOML (`config.toml:3:7: invalid TOML: ...`),
            or its content is invalid (see `parse_config`); `path` is set either way.
    """
    name = os.fspath(path)
    data = _read(name)
    try:
        return parse_config(data, environ, base_dir=os.path.dirname(os.path.abspath(name)))
    except ConfigError as exc:
        raise ConfigError(exc.problems, name) from None


def load_storage(path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> StorageConfig:
    """Only `[storage]` of a config file (its `url`, or the default database beside the file), the rest
    unread: what a host that verifies the audit chain against a shipped checkpoint needs (no token). Its
    `secret_key` is kept when it is there and valid, and left out (None) when its variable is not set on
    this host.

    Raises:
        ConfigError: the file cannot be read, or its `[storage]` is invalid (as `load_config`).
    """
    name = os.fspath(path)
    storage = _read(name).get("storage")
    table = dict(cast("Mapping[str, object]", storage)) if isinstance(storage, Mapping) else {}
    base_dir = os.path.dirname(os.path.abspath(name))
    if table.get("url") is None:  # the default database, as `parse_config` puts it
        folder = state_folder(environ) or base_dir
        table["url"] = "sqlite:///" + os.path.join(folder, STORAGE_FILE).replace("${", "$${")
    context: Context = {"environ": environ, "base_dir": base_dir}
    try:
        return StorageConfig.model_validate(table, context=context)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    if "secret_key" in table and all(
        e["loc"] == ("secret_key",) and "is not set" in e["msg"] for e in errors
    ):
        return StorageConfig.model_validate({"url": table["url"]}, context=context)
    lines = [problem_line({**error, "loc": ("storage", *error["loc"])}, []) for error in errors]
    raise ConfigError(lines, name)


def _read(name: str) -> dict[str, Any]:
    """The TOML document in the file `name`.

    Raises:
        ConfigError: the file is missing, unreadable or not TOML.
    """
    try:
        with open(name, "rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        raise ConfigError([f"{name}: no such file"], name) from None
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read it ({exc.strerror})"], name) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{name}: not UTF-8 text"], name) from None
    except tomllib.TOMLDecodeError as exc:
        where = re.fullmatch(r"(.*) \(at line (\d+), column (\d+)\)", str(exc))
        line = f"{name}:{where[2]}:{where[3]}: {where[1]}" if where else f"{name}: {exc}"
        raise ConfigError([line.replace(": ", ": invalid TOML: ", 1)], name) from None


def parse_config(
    data: Mapping[str, Any], environ: Mapping[str, str], *, base_dir: str | None = None
) -> Config:
    """Validate a parsed TOML document, expanding `${VAR}` from `environ`.

    `base_dir` is the config file's folder: a relative SQLite path is resolved against it, and with no
    `[storage] url` the database is `toolnexus.db` in the state folder (`$STATE_DIRECTORY`: systemd's
    `StateDirectory=`, the image's `/data`), else there. Without it (and without `[storage] url`), the
    config has no database.

    `command = "python"` becomes `sys.executable`, so `args = ["-m", "bot.demo_server"]` runs in the bot's
    own venv. A missing `[telegram]` token is not a problem here; `Config.require_telegram` reports it.

    Raises:
        ConfigError: with every problem found, one line each, naming the key.
    """
    context: Context = {"environ": environ, "base_dir": base_dir}
    try:
        return Config.model_validate(data, context=context)
    except ValidationError as exc:
        servers = data.get("servers")
        names = list(servers) if isinstance(servers, Mapping) else []
        raise ConfigError([problem_line(error, names) for error in exc.errors(include_url=False)]) from None


def problem_line(error: ErrorDetails, server_names: list[str]) -> str:
    """`key: reason` for one error: the key from its `loc` (servers by name), the reason from its message."""
    loc = list(error["loc"])
    if len(loc) > 1 and loc[0] == "servers" and isinstance(loc[1], int) and loc[1] < len(server_names):
        loc[1] = server_names[loc[1]]
        if loc[2:] == ["name"]:  # the table's name is its key
            loc = loc[:2]
    loc = [part for i, part in enumerate(loc) if not (part in _FLATTENED and i > 0)]
    key = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).lstrip(".")
    ctx = error.get("ctx") or {}
    if error["type"] == "config":
        reason = str(ctx["reason"])
        key += str(ctx.get("at", ""))
    elif error["type"] == "extra_forbidden":
        near = difflib.get_close_matches(str(loc[-1]), _table_at(error["loc"][:-1]).toml_keys(), n=1)
        reason = f"unknown key (did you mean {near[0]}?)" if near else "unknown key"
    else:
        reason = _SHAPES.get(error["type"], error["msg"])
    return f"{key}: {reason}" if key else reason


def _table_at(loc: tuple[int | str, ...]) -> type[Table]:
    """The model whose table `loc` points into (`("servers", 0)` → ServerConfig)."""
    table: type[Table] = Config
    for part in loc:
        if isinstance(part, str) and part in table.model_fields:
            annotation = table.model_fields[part].annotation
            inner = table_in(annotation) or next(
                (t for arg in getattr(annotation, "__args__", ()) if (t := table_in(arg))), None
            )
            table = inner or table
    return table


__all__ = ["ServerConfig", "load_config", "parse_config", "problem_line"]

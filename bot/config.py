"""The bot's configuration: TOML → frozen `Config`. `parse_config` is pure; `load_config` reads the file.

    ConfigError           every problem at once, one line each, naming the key (`servers.demo.url: not a URL`)

Strings may use `${VAR}` (an unset VAR is a problem) or `${VAR:-default}` (used when VAR is unset or empty);
`$${` is a literal `${`. Problem lines never quote a configured value, so no secret can reach a log.
"""

from __future__ import annotations

import base64
import enum
import fnmatch
import os
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Final, cast
from urllib.parse import urlsplit

from bot import _config_read as read

__all__ = [
    "SERVER_NAME",
    "STORAGE_FILE",
    "WEBHOOK_PATH",
    "WEBHOOK_PORTS",
    "WEBHOOK_SECRET",
    "ApprovalGate",
    "ApprovalRule",
    "AuditConfig",
    "AuditContent",
    "Config",
    "ConfigError",
    "ElicitationConfig",
    "LimitsConfig",
    "MiniAppConfig",
    "OAuthClient",
    "RunConfig",
    "Secret",
    "ServerAuth",
    "ServerConfig",
    "ServerProtocol",
    "SessionsConfig",
    "StorageConfig",
    "TelegramConfig",
    "TelegramMode",
    "TokenEndpointAuth",
    "Transport",
    "WebConfig",
    "load_config",
    "parse_config",
    "state_folder",
]

_MASK: Final = "**********"
SERVER_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")
"""What a `[servers.<name>]` name must fullmatch (it appears in commands and callback data)."""
WEBHOOK_SECRET: Final = re.compile(r"[A-Za-z0-9_-]{1,256}")
"""Telegram's rule for `setWebhook(secret_token=...)`."""
WEBHOOK_PORTS: Final = frozenset({80, 88, 443, 8443})
"""The only ports Telegram delivers webhooks to."""
WEBHOOK_PATH: Final = "/telegram"
"""Where the webhook lives, under `[web] public_url` and on the local endpoint alike."""
_BOT_TOKEN: Final = re.compile(r"[0-9]+:[A-Za-z0-9_-]+")
_TOKEN_REQUIRED: Final = 'telegram.token: required to run the Telegram bot (token = "${TELEGRAM_BOT_TOKEN}")'


class ConfigError(Exception):
    """A configuration that cannot be used; `problems` holds one line per problem, each naming its key."""

    def __init__(self, problems: Iterable[str], path: str | None = None) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.path = path
        """The file the problems are in, when read by `load_config`."""
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True, repr=False)
class Secret:
    """A string that never shows itself in `repr`/`str` (tracebacks, logs); `.get()` reveals it."""

    _value: str

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{_MASK}')"

    def __str__(self) -> str:
        return _MASK


class TelegramMode(enum.StrEnum):
    """How updates arrive from Telegram."""

    POLLING = "polling"
    WEBHOOK = "webhook"


class ServerProtocol(enum.StrEnum):
    """Which MCP revision to speak; the values are the `mcp` SDK's `Client(mode=...)`.

    Not named `Protocol`, so that it never shadows `typing.Protocol` in a module importing both.
    """

    AUTO = "auto"
    """Probe for 2026-07-28, fall back to the 2025 handshake."""
    LEGACY = "legacy"
    """The `initialize` handshake (2025-06-18 / 2025-11-25)."""
    V2026_07_28 = "2026-07-28"
    """Skip the probe."""


class AuditContent(enum.StrEnum):
    """How much of a person's answer (and a call's arguments) the audit log keeps."""

    FULL = "full"
    """The values."""
    KEYS = "keys"
    """Only the field names."""
    NONE = "none"
    """Neither."""


class ServerAuth(enum.StrEnum):
    """How the bot authenticates to a `url` server."""

    NONE = "none"
    """No sign-in (static `headers` may still carry a key)."""
    OAUTH = "oauth"
    """MCP authorization: each person signs in with OAuth from the chat (DESIGN §12)."""


class TokenEndpointAuth(enum.StrEnum):
    """How a pre-registered OAuth client proves itself at the token endpoint (RFC 8414 names)."""

    CLIENT_SECRET_BASIC = "client_secret_basic"
    """The id and secret in an HTTP Basic `Authorization` header (RFC 6749 §2.3.1)."""
    CLIENT_SECRET_POST = "client_secret_post"
    """The id and secret in the form body."""
    NONE = "none"
    """A public client: the id only, no secret."""


@dataclass(frozen=True, slots=True, repr=False)
class OAuthClient:
    """How the bot presents itself to an OAuth server; all optional (dynamic registration without them)."""

    client_id: str | None = None
    """A pre-registered client id."""
    client_secret: Secret | None = None
    """Its secret, for a confidential pre-registered client."""
    client_metadata_url: str | None = None
    """An https URL of a client ID metadata document (used as the client id where the server accepts it)."""
    scopes: tuple[str, ...] = ()
    """Scopes to ask for (default: what the server advertises)."""
    token_endpoint_auth_method: TokenEndpointAuth | None = None
    """How the pre-registered client authenticates at the token endpoint (default: the best the
    authorization server's metadata offers)."""

    def __repr__(self) -> str:
        secret = None if self.client_secret is None else _MASK
        return (
            f"OAuthClient(client_id={self.client_id!r}, client_secret={secret!r}, "
            f"client_metadata_url={self.client_metadata_url!r}, scopes={self.scopes!r}, "
            f"token_endpoint_auth_method={self.token_endpoint_auth_method!r})"
        )


class Transport(enum.StrEnum):
    """How a server is reached."""

    STDIO = "stdio"
    HTTP = "http"


class ApprovalGate(enum.StrEnum):
    """What an `[[approvals]]` rule holds back until approvers agree."""

    CALL = "call"
    """The tool call itself: it is not sent until approved."""
    ANSWERS = "answers"
    """Each `accept` answer to one of the call's questions: it is not sent until approved."""


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """`[[approvals]]`: tool calls that need `quorum` of `approvers` to agree first."""

    servers: frozenset[str]
    """Server names the rule covers."""
    tools: tuple[str, ...]
    """Tool names or shell-style patterns (`deploy*`), matched with `fnmatch.fnmatchcase`."""
    approvers: frozenset[int]
    """Telegram user ids who may approve or reject."""
    quorum: int = 1
    """How many distinct approvers must approve."""
    chat: int | None = None
    """The approval group's chat id; None: each approver gets the card privately."""
    self_approval: bool = False
    """Whether the requester's own approval counts (when they are an approver)."""
    timeout_s: float = 1800.0
    """A request not decided by then expires (and nothing is sent)."""
    gate: ApprovalGate = ApprovalGate.CALL
    index: int = 0
    """The rule's place among `[[approvals]]` (named in problems and on cards)."""

    def __post_init__(self) -> None:
        if not 1 <= self.quorum <= len(self.approvers):
            raise ValueError(f"approvals[{self.index}]: quorum must be between 1 and {len(self.approvers)}")

    def matches(self, server: str, tool: str) -> bool:
        """Whether a call of `tool` on `server` falls under this rule."""
        return server in self.servers and any(fnmatch.fnmatchcase(tool, p) for p in self.tools)


@dataclass(frozen=True, slots=True)
class WebConfig:
    """`[web]`: the bot's one HTTP endpoint (webhook, health, metrics), usually behind a TLS reverse proxy."""

    listen: str = "127.0.0.1"
    """Local address to bind."""
    port: int = 8080
    """Local port to bind."""
    public_url: str | None = None
    """What Telegram and browsers reach (`https://host[:port]`); the proxy forwards every path unchanged.
    Required in webhook mode: the webhook is `<public_url>/telegram`."""

    @property
    def webhook_url(self) -> str | None:
        """`<public_url>/telegram`, when there is a public URL."""
        return None if self.public_url is None else self.public_url.rstrip("/") + WEBHOOK_PATH


@dataclass(frozen=True, slots=True)
class MiniAppConfig:
    """`[miniapp]`: long forms also open as a Telegram Mini App (private chats, with `[web] public_url`)."""

    enabled: bool = True
    """Offer the **Open form** button at all (it needs `[web] public_url` too)."""
    min_fields: int = 3
    """A form with at least this many fields gets the button."""
    dates: bool = True
    """A form with any date or date-time field gets the button."""
    many_options: int = 8
    """A form with a multi-select of more than this many options gets the button."""
    max_age_s: float = 900.0
    """How old a page's signed launch data (`initData`'s `auth_date`) may be when the page sends it."""


@dataclass(frozen=True, slots=True)
class TelegramConfig:
    """`[telegram]`. Only the Telegram bot needs a token, so it may be absent (see `token_problem`)."""

    token: Secret | None = None
    """The bot token; None when missing or unusable."""
    api_base_url: str = "https://api.telegram.org/bot"
    """Bot API base; PTB appends the token. Point it at a self-hosted Bot API server or a test fake."""
    allowed_users: frozenset[int] = frozenset()
    """Telegram user ids that may use the bot; empty means nobody (unless `allow_everyone`)."""
    allow_everyone: bool = False
    """Let every Telegram user in (a public demo)."""
    mode: TelegramMode = TelegramMode.POLLING
    """Long-polling or webhook (which needs `[web] public_url` and `webhook_secret`)."""
    webhook_secret: Secret | None = None
    """Sent back by Telegram in `X-Telegram-Bot-Api-Secret-Token`; required in webhook mode."""
    admins: frozenset[int] = frozenset()
    """Telegram user ids that may read the audit log in chat (`/audit`)."""
    token_problem: str | None = None
    """Why a given token is unusable, as the problem line `Config.require_telegram` raises."""


@dataclass(frozen=True, slots=True)
class ElicitationConfig:
    """`[elicitation]`."""

    timeout_s: float = 600.0
    """An unanswered prompt is cancelled after this long."""


DRAIN_S: Final = 20.0
"""`[run] drain_s` when not set."""


@dataclass(frozen=True, slots=True)
class RunConfig:
    """`[run]`: the process's own lifetime."""

    drain_s: float = DRAIN_S
    """On SIGTERM, how long running calls (and 2025-era questions) get to finish before the bot exits;
    what the store keeps (2026-07-28 questions, approvals) stays open for the next process."""


STORAGE_FILE: Final = "toolnexus.db"
"""The SQLite database's name when there is no `[storage] url`: in the state folder (see `state_folder`), else
beside the config file."""
_STORAGE_SCHEMES: Final = ("sqlite", "postgresql", "postgres")


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """`[storage]`: the database (audit log, open questions)."""

    url: Secret
    """`sqlite:///<absolute path>` (a relative path in the file is resolved against the config's folder)
    or `postgresql://user:password@host/db`; a `Secret` because a PostgreSQL URL may carry a password."""
    secret_key: Secret | None = None
    """Encrypts OAuth tokens at rest (a Fernet key, `toolnexus-bot keygen`); required once a server uses OAuth."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """`[audit]`."""

    content: AuditContent = AuditContent.FULL
    """How much of answers and arguments the log keeps."""


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    """`[sessions]`: the per-(server, chat, user) MCP sessions."""

    idle_timeout_s: float = 900.0
    """A session unused this long is closed (it is reopened on demand)."""
    max_open: int = 100
    """At most this many sessions at once; to open another, the least recently used idle one is closed."""


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """`[limits]`: what one person may start, and the server processes of everyone; 0 means no limit.

    All off unless set, except under `allow_everyone`, where the `public()` values are the defaults.
    """

    calls_per_minute: int = 0
    """Tool calls one person may start in any 60 seconds."""
    concurrent_calls: int = 0
    """Tool calls of one person running at once."""
    open_questions: int = 0
    """Servers' questions waiting for one person's answer at once."""
    stdio_processes: int = 0
    """Server processes (stdio sessions) the bot runs in total; past it, unshared stdio sessions are refused."""

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < 0:
                raise ValueError(f"limits.{f.name} must be 0 (no limit) or more")

    @classmethod
    def public(cls) -> LimitsConfig:
        """The defaults for a bot open to everyone."""
        return cls(calls_per_minute=10, concurrent_calls=2, open_questions=3, stdio_processes=20)


@dataclass(frozen=True, slots=True, repr=False)
class ServerConfig:
    """`[servers.<name>]`: an MCP server, started as a subprocess (`command`) or reached over HTTP (`url`)."""

    name: str
    """The table name: 1-32 of A-Z a-z 0-9 _ -."""
    command: str | None = None
    """Program to run (stdio). `parse_config` resolves exactly `"python"` to `sys.executable`."""
    args: tuple[str, ...] = ()
    """Its arguments."""
    env: Mapping[str, str] = field(default_factory=dict[str, str])
    """Extra environment variables for it (added to the bot's own)."""
    cwd: str | None = None
    """Its working directory (default: the bot's)."""
    url: str | None = None
    """Streamable HTTP endpoint."""
    headers: Mapping[str, Secret] = field(default_factory=dict[str, Secret])
    """HTTP headers sent with every request; values are `Secret`s (bearer tokens), see `reveal_headers`."""
    protocol: ServerProtocol = ServerProtocol.AUTO
    """Which MCP revision to speak."""
    shared: bool = False
    """One session for everyone instead of one per (chat, user)."""
    call_timeout_s: float = 300.0
    """Bounds a tool call's own rounds; time a person spends answering a prompt never counts."""
    title: str | None = None
    """Display name (surfaces fall back to `name`)."""
    oauth: OAuthClient | None = None
    """Set when `auth = "oauth"`: each person signs in (a `url` server, never `shared`)."""

    def __post_init__(self) -> None:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r}: give either command or url, not both or neither")
        if self.oauth is not None and (self.url is None or self.shared):
            raise ValueError(f"server {self.name!r}: OAuth needs a url server that is not shared")
        headers = {name: _as_secret(value) for name, value in self.headers.items()}
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "headers", MappingProxyType(headers))

    @property
    def transport(self) -> Transport:
        return Transport.STDIO if self.command is not None else Transport.HTTP

    @property
    def auth(self) -> ServerAuth:
        return ServerAuth.NONE if self.oauth is None else ServerAuth.OAUTH

    def reveal_headers(self) -> dict[str, str]:
        """The headers with their real values, for the HTTP client only."""
        return {name: value.get() for name, value in self.headers.items()}

    def __repr__(self) -> str:
        parts: list[str] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("env", "headers"):
                value = {name: _MASK for name in value}  # API keys and bearer tokens live here
            parts.append(f"{f.name}={value!r}")
        return f"ServerConfig({', '.join(parts)})"


def _as_secret(value: object) -> Secret:
    # Hand-built configs (tests) may pass plain strings; keep them masked all the same.
    return value if isinstance(value, Secret) else Secret(str(value))


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration. Build it with `load_config`/`parse_config`, or by hand in tests."""

    servers: tuple[ServerConfig, ...]
    """In file order; names are unique (see `server`)."""
    telegram: TelegramConfig = field(default_factory=TelegramConfig)
    elicitation: ElicitationConfig = field(default_factory=ElicitationConfig)
    run: RunConfig = field(default_factory=RunConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    web: WebConfig | None = None
    """`[web]`; None when absent (then the endpoint is off: polling needs none)."""
    miniapp: MiniAppConfig = field(default_factory=MiniAppConfig)
    """`[miniapp]`; in effect only with `[web] public_url` (see `miniapp_on`)."""
    storage: StorageConfig | None = None
    """The database; `load_config` always sets one (SQLite beside the config file by default). None (a
    config built by hand, or parsed with no folder and no `[storage]`) runs without a database."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    """`[limits]`; absent keys are off, or `LimitsConfig.public()`'s under `allow_everyone`."""
    approvals: tuple[ApprovalRule, ...] = ()
    """`[[approvals]]`, in file order; the first that matches a call applies (see `approval_rule`)."""

    def approval_rule(self, server: str, tool: str) -> ApprovalRule | None:
        """The first `[[approvals]]` rule covering this call, if any."""
        return next((rule for rule in self.approvals if rule.matches(server, tool)), None)

    @property
    def approvers(self) -> frozenset[int]:
        """Everyone who may approve something: their taps on approval cards pass the access gate."""
        return frozenset().union(*(rule.approvers for rule in self.approvals))

    @property
    def miniapp_on(self) -> bool:
        """Whether long forms get an **Open form** button: enabled, and a public URL to open."""
        return self.miniapp.enabled and self.web is not None and self.web.public_url is not None

    def __post_init__(self) -> None:
        object.__setattr__(self, "servers", tuple(self.servers))
        names = [server.name for server in self.servers]
        if len(set(names)) != len(names):
            raise ValueError(f"server names must be unique: {names}")

    def server(self, name: str) -> ServerConfig | None:
        """The server called `name`, if any."""
        return next((server for server in self.servers if server.name == name), None)

    def require_telegram(self) -> Secret:
        """Return the bot token (the one setting only the Telegram bot needs; `console` and `check` don't).

        Raises:
            ConfigError: the token is missing or unusable (`telegram.token: ...`).
        """
        if self.telegram.token is None:
            raise ConfigError([self.telegram.token_problem or _TOKEN_REQUIRED])
        return self.telegram.token


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] = os.environ) -> Config:
    """Read and parse a TOML config file.

    Raises:
        ConfigError: the file is missing, unreadable or not TOML (`config.toml:3:7: invalid TOML: ...`),
            or its content is invalid (see `parse_config`); `path` is set either way.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            data = tomllib.load(file)
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
    try:
        return parse_config(data, environ, base_dir=os.path.dirname(os.path.abspath(name)))
    except ConfigError as exc:
        raise ConfigError(exc.problems, name) from None


def parse_config(
    data: Mapping[str, Any], environ: Mapping[str, str], *, base_dir: str | None = None
) -> Config:
    """Validate a parsed TOML document, expanding `${VAR}` from `environ`.

    `base_dir` is the config file's folder: a relative SQLite path is resolved against it, and with no
    `[storage] url` the database is `toolnexus.db` in the state folder (`$STATE_DIRECTORY`: systemd's
    `StateDirectory=`, the image's `/data`), else there. Without it (and without `[storage]`), the
    config has no database.

    `command = "python"` becomes `sys.executable`, so `args = ["-m", "bot.demo_server"]` runs in the bot's
    own venv. A missing `[telegram]` token is not a problem here; `Config.require_telegram` reports it.

    Raises:
        ConfigError: with every problem found, one line each, naming the key.
    """
    problems: list[str] = []
    root = read.Section(data, "", environ, problems)
    root.only(
        (
            *("telegram", "elicitation", "sessions", "servers", "web", "miniapp", "storage", "audit", "limits"),
            "approvals",
            "run",
        )
    )
    telegram = _telegram(root.section("telegram"))
    web = _web(root, telegram.mode)
    e = root.section("elicitation")
    e.only(("timeout_s",))
    elicitation = ElicitationConfig(timeout_s=e.get("timeout_s", read.positive, 600.0))
    r = root.section("run")
    r.only(("drain_s",))
    run = RunConfig(drain_s=r.get("drain_s", read.positive, DRAIN_S))
    s = root.section("sessions")
    s.only(("idle_timeout_s", "max_open"))
    sessions = SessionsConfig(
        idle_timeout_s=s.get("idle_timeout_s", read.positive, 900.0),
        max_open=s.get("max_open", read.positive_int, 100),
    )
    servers = _servers(root)
    miniapp = _miniapp(root.section("miniapp"))
    storage = _storage(root, base_dir, environ)
    if any(server.oauth is not None for server in servers) and (
        storage is None or storage.secret_key is None
    ):
        root.problem(
            'required once a server uses auth = "oauth" (secret_key = "${TOOLNEXUS_SECRET_KEY}"; '
            "make one with toolnexus-bot keygen)",
            "storage.secret_key",
        )
    a = root.section("audit")
    a.only(("content",))
    audit = AuditConfig(content=a.get("content", read.one_of(AuditContent), AuditContent.FULL))
    limits = _limits(root.section("limits"), telegram.allow_everyone)
    approvals = _approvals(root, {server.name for server in servers}, telegram)
    if problems:
        raise ConfigError(problems)
    return Config(
        servers=tuple(servers),
        telegram=telegram,
        elicitation=elicitation,
        run=run,
        sessions=sessions,
        web=web,
        miniapp=miniapp,
        storage=storage,
        audit=audit,
        limits=limits,
        approvals=approvals,
    )


_APPROVAL_KEYS: Final = ("servers", "tools", "approvers", "quorum", "chat", "self_approval", "timeout_s", "gate")


def _approvals(root: read.Section, servers: set[str], telegram: TelegramConfig) -> tuple[ApprovalRule, ...]:
    raw = root.values.get("approvals")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        root.problem("must be an array of tables ([[approvals]])", "approvals")
        return ()
    rules: list[ApprovalRule] = []
    for i, table in enumerate(cast("list[object]", raw)):
        key = f"approvals[{i}]"
        if not isinstance(table, Mapping):
            root.problem("must be a table", key)
            continue
        a = read.Section(cast("Mapping[str, Any]", table), key, root.environ, root.problems)
        before = len(a.problems)
        a.only(_APPROVAL_KEYS)
        names = a.get("servers", read.str_list, ())
        for j, name in enumerate(names):
            if name not in servers:
                a.problem(f"no server {name!r} is configured", f"servers[{j}]")
        tools = a.get("tools", read.str_list, ())
        for j, pattern in enumerate(tools):
            if not pattern:
                a.problem("must not be empty", f"tools[{j}]")
        approvers = a.get("approvers", read.user_ids, frozenset[int]())
        for name in ("servers", "tools", "approvers"):
            if not a.has(name):
                a.problem("required", name)
            elif not a.values[name]:
                a.problem("must list at least one", name)
        quorum = a.get("quorum", read.positive_int, 1)
        chat = a.get("chat", _chat_id, None)
        self_approval = a.get("self_approval", read.boolean, False)
        timeout_s = a.get("timeout_s", read.positive, 1800.0)
        gate = a.get("gate", read.one_of(ApprovalGate), ApprovalGate.CALL)
        if approvers:
            _check_quorum(a, quorum, approvers, self_approval, telegram)
        if len(a.problems) == before:
            rules.append(
                ApprovalRule(
                    frozenset(names), tools, approvers, quorum, chat, self_approval, timeout_s, gate, i
                )
            )
    return tuple(rules)


def _check_quorum(
    a: read.Section, quorum: int, approvers: frozenset[int], self_approval: bool, telegram: TelegramConfig
) -> None:
    """A quorum no request could ever reach is a problem: more than the approvers, or (with self_approval
    false) more than the approvers left when one of them is the requester, as anyone allowed may be."""
    if quorum > len(approvers):
        a.problem(f"{quorum} approvals needed but only {len(approvers)} approvers", "quorum")
        return
    if self_approval:
        return
    callers = sorted(u for u in approvers if telegram.allow_everyone or u in telegram.allowed_users)
    if callers and quorum > len(approvers) - 1:
        who = "everyone may call tools (allow_everyone)" if telegram.allow_everyone else (
            f"approver {callers[0]} is in telegram.allowed_users"
        )
        a.problem(
            f"{quorum} approvals needed, but with self_approval = false a request by an approver leaves only "
            f"{len(approvers) - 1} who can approve ({who})",
            "quorum",
        )


def _chat_id(value: object, environ: Mapping[str, str]) -> int:
    if isinstance(value, str):
        value = read.expand(value, environ).strip()
        if value.lstrip("-").isdigit():
            value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        raise read.Invalid("must be a Telegram chat id (an integer; groups are negative)")
    return value


def state_folder(environ: Mapping[str, str]) -> str | None:
    """Where the process may keep its state, when something set one up for it: systemd's
    `$STATE_DIRECTORY` (the unit's `StateDirectory=`; the first of a colon-separated list), which the
    container image sets to its volume `/data`. None otherwise (the default database goes beside the config)."""
    first = environ.get("STATE_DIRECTORY", "").split(":")[0]
    return first if os.path.isabs(first) else None


def _storage(root: read.Section, base_dir: str | None, environ: Mapping[str, str]) -> StorageConfig | None:
    st = root.section("storage")
    st.only(("url", "secret_key"))
    key = st.get("secret_key", _secret_key, None)
    secret_key = None if key is None else Secret(key)
    if not st.has("url"):
        if base_dir is None:
            return None
        folder = state_folder(environ) or base_dir
        return StorageConfig(Secret("sqlite:///" + os.path.join(folder, STORAGE_FILE)), secret_key)
    url = st.get("url", _storage_url, None)
    if url is None:
        return None
    if url.startswith("sqlite:///") and not os.path.isabs(url[len("sqlite:///") :]):
        url = "sqlite:///" + os.path.join(base_dir or os.getcwd(), url[len("sqlite:///") :])
    return StorageConfig(Secret(url), secret_key)


def _secret_key(value: object, environ: Mapping[str, str]) -> str:
    key = read.string(value, environ)
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(key) != 44 or len(raw) != 32:
        raise read.Invalid("not a key made by toolnexus-bot keygen (44 characters of URL-safe base64)")
    return key


def _storage_url(value: object, environ: Mapping[str, str]) -> str:
    url = read.string(value, environ)
    scheme = url.partition(":")[0].partition("+")[0]
    if scheme not in _STORAGE_SCHEMES:
        raise read.Invalid("must be a sqlite:///path or postgresql://user:password@host/db URL")
    if scheme == "sqlite" and (not url.startswith("sqlite:///") or len(url) == len("sqlite:///")):
        raise read.Invalid("a SQLite URL is sqlite:///relative/path or sqlite:////absolute/path")
    return url


def _limits(section: read.Section, public: bool) -> LimitsConfig:
    defaults = LimitsConfig.public() if public else LimitsConfig()
    names = tuple(f.name for f in fields(LimitsConfig))
    section.only(names)
    return LimitsConfig(**{name: section.get(name, _limit, getattr(defaults, name)) for name in names})


def _limit(value: object, environ: Mapping[str, str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise read.Invalid("must be 0 (no limit) or a positive integer")
    return value


def _telegram(t: read.Section) -> TelegramConfig:
    t.only(
        (
            "token",
            "api_base_url",
            "allowed_users",
            "allow_everyone",
            "mode",
            "webhook_secret",
            "webhook",
            "admins",
        )
    )
    # The token's problems wait for `require_telegram`: `console` and `check` must run without it.
    token, token_problem = None, None
    if t.has("token"):
        try:
            token = Secret(_bot_token(t.values["token"], t.environ))
        except read.Invalid as exc:
            token_problem = f"telegram.token: {exc.reason}"
    api_base_url = t.get("api_base_url", read.http_url, "https://api.telegram.org/bot")
    allowed_users = t.get("allowed_users", read.user_ids, frozenset[int]())
    allow_everyone = t.get("allow_everyone", read.boolean, False)
    admins = t.get("admins", read.user_ids, frozenset[int]())
    mode = t.get("mode", read.one_of(TelegramMode), TelegramMode.POLLING)
    if "webhook" in t.values:
        t.problem(
            f"replaced by [web] (listen, port, public_url) and telegram.webhook_secret; {_MOVED}", "webhook"
        )
    secret = t.get("webhook_secret", _webhook_secret, None)
    if mode is TelegramMode.WEBHOOK and not t.has("webhook_secret"):
        t.problem("required when telegram.mode is webhook", "webhook_secret")
    return TelegramConfig(
        token=token,
        api_base_url=api_base_url,
        allowed_users=allowed_users,
        allow_everyone=allow_everyone,
        mode=mode,
        webhook_secret=None if secret is None else Secret(secret),
        admins=admins,
        token_problem=token_problem,
    )


_MOVED: Final = "the webhook is now <public_url>/telegram"


def _miniapp(m: read.Section) -> MiniAppConfig:
    m.only(("enabled", "min_fields", "dates", "many_options", "max_age_s"))
    return MiniAppConfig(
        enabled=m.get("enabled", read.boolean, True),
        min_fields=m.get("min_fields", read.positive_int, 3),
        dates=m.get("dates", read.boolean, True),
        many_options=m.get("many_options", read.positive_int, 8),
        max_age_s=m.get("max_age_s", read.positive, 900.0),
    )


def _web(root: read.Section, mode: TelegramMode) -> WebConfig | None:
    w = root.section("web")
    w.only(("listen", "port", "public_url"))
    listen = w.get("listen", read.text, "127.0.0.1")
    port = w.get("port", read.port, 8080)
    public_url = w.get("public_url", _public_url, None)
    if mode is TelegramMode.WEBHOOK:
        if not w.has("public_url"):
            w.problem("required when telegram.mode is webhook", "public_url")
        elif public_url is not None and (urlsplit(public_url).port or 443) not in WEBHOOK_PORTS:
            w.problem("Telegram only delivers webhooks to ports 443, 80, 88 and 8443", "public_url")
    if "web" not in root.values:
        return None
    return WebConfig(listen, port, public_url)


_SERVER_KEYS: Final = (
    *("command", "args", "env", "cwd", "url", "headers"),
    *("protocol", "shared", "call_timeout_s", "title"),
    *("auth", "client_id", "client_secret", "client_metadata_url", "scopes", "token_endpoint_auth_method"),
)
_OAUTH_KEYS: Final = ("client_id", "client_secret", "client_metadata_url", "scopes", "token_endpoint_auth_method")


def _servers(root: read.Section) -> list[ServerConfig]:
    raw = root.values.get("servers")
    if raw is None or raw == {}:  # a non-table is reported by `section`
        root.problem("at least one server is required ([servers.<name>] with command or url)", "servers")
    t = root.section("servers")
    servers: list[ServerConfig] = []
    for name in t.values:
        before = len(t.problems)
        if not SERVER_NAME.fullmatch(name):
            t.problem("a server name must be 1-32 characters of A-Z, a-z, 0-9, _ and -", name)
        s = t.section(name)
        s.only(_SERVER_KEYS)
        if s.has("command") and s.has("url"):
            s.problem("give either command or url, not both")
        elif s.has("url"):
            for other in ("args", "env", "cwd"):
                if other in s.values:
                    s.problem("only for a server started with command", other)
        elif "headers" in s.values:
            s.problem("only for a server reached by url", "headers")
        elif not s.has("command") and isinstance(t.values[name], Mapping):
            s.problem("give either command (a program to run) or url (a streamable HTTP endpoint)")
        command = s.get("command", read.text, None)
        if command == "python":
            # In a venv, "python" on PATH may be another interpreter; the bundled demo server needs ours.
            command = sys.executable or command
        args = s.get("args", read.str_list, ())
        env = s.get("env", read.str_table, dict[str, str]())
        cwd = s.get("cwd", read.text, None)
        url = s.get("url", read.http_url, None)
        headers = {k: Secret(v) for k, v in s.get("headers", read.str_table, dict[str, str]()).items()}
        protocol = s.get("protocol", read.one_of(ServerProtocol), ServerProtocol.AUTO)
        shared = s.get("shared", read.boolean, False)
        call_timeout_s = s.get("call_timeout_s", read.positive, 300.0)
        title = s.get("title", read.text, None)
        oauth = _oauth(s, url is not None, shared)
        if len(t.problems) == before:  # else ServerConfig would refuse it (and we raise anyway)
            servers.append(
                ServerConfig(
                    name,
                    command,
                    args,
                    env,
                    cwd,
                    url,
                    headers,
                    protocol,
                    shared,
                    call_timeout_s,
                    title,
                    oauth,
                )
            )
    return servers


def _oauth(s: read.Section, has_url: bool, shared: bool) -> OAuthClient | None:
    """`auth = "oauth"` and its keys; they are problems on a server without it, a stdio or a shared one."""
    auth = s.get("auth", read.one_of(ServerAuth), ServerAuth.NONE)
    if auth is not ServerAuth.OAUTH:
        for key in _OAUTH_KEYS:
            if key in s.values:
                s.problem('only with auth = "oauth"', key)
        return None
    if s.has("command"):
        s.problem("OAuth sign-in is for a server reached by url", "auth")
    if shared:
        s.problem(
            'a shared session cannot hold several people\'s tokens: shared = true and auth = "oauth" '
            "do not go together",
            "auth",
        )
    if not has_url:
        return None
    metadata_url = s.get("client_metadata_url", read.http_url, None)
    if metadata_url is not None and (
        urlsplit(metadata_url).scheme != "https" or urlsplit(metadata_url).path in ("", "/")
    ):
        s.problem("must be an https:// URL with a path", "client_metadata_url")
    secret = s.get("client_secret", read.text, None)
    client_id = s.get("client_id", read.text, None)
    if secret is not None and client_id is None:
        s.problem("needs client_id", "client_secret")
    method = s.get("token_endpoint_auth_method", read.one_of(TokenEndpointAuth), None)
    if method is not None and client_id is None:
        s.problem("needs client_id (it says how a pre-registered client authenticates)", "token_endpoint_auth_method")
    elif method is not None and (method is TokenEndpointAuth.NONE) != (secret is None):
        wanted = "sends no secret: remove client_secret" if secret is not None else "needs client_secret"
        s.problem(f"{method.value} {wanted}", "token_endpoint_auth_method")
    return OAuthClient(
        client_id=client_id,
        client_secret=None if secret is None else Secret(secret),
        client_metadata_url=metadata_url,
        scopes=s.get("scopes", read.str_list, ()),
        token_endpoint_auth_method=method,
    )


def _bot_token(value: object, environ: Mapping[str, str]) -> str:
    token = read.string(value, environ)
    if not token:
        raise read.Invalid("must not be empty")
    if not _BOT_TOKEN.fullmatch(token):
        raise read.Invalid("not a bot token (expected <digits>:<characters>, as @BotFather gives it)")
    return token


def _public_url(value: object, environ: Mapping[str, str]) -> str:
    url = read.http_url(value, environ)
    parts = urlsplit(url)
    if parts.scheme != "https":
        raise read.Invalid("must be an https:// URL (Telegram and browsers reach the bot over TLS)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        # The reverse proxy forwards paths unchanged, so the endpoint's routes are the site's root.
        raise read.Invalid("must be the site's root, https://host or https://host:port (no path)")
    return url.rstrip("/")


_webhook_secret = read.matching(WEBHOOK_SECRET, "must be 1-256 characters of A-Z, a-z, 0-9, _ and -")

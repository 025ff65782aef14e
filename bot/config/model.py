"""The configuration's schema: frozen pydantic models, each default and each rule stated once, here.

A field's rule is its annotated type (a converter from `read`, after `${VAR}` expansion); a rule between
fields is its model's `_relations`. Either way a problem is a pydantic error whose `loc` names the key and
whose message never quotes the value; `load.problem_lines` turns them into the lines users see.

Models are built with keywords only. A model built by hand (in tests) is validated like one read from a
file, except that `${VAR}` is not expanded and the document's shape (`_prepare`) is not translated: that
happens only with a validation context (`Context`), which `bot.config.load.parse_config` gives.

Why not pydantic's own `int`/`str` checks: their messages ("Input should be a valid integer") are not the
ones this bot's users and tests know; the converters keep them, and pydantic still collects every error.
"""

from __future__ import annotations

import base64
import enum
import fnmatch
import os
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Final, cast
from urllib.parse import urlsplit

from pydantic import AfterValidator, ValidationInfo

from bot.config import read
from bot.config._table import (
    EXPAND,
    Boolean,
    Context,
    Found,
    Limit,
    Positive,
    PositiveInt,
    Secret,
    Strings,
    Table,
    UserIds,
    as_frozenset,
    as_secret,
    checked,
    expand_in,
    optional,
    partial,
)
from bot.config.servers import ServerConfig, server_of
from bot.config.telegram import TOKEN_REQUIRED, TelegramConfig, TelegramMode
from bot.config.web import WEBHOOK_PORTS, GatewayConfig, MiniAppConfig, WebConfig

STORAGE_FILE: Final = "toolnexus.db"
"""The SQLite database's name when there is no `[storage] url`: in the state folder (see `state_folder`), else
beside the config file."""
DRAIN_S: Final = 20.0
"""`[run] drain_s` when not set."""
_STORAGE_SCHEMES: Final = ("sqlite", "postgresql", "postgres")


class ConfigError(Exception):
    """A configuration that cannot be used; `problems` holds one line per problem, each naming its key."""

    def __init__(self, problems: Iterable[str], path: str | None = None) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.path = path
        """The file the problems are in, when read by `load_config`."""
        super().__init__("\n".join(self.problems))


class AuditContent(enum.StrEnum):
    """How much of a person's answer (and a call's arguments) the audit log keeps."""

    FULL = "full"
    """The values."""
    KEYS = "keys"
    """Only the field names."""
    NONE = "none"
    """Neither."""


class ApprovalGate(enum.StrEnum):
    """What an `[[approvals]]` rule holds back until approvers agree."""

    CALL = "call"
    """The tool call itself: it is not sent until approved."""
    ANSWERS = "answers"
    """Each `accept` answer to one of the call's questions: it is not sent until approved."""


class SecondFactor(enum.StrEnum):
    """What an `[[approvals]]` approval needs besides the tap (`second_factor`)."""

    TOTP = "totp"
    """A code from the approver's authenticator app (enrolled with /2fa), checked by the bot."""


class Caller(enum.StrEnum):
    """Who starts a tool call: a person in the chat, or an agent through the gateway with that person's token."""

    CHAT = "chat"
    AGENT = "agent"


def _chat_id(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value == 0:
        raise read.Invalid("must be a Telegram chat id (an integer; groups are negative)")
    return value


def _secret_key(value: object) -> str:
    key = read.string(value)
    try:
        raw = base64.urlsafe_b64decode(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raw = b""
    if len(key) != 44 or len(raw) != 32:
        raise read.Invalid("not a key made by toolnexus-bot keygen (44 characters of URL-safe base64)")
    return key


def _storage_url(value: object) -> str:
    url = read.string(value)
    scheme = url.partition(":")[0].partition("+")[0]
    if scheme not in _STORAGE_SCHEMES:
        raise read.Invalid("must be a sqlite:///path or postgresql://user:password@host/db URL")
    if scheme == "sqlite" and (not url.startswith("sqlite:///") or len(url) == len("sqlite:///")):
        raise read.Invalid("a SQLite URL is sqlite:///relative/path or sqlite:////absolute/path")
    return url


def _beside_the_file(url: Secret, info: ValidationInfo) -> Secret:
    """A relative SQLite path is relative to the config file's folder."""
    context = cast("Context | None", info.context)
    path = url.get().removeprefix("sqlite:///")
    if context is None or not url.get().startswith("sqlite:///") or os.path.isabs(path):
        return url
    return Secret("sqlite:///" + os.path.join(context["base_dir"] or os.getcwd(), path))


def _callers(value: object) -> frozenset[Caller]:
    callers = frozenset(read.one_of(Caller)(item) for item in read.str_list(value))
    if not callers:
        raise read.Invalid("must list at least one of 'chat', 'agent'")
    return callers


class ApprovalRule(Table):
    """`[[approvals]]`: tool calls that need `quorum` of `approvers` to agree first."""

    _hidden = frozenset({"index"})
    servers: Annotated[frozenset[str], checked(as_frozenset(read.str_list)), EXPAND] = frozenset()
    """Server names the rule covers (required)."""
    tools: Strings = ()
    """Tool names or shell-style patterns (`deploy*`), matched with `fnmatch.fnmatchcase` (required)."""
    approvers: UserIds = frozenset()
    """Telegram user ids who may approve or reject (required)."""
    quorum: PositiveInt = 1
    """How many distinct approvers must approve."""
    chat: Annotated[int | None, checked(_chat_id), EXPAND] = None
    """The approval group's chat id; None: each approver gets the card privately."""
    self_approval: Boolean = False
    """Whether the requester's own approval counts (when they are an approver)."""
    timeout_s: Positive = 1800.0
    """A request not decided by then expires (and nothing is sent)."""
    gate: Annotated[ApprovalGate, checked(read.one_of(ApprovalGate)), EXPAND] = ApprovalGate.CALL
    callers: Annotated[frozenset[Caller], checked(_callers), EXPAND] = frozenset(Caller)
    """Whose calls the rule holds back: `chat` (a person's `/call`), `agent` (the gateway), or both."""
    second_factor: Annotated[SecondFactor | None, checked(optional(read.one_of(SecondFactor))), EXPAND] = None
    """`totp`: an approval also needs the approver's current authenticator code (needs `[storage] secret_key`)."""
    remind_after_s: Annotated[float | None, checked(optional(read.positive)), EXPAND] = None
    """Approvers who have not voted by then get one private reminder each (batched); None: no reminder."""
    escalate_after_s: Annotated[float | None, checked(optional(read.positive)), EXPAND] = None
    """Not decided by then: the people of `escalate_to` join the approvers; None: no escalation."""
    escalate_to: UserIds = frozenset()
    """Telegram user ids who become approvers of a request at `escalate_after_s`."""
    index: int = 0
    """The rule's place among `[[approvals]]` (named in problems and on cards)."""

    def matches(self, server: str, tool: str, caller: Caller = Caller.CHAT) -> bool:
        """Whether a call of `tool` on `server` by `caller` falls under this rule."""
        return (
            caller in self.callers
            and server in self.servers
            and any(fnmatch.fnmatchcase(tool, p) for p in self.tools)
        )

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        found: Found = []
        for j, pattern in enumerate(v.tools or ()):
            if not pattern:
                found.append((("tools", j), "must not be empty"))
        for name in ("servers", "tools", "approvers"):
            if data.get(name) is None:
                found.append(((name,), "required"))
            elif getattr(v, name) is not None and not getattr(v, name):
                found.append(((name,), "must list at least one"))
        if v.approvers and v.quorum is not None and v.quorum > len(v.approvers):
            found.append((("quorum",), f"{v.quorum} approvals needed but only {len(v.approvers)} approvers"))
        if (v.escalate_after_s is None) != (not v.escalate_to):
            missing = "escalate_to" if v.escalate_after_s is not None else "escalate_after_s"
            found.append(
                ((missing,), "required with " + ({"escalate_to", "escalate_after_s"} - {missing}).pop())
            )
        for name in ("remind_after_s", "escalate_after_s"):
            after = getattr(v, name)
            if after is not None and v.timeout_s is not None and after >= v.timeout_s:
                found.append(
                    ((name,), f"must be less than timeout_s ({v.timeout_s:g}): the request ends then")
                )
        return found


class ElicitationConfig(Table):
    """`[elicitation]`."""

    timeout_s: Positive = 600.0
    """An unanswered prompt is cancelled after this long."""


class RunConfig(Table):
    """`[run]`: the process's own lifetime."""

    drain_s: Positive = DRAIN_S
    """On SIGTERM, how long running calls (and 2025-era questions) get to finish before the bot exits;
    what the store keeps (2026-07-28 questions, approvals) stays open for the next process."""


class StorageConfig(Table):
    """`[storage]`: the database (audit log, open questions)."""

    url: Annotated[Secret, checked(as_secret(_storage_url)), EXPAND, AfterValidator(_beside_the_file)]
    """`sqlite:///<absolute path>` (a relative path in the file is resolved against the config's folder)
    or `postgresql://user:password@host/db`; a `Secret` because a PostgreSQL URL may carry a password.
    Without it, `parse_config` puts `toolnexus.db` in the state folder or beside the config file."""
    secret_key: Annotated[Secret | None, checked(optional(as_secret(_secret_key))), EXPAND] = None
    """Encrypts OAuth tokens at rest (a Fernet key, `toolnexus-bot keygen`); required once a server uses OAuth."""


class AuditConfig(Table):
    """`[audit]`."""

    content: Annotated[AuditContent, checked(read.one_of(AuditContent)), EXPAND] = AuditContent.FULL
    """How much of answers and arguments the log keeps."""


class SessionsConfig(Table):
    """`[sessions]`: the per-(server, chat, user) MCP sessions."""

    idle_timeout_s: Positive = 900.0
    """A session unused this long is closed (it is reopened on demand)."""
    max_open: PositiveInt = 100
    """At most this many sessions at once; to open another, the least recently used idle one is closed."""


class LimitsConfig(Table):
    """`[limits]`: what one person may start, and the server processes of everyone; 0 means no limit.

    All off unless set, except under `allow_everyone`, where the `public()` values are the defaults.
    """

    calls_per_minute: Limit = 0
    """Tool calls one person may start in any 60 seconds."""
    concurrent_calls: Limit = 0
    """Tool calls of one person running at once."""
    open_questions: Limit = 0
    """Servers' questions waiting for one person's answer at once."""
    stdio_processes: Limit = 0
    """Server processes (stdio sessions) the bot runs in total; past it, unshared stdio sessions are refused."""

    @classmethod
    def public(cls) -> LimitsConfig:
        """The defaults for a bot open to everyone."""
        return cls(**PUBLIC_LIMITS)


PUBLIC_LIMITS: Final = {
    "calls_per_minute": 10,
    "concurrent_calls": 2,
    "open_questions": 3,
    "stdio_processes": 20,
}


def state_folder(environ: Mapping[str, str]) -> str | None:
    """Where the process may keep its state, when something set one up for it: systemd's
    `$STATE_DIRECTORY` (the unit's `StateDirectory=`; the first of a colon-separated list), which the
    container image sets to its volume `/data`. None otherwise (the default database goes beside the config)."""
    first = environ.get("STATE_DIRECTORY", "").split(":")[0]
    return first if os.path.isabs(first) else None


class Config(Table):
    """The whole configuration. Build it with `load_config`/`parse_config`, or by hand in tests."""

    telegram: TelegramConfig = TelegramConfig()
    web: WebConfig | None = None
    """`[web]`; None when absent (then the endpoint is off: polling needs none)."""
    elicitation: ElicitationConfig = ElicitationConfig()
    run: RunConfig = RunConfig()
    sessions: SessionsConfig = SessionsConfig()
    servers: tuple[ServerConfig, ...]
    """In file order; names are unique (see `server`)."""
    miniapp: MiniAppConfig = MiniAppConfig()
    """`[miniapp]`; in effect only with `[web] public_url` (see `miniapp_on`)."""
    storage: StorageConfig | None = None
    """The database; `load_config` always sets one (SQLite beside the config file by default). None (a
    config built by hand, or parsed with no folder and no `[storage]`) runs without a database."""
    audit: AuditConfig = AuditConfig()
    limits: LimitsConfig = LimitsConfig()
    """`[limits]`; absent keys are off, or `LimitsConfig.public()`'s under `allow_everyone`."""
    approvals: tuple[ApprovalRule, ...] = ()
    """`[[approvals]]`, in file order; the first that matches a call applies (see `approval_rule`)."""
    gateway: GatewayConfig = GatewayConfig()
    """`[gateway]`: the MCP endpoint for agents (off unless enabled)."""

    def approval_rule(self, server: str, tool: str, caller: Caller = Caller.CHAT) -> ApprovalRule | None:
        """The first `[[approvals]]` rule covering this call by `caller`, if any."""
        return next((rule for rule in self.approvals if rule.matches(server, tool, caller)), None)

    @property
    def approvers(self) -> frozenset[int]:
        """Everyone who may approve something: their taps on approval cards pass the access gate."""
        return frozenset().union(*(rule.approvers | rule.escalate_to for rule in self.approvals))

    @property
    def miniapp_on(self) -> bool:
        """Whether long forms get an **Open form** button: enabled, and a public URL to open."""
        return (
            self.miniapp.enabled
            and self.web is not None
            and self.web.public_url is not None
            and not self.web.local_only  # Telegram opens Mini Apps over https only
        )

    def server(self, name: str) -> ServerConfig | None:
        """The server called `name`, if any."""
        return next((server for server in self.servers if server.name == name), None)

    def require_telegram(self) -> Secret:
        """Return the bot token (the one setting only the Telegram bot needs; `console` and `check` don't).

        Raises:
            ConfigError: the token is missing or unusable (`telegram.token: ...`).
        """
        if self.telegram.token is None:
            raise ConfigError([self.telegram.token_problem or TOKEN_REQUIRED])
        return self.telegram.token

    def bot_id(self) -> int:
        """The bot's Telegram id: the token's part before ':' (no secret; the store keys the bot's locks and its
        webhook inbox by it).

        Raises:
            ConfigError: the token is missing or unusable.
        """
        return int(self.require_telegram().get().partition(":")[0])

    @classmethod
    def _prepare(cls, data: dict[str, Any], context: Context) -> Found:
        """A file's document: its servers, its storage default, the public limits under allow_everyone."""
        found: Found = []
        servers = data.get("servers")
        if servers is None or servers == {}:
            found.append(
                (("servers",), "at least one server is required ([servers.<name>] with command or url)")
            )
            data["servers"] = ()
        elif not isinstance(servers, Mapping):
            found.append((("servers",), "must be a table"))
            data["servers"] = ()
        else:  # the tables' names become their `name`
            named = cast("Mapping[str, object]", servers)
            found += [
                (("servers", name, "name"), "unknown key")
                for name, t in named.items()
                if isinstance(t, Mapping) and "name" in t
            ]
            data["servers"] = [
                {**t, "name": name} if isinstance(t, Mapping) else t for name, t in named.items()
            ]
        approvals = data.get("approvals")
        if isinstance(approvals, list):  # each rule knows its place
            rules = cast("list[object]", approvals)
            data["approvals"] = [
                {**t, "index": i} if isinstance(t, Mapping) else t for i, t in enumerate(rules)
            ]
        elif approvals is not None:
            found.append((("approvals",), "must be an array of tables ([[approvals]])"))
            del data["approvals"]
        storage = data.get("storage")
        no_url = storage is None or (isinstance(storage, Mapping) and storage.get("url") is None)
        if context["base_dir"] is not None and no_url:  # the default database, beside the file
            folder = state_folder(context["environ"]) or context["base_dir"]
            default = "sqlite:///" + os.path.join(folder, STORAGE_FILE).replace("${", "$${")
            data["storage"] = {**cast("Mapping[str, object]", storage or {}), "url": default}
        telegram, limits = data.get("telegram"), data.get("limits", {})
        if (
            isinstance(telegram, Mapping)
            and telegram.get("allow_everyone") is True
            and isinstance(limits, Mapping)
        ):
            data["limits"] = {**PUBLIC_LIMITS, **cast("Mapping[str, object]", limits)}
        return found

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        found: Found = []
        telegram = v.telegram
        web = data.get("web")
        if telegram is not None and telegram.mode is TelegramMode.WEBHOOK:
            public_url = (
                web.get("public_url") if isinstance(web, Mapping) else getattr(web, "public_url", None)
            )
            if public_url is None:
                found.append((("web", "public_url"), "required when telegram.mode is webhook"))
            elif v.web is not None and v.web.local_only:
                found.append(
                    (("web", "public_url"), "webhook mode needs https:// (Telegram delivers over TLS)")
                )
            elif (
                v.web is not None
                and v.web.public_url is not None
                and ((urlsplit(v.web.public_url).port or 443) not in WEBHOOK_PORTS)
            ):
                found.append(
                    (("web", "public_url"), "Telegram only delivers webhooks to ports 443, 80, 88 and 8443")
                )
        servers = [server_of(s) for s in data.get("servers", ())]
        names = [name for name, _ in servers]
        if len(set(names)) != len(names):
            found.append((("servers",), f"server names must be unique: {names}"))
        storage = v.storage
        if any(oauth for _, oauth in servers) and (storage is None or storage.secret_key is None):
            found.append(
                (
                    ("storage", "secret_key"),
                    'required once a server uses auth = "oauth" (secret_key = "${TOOLNEXUS_SECRET_KEY}"; '
                    "make one with toolnexus-bot keygen)",
                )
            )
        totp = [i for i, rule in enumerate(data.get("approvals", ())) if asks_second_factor(rule)]
        if totp and (storage is None or storage.secret_key is None):
            found.append(
                (
                    ("approvals", totp[0], "second_factor"),
                    "needs [storage] secret_key (the authenticator secrets are kept sealed with it)",
                )
            )
        gateway = v.gateway
        if gateway is not None and gateway.enabled:
            if v.web is None or v.web.public_url is None:
                found.append(
                    (("gateway", "enabled"), "needs [web] public_url (agents reach <public_url>/mcp)")
                )
            if storage is None:
                found.append(
                    (("gateway", "enabled"), "needs [storage] (agent tokens are kept there, hashed)")
                )
        for i, table in enumerate(data.get("approvals", ())):
            if isinstance(table, ApprovalRule):
                found += approval_relations(i, table, sorted(table.servers), set(names), telegram)
            elif isinstance(table, Mapping):
                # Read on its own: a rule's own problems are reported by ApprovalRule.
                raw = cast("Mapping[str, Any]", table)
                rule = partial(ApprovalRule, raw, context)
                try:
                    listed = read.str_list(expand_in(raw.get("servers", ()), context))
                except read.Invalid:
                    listed = ()
                found += approval_relations(i, rule, listed, set(names), telegram)
        return found


def asks_second_factor(rule: object) -> bool:
    """Whether an `[[approvals]]` rule as given (a model or a table) asks for a second factor."""
    if isinstance(rule, ApprovalRule):
        return rule.second_factor is not None
    if isinstance(rule, Mapping):
        return cast("Mapping[str, Any]", rule).get("second_factor") in {f.value for f in SecondFactor}
    return False


def approval_relations(
    i: int, rule: Any, listed: Iterable[str], servers: set[object], telegram: Any
) -> Found:
    """A rule's servers exist; its quorum can be reached even when an approver asks (see `self_approval`)."""
    found: Found = [
        (("approvals", i, "servers", j), f"no server {name!r} is configured")
        for j, name in enumerate(listed)
        if name not in servers
    ]
    approvers, quorum = rule.approvers, rule.quorum
    if not approvers or quorum is None or quorum > len(approvers) or rule.self_approval or telegram is None:
        return found
    allowed = telegram.allowed_users or frozenset()
    callers = sorted(u for u in approvers if telegram.allow_everyone or u in allowed)
    if callers and quorum > len(approvers) - 1:
        who = (
            "everyone may call tools (allow_everyone)"
            if telegram.allow_everyone
            else f"approver {callers[0]} is in telegram.allowed_users"
        )
        found.append(
            (
                ("approvals", i, "quorum"),
                f"{quorum} approvals needed, but with self_approval = false a request by an approver leaves only "
                f"{len(approvers) - 1} who can approve ({who})",
            )
        )
    return found

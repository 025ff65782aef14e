"""The whole configuration: the root `Config` (a file's document and the rules between its tables) and
`ConfigError`. No I/O.

Each table is its own module (`telegram`, `web` with `[miniapp]` and `[gateway]`, `servers`, `storage` with
`[audit]`, `approvals`, `limits` with `[run]`, `[elicitation]` and `[sessions]`); what they share, the `Table`
base and the field types, is `_table`. Every default and every rule is stated once, in those models.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

from bot.config import read
from bot.config._table import Context, Found, Secret, Table, expand_in, partial
from bot.config.approvals import ApprovalRule, Caller, approval_relations, asks_second_factor, hook_rules
from bot.config.limits import PUBLIC_LIMITS, ElicitationConfig, LimitsConfig, RunConfig, SessionsConfig
from bot.config.servers import ServerConfig, server_of
from bot.config.storage import STORAGE_FILE, AuditConfig, StorageConfig, state_folder
from bot.config.telegram import TOKEN_REQUIRED, TelegramConfig, TelegramMode
from bot.config.web import WEBHOOK_PORTS, GatewayConfig, MiniAppConfig, WebConfig
from bot.errors import ToolnexusError


class ConfigError(ToolnexusError):
    """A configuration that cannot be used; `problems` holds one line per problem, each naming its key."""

    def __init__(self, problems: Iterable[str], path: str | None = None) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.path = path
        """The file the problems are in, when read by `load_config`."""
        super().__init__("\n".join(self.problems))


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

    def hook_rules(self, tool: str, tool_input: Mapping[str, object]) -> tuple[ApprovalRule, ...]:
        """Every `[[approvals]]` rule whose `hooks` cover an agent's prompt to use `tool` with `tool_input`
        (`bot.config.approvals.hook_rules`; the strictest governs: `governing_rule`)."""
        return hook_rules(self.approvals, tool, tool_input)

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

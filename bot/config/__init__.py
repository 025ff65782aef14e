"""The bot's configuration: TOML → frozen `Config`. `parse_config` is pure; `load_config` reads the file.

    ConfigError           every problem at once, one line each, naming the key (`servers.demo.url: not a URL`)

The schema is pydantic models, every default and rule once: one module a table (`telegram`; `web` with
`[miniapp]` and `[gateway]`; `servers`; `storage` with `[audit]`; `approvals`; `limits` with `[run]`,
`[elicitation]` and `[sessions]`), the root `Config` and `ConfigError` in `model`, what they share in `_table`.
`load` reads a file and turns validation errors into problem lines; `read` expands `${VAR}` and converts raw
values.
"""

from bot.config._table import Secret
from bot.config.approvals import ApprovalGate, ApprovalRule, Caller, SecondFactor
from bot.config.limits import DRAIN_S, ElicitationConfig, LimitsConfig, RunConfig, SessionsConfig
from bot.config.load import load_config, load_storage, parse_config
from bot.config.model import Config, ConfigError
from bot.config.servers import (
    SERVER_NAME,
    OAuthClient,
    ServerAuth,
    ServerConfig,
    ServerProtocol,
    TokenEndpointAuth,
    Transport,
)
from bot.config.storage import STORAGE_FILE, AuditConfig, AuditContent, StorageConfig, state_folder
from bot.config.telegram import WEBHOOK_SECRET, TelegramConfig, TelegramMode
from bot.config.web import WEBHOOK_PATH, WEBHOOK_PORTS, GatewayConfig, MiniAppConfig, WebConfig

__all__ = [
    "DRAIN_S",
    "SERVER_NAME",
    "STORAGE_FILE",
    "WEBHOOK_PATH",
    "WEBHOOK_PORTS",
    "WEBHOOK_SECRET",
    "ApprovalGate",
    "ApprovalRule",
    "AuditConfig",
    "AuditContent",
    "Caller",
    "Config",
    "ConfigError",
    "ElicitationConfig",
    "GatewayConfig",
    "LimitsConfig",
    "MiniAppConfig",
    "OAuthClient",
    "RunConfig",
    "SecondFactor",
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
    "load_storage",
    "parse_config",
    "state_folder",
]

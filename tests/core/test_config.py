"""Tests for bot/config/: parsing, `${VAR}` expansion, secret masking, the file loader and the example."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pydantic
import pytest

from bot.config import (
    ApprovalRule,
    AuditConfig,
    Config,
    ConfigError,
    ElicitationConfig,
    GatewayConfig,
    LimitsConfig,
    MiniAppConfig,
    OAuthClient,
    RunConfig,
    Secret,
    ServerConfig,
    ServerProtocol,
    SessionsConfig,
    StorageConfig,
    TelegramConfig,
    TelegramMode,
    Transport,
    WebConfig,
    load_config,
    parse_config,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "config.example.toml"
SERVER = '[servers.demo]\ncommand = "python"\n'
REMOTE = '[servers.r]\nurl = "http://h/"\n'
TOKEN = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
TOKEN_REQUIRED = 'telegram.token: required to run the Telegram bot (token = "${TELEGRAM_BOT_TOKEN}")'
NOT_AN_ID = "not a Telegram user id (a positive integer)"
BAD_REFERENCE = "write ${NAME} or ${NAME:-default} (or $${ for a literal ${)"
NAME_RULE = "a server name must be 1-32 characters of A-Z, a-z, 0-9, _ and -"
SECRET_RULE = "must be 1-256 characters of A-Z, a-z, 0-9, _ and -"
PORT_RULE = "must be a port number (an integer from 1 to 65535)"


def parse(text: str, env: Mapping[str, str] | None = None) -> Config:
    return parse_config(tomllib.loads(text), env or {})


def problems_of(text: str, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as info:
        parse(text, env)
    return info.value.problems


def _(section: str, body: str) -> str:
    """A snippet setting `body` in `[section]`, plus a valid server so that nothing else is wrong."""
    return f"[{section}]\n{body}\n" + SERVER


def test_a_single_command_server_gets_every_default() -> None:
    """The smallest valid config is one server; everything else has its documented default."""
    config = parse('[servers.tool]\ncommand = "mcp-tool"\n')
    assert config == Config(servers=(ServerConfig(name="tool", command="mcp-tool"),))
    assert config.telegram == TelegramConfig()
    assert config.telegram.token is None
    assert config.telegram.api_base_url == "https://api.telegram.org/bot"
    assert config.telegram.allowed_users == frozenset()
    assert config.telegram.allow_everyone is False
    assert config.telegram.mode is TelegramMode.POLLING
    assert config.telegram.webhook_secret is None
    assert config.web is None
    assert config.elicitation == ElicitationConfig(timeout_s=600.0)
    assert config.sessions == SessionsConfig(idle_timeout_s=900.0, max_open=100)
    s = config.servers[0]
    assert (s.args, dict(s.env), s.cwd, s.url, dict(s.headers)) == ((), {}, None, None, {})
    assert (s.protocol, s.shared, s.call_timeout_s, s.title) == ("auto", False, 300.0, None)
    assert s.transport is Transport.STDIO


def _first(c: Config) -> ServerConfig:
    return c.servers[0]


def _web(c: Config) -> WebConfig:
    assert c.web is not None, "no [web] table"
    return c.web


WEBHOOK = (
    '[telegram]\nmode = "webhook"\nwebhook_secret = "${WH}"\n[web]\nlisten = "0.0.0.0"\nport = 9000\n'
    'public_url = "https://bot.example.com:88/"\n' + SERVER
)
WEBHOOK_TABLE_MOVED = (
    "telegram.webhook: replaced by [web] (listen, port, public_url) and telegram.webhook_secret; "
    "the webhook is now <public_url>/telegram"
)
PUBLIC_ROOT = "must be the site's root, https://host or https://host:port (no path)"

# fmt: off
GOOD: list[tuple[str, str, dict[str, str], Callable[[Config], Any], Any]] = [
    ("python is this interpreter", SERVER, {}, lambda c: _first(c).command, sys.executable),
    ("other commands stay", '[servers.a]\ncommand = "uvx"\n', {}, lambda c: _first(c).command, "uvx"),
    ("stdio options", '[servers.a]\ncommand = "srv"\nargs = ["-v", "x"]\nenv = { K = "v" }\ncwd = "/tmp"\n',
     {}, lambda c: (_first(c).args, dict(_first(c).env), _first(c).cwd), (("-v", "x"), {"K": "v"}, "/tmp")),
    ("http server", '[servers.r]\nurl = "https://mcp.example.com/mcp"\nheaders = { Authorization = "B t" }\n',
     {}, lambda c: (_first(c).transport, _first(c).url, _first(c).reveal_headers()),
     ("http", "https://mcp.example.com/mcp", {"Authorization": "B t"})),
    ("plain http for servers", '[servers.r]\nurl = "http://127.0.0.1:9/mcp"\n', {},
     lambda c: _first(c).url, "http://127.0.0.1:9/mcp"),
    ("server options", SERVER + 'protocol = "2026-07-28"\nshared = true\ncall_timeout_s = 2.5\ntitle = "D"\n',
     {}, lambda c: (_first(c).protocol, _first(c).shared, _first(c).call_timeout_s, _first(c).title),
     (ServerProtocol.V2026_07_28, True, 2.5, "D")),
    ("legacy protocol", SERVER + 'protocol = "legacy"\n', {}, lambda c: _first(c).protocol, "legacy"),
    ("servers keep file order", '[servers.b]\ncommand = "x"\n[servers.a]\nurl = "http://h/"\n[servers.c-1_Z]\n'
     'command = "y"\n', {}, lambda c: [s.name for s in c.servers], ["b", "a", "c-1_Z"]),
    ("user ids as a list", _("telegram", "allowed_users = [1, 22]"), {},
     lambda c: c.telegram.allowed_users, {1, 22}),
    ("user ids as a string", _("telegram", 'allowed_users = " 1, 22 333\t4,"'), {},
     lambda c: c.telegram.allowed_users, {1, 22, 333, 4}),
    ("user ids from env", _("telegram", 'allowed_users = "${IDS:-}"'), {"IDS": "7,8"},
     lambda c: c.telegram.allowed_users, {7, 8}),
    ("no user ids in env", _("telegram", 'allowed_users = "${IDS:-}"'), {},
     lambda c: c.telegram.allowed_users, frozenset()),
    ("allow everyone", _("telegram", "allow_everyone = true"), {}, lambda c: c.telegram.allow_everyone, True),
    ("own Bot API", _("telegram", 'api_base_url = "http://127.0.0.1:8081/bot"'), {},
     lambda c: c.telegram.api_base_url, "http://127.0.0.1:8081/bot"),
    ("webhook mode", WEBHOOK, {"WH": "s3cr-et_"}, lambda c: (c.telegram.webhook_secret, c.web),
     (Secret("s3cr-et_"), WebConfig(listen="0.0.0.0", port=9000, public_url="https://bot.example.com:88"))),
    ("the webhook's public address", WEBHOOK, {"WH": "s"}, lambda c: _web(c).webhook_url,
     "https://bot.example.com:88/telegram"),
    ("[web] defaults", _("web", ""), {}, lambda c: c.web, WebConfig(listen="127.0.0.1", port=8080, public_url=None)),
    ("[web] in polling mode", _("web", 'public_url = "https://b.example.com:9443"'), {},
     lambda c: (c.telegram.mode, _web(c).public_url), (TelegramMode.POLLING, "https://b.example.com:9443")),
    ("fractional timeouts", _("elicitation", "timeout_s = 0.5"), {}, lambda c: c.elicitation.timeout_s, 0.5),
    ("sessions", _("sessions", "idle_timeout_s = 60\nmax_open = 3"), {}, lambda c: c.sessions,
     SessionsConfig(idle_timeout_s=60.0, max_open=3)),
    ("a variable", '[servers.a]\ncommand = "${BIN}"\n', {"BIN": "/s"}, lambda c: _first(c).command, "/s"),
    ("a variable inside text", SERVER + 'args = ["--dir=${HOME}/data"]\n', {"HOME": "/h"},
     lambda c: _first(c).args, ("--dir=/h/data",)),
    ("a default for an unset variable", '[servers.a]\nurl = "${U:-http://localhost/mcp}"\n', {},
     lambda c: _first(c).url, "http://localhost/mcp"),
    ("a default for an empty variable", '[servers.a]\nurl = "${U:-http://localhost/mcp}"\n', {"U": ""},
     lambda c: _first(c).url, "http://localhost/mcp"),
    ("a set variable beats its default", '[servers.a]\nurl = "${U:-http://localhost/mcp}"\n', {"U": "http://h/"},
     lambda c: _first(c).url, "http://h/"),
    ("an empty variable is empty", SERVER + 'args = ["${E}"]\n', {"E": ""}, lambda c: _first(c).args, ("",)),
    ("variables in tables", SERVER + 'env = { KEY = "${K}" }\n', {"K": "v"},
     lambda c: dict(_first(c).env), {"KEY": "v"}),
    ("variables in headers", REMOTE + 'headers = { A = "Bearer ${T}" }\n', {"T": "t"},
     lambda c: _first(c).reveal_headers(), {"A": "Bearer t"}),
    ("$${ is a literal ${", SERVER + 'args = ["$${HOME}", "$$x", "$HOME"]\n', {"HOME": "/h"},
     lambda c: _first(c).args, ("${HOME}", "$$x", "$HOME")),
    ("values are expanded once", SERVER + 'args = ["${A}"]\n', {"A": "${B}", "B": "no"},
     lambda c: _first(c).args, ("${B}",)),
]
# fmt: on


@pytest.mark.parametrize(("text", "env", "get", "expected"), [g[1:] for g in GOOD], ids=[g[0] for g in GOOD])
def test_valid_configs_parse_to_the_expected_values(
    text: str, env: dict[str, str], get: Callable[[Config], Any], expected: Any
) -> None:
    """Each valid snippet parses, and the value it sets is read back as expected."""
    assert get(parse(text, env)) == expected


# fmt: off
BAD: list[tuple[str, str]] = [
    # unknown keys, with a suggestion when one is near
    ("bogus = 1\n" + SERVER, "bogus: unknown key"),
    (_("telegram", "bogus = 1"), "telegram.bogus: unknown key"),
    (_("telegram", "allowed_user = [1]"), "telegram.allowed_user: unknown key (did you mean allowed_users?)"),
    (_("telegram", "webhook_secrets = 's'"),
     "telegram.webhook_secrets: unknown key (did you mean webhook_secret?)"),
    (_("web", "public = 's'"), "web.public: unknown key (did you mean public_url?)"),
    (_("elicitation", "timeout = 5"), "elicitation.timeout: unknown key (did you mean timeout_s?)"),
    (_("sessions", "maxopen = 5"), "sessions.maxopen: unknown key (did you mean max_open?)"),
    (SERVER + "argz = []\n", "servers.demo.argz: unknown key (did you mean args?)"),
    (SERVER + "timeout = 1\n", "servers.demo.timeout: unknown key (did you mean call_timeout_s?)"),
    (SERVER + "colour = 1\n", "servers.demo.colour: unknown key"),
    # sections of the wrong type
    ("telegram = 5\n" + SERVER, "telegram: must be a table"),
    ("web = 5\n" + SERVER, "web: must be a table"),
    ("elicitation = []\n" + SERVER, "elicitation: must be a table"),
    ("servers = 5\n", "servers: must be a table"),
    ("[servers]\ndemo = 5\n", "servers.demo: must be a table"),
    # servers
    ("", "servers: at least one server is required ([servers.<name>] with command or url)"),
    ("[servers]\n", "servers: at least one server is required ([servers.<name>] with command or url)"),
    ('[servers."my server"]\ncommand = "x"\n', f"servers.my server: {NAME_RULE}"),
    (f'[servers.{"x" * 33}]\ncommand = "x"\n', f"servers.{'x' * 33}: {NAME_RULE}"),
    (REMOTE.replace("r]", "demo]") + 'command = "x"\n', "servers.demo: give either command or url, not both"),
    ('[servers.demo]\ntitle = "x"\n',
     "servers.demo: give either command (a program to run) or url (a streamable HTTP endpoint)"),
    ('[servers.demo]\ncommand = ""\n', "servers.demo.command: must not be empty"),
    ("[servers.demo]\ncommand = 5\n", "servers.demo.command: must be a string"),
    ('[servers.remote]\nurl = "not a url"\n', "servers.remote.url: not a URL"),
    ('[servers.remote]\nurl = "http://[::1/mcp"\n', "servers.remote.url: not a URL"),
    ('[servers.remote]\nurl = "http://h:99999/mcp"\n', "servers.remote.url: not a URL"),
    ('[servers.remote]\nurl = "ftp://h/mcp"\n', "servers.remote.url: must be an http:// or https:// URL"),
    (REMOTE + "args = []\n", "servers.r.args: only for a server started with command"),
    (REMOTE + 'cwd = "/"\n', "servers.r.cwd: only for a server started with command"),
    (SERVER + 'headers = { A = "b" }\n', "servers.demo.headers: only for a server reached by url"),
    (SERVER + 'args = "-m x"\n', "servers.demo.args: must be a list of strings"),
    (SERVER + 'args = ["-m", 1]\n', "servers.demo.args[1]: must be a string"),
    (SERVER + "env = []\n", "servers.demo.env: must be a table of strings"),
    (SERVER + "env = { PORT = 80 }\n", "servers.demo.env.PORT: must be a string"),
    (SERVER + 'cwd = ""\n', "servers.demo.cwd: must not be empty"),
    (REMOTE + 'headers = "x"\n', "servers.r.headers: must be a table of strings"),
    (SERVER + 'protocol = "2025"\n', "servers.demo.protocol: must be one of 'auto', 'legacy', '2026-07-28'"),
    (SERVER + "shared = 1\n", "servers.demo.shared: must be a boolean (true or false)"),
    (SERVER + "call_timeout_s = 0\n", "servers.demo.call_timeout_s: must be a positive number"),
    (SERVER + 'title = ""\n', "servers.demo.title: must not be empty"),
    # telegram
    (_("telegram", 'api_base_url = "api.telegram.org/bot"'), "telegram.api_base_url: not a URL"),
    (_("telegram", 'allowed_users = [1, "x"]'), f"telegram.allowed_users[1]: {NOT_AN_ID}"),
    (_("telegram", 'allowed_users = "1, @bob"'), f"telegram.allowed_users[1]: {NOT_AN_ID}"),
    (_("telegram", 'allowed_users = "-5"'), f"telegram.allowed_users[0]: {NOT_AN_ID}"),
    (_("telegram", "allowed_users = [0]"), f"telegram.allowed_users[0]: {NOT_AN_ID}"),
    (_("telegram", "allowed_users = [true]"), f"telegram.allowed_users[0]: {NOT_AN_ID}"),
    (_("telegram", "allowed_users = 5"), "telegram.allowed_users: must be a list of Telegram user ids, "
                                         "or a string of ids separated by commas or spaces"),
    (_("telegram", 'allowed_users = "${I}"'), "telegram.allowed_users: environment variable I is not set"),
    (_("telegram", 'allow_everyone = "yes"'), "telegram.allow_everyone: must be a boolean (true or false)"),
    (_("telegram", 'mode = "push"'), "telegram.mode: must be one of 'polling', 'webhook'"),
    (_("telegram", 'mode = "webhook"\n[web]\npublic_url = "https://h/"'),
     "telegram.webhook_secret: required when telegram.mode is webhook"),
    (_("telegram", 'mode = "webhook"\nwebhook_secret = "s"\n[web]'),
     "web.public_url: required when telegram.mode is webhook"),
    (_("telegram", 'mode = "webhook"\nwebhook_secret = "s"'),
     "web.public_url: required when telegram.mode is webhook"),
    (_("telegram", 'mode = "webhook"\nwebhook_secret = "s"\n[web]\npublic_url = "https://h:9000"'),
     "web.public_url: Telegram only delivers webhooks to ports 443, 80, 88 and 8443"),
    (_("telegram.webhook", 'url = "https://h/"'), WEBHOOK_TABLE_MOVED),
    (_("telegram", "webhook = 5"), WEBHOOK_TABLE_MOVED),
    (_("telegram", 'webhook_secret = "has space"'), f"telegram.webhook_secret: {SECRET_RULE}"),
    (_("telegram", f"webhook_secret = '{'a' * 257}'"), f"telegram.webhook_secret: {SECRET_RULE}"),
    (_("telegram", 'webhook_secret = ""'), f"telegram.webhook_secret: {SECRET_RULE}"),
    (_("web", 'public_url = "http://bot.example.com/"'),
     "web.public_url: must be an https:// URL (Telegram and browsers reach the bot over TLS); http:// only on "
     "this machine (127.0.0.1, localhost or [::1]), to try the gateway"),
    (_("telegram", 'mode = "webhook"\nwebhook_secret = "s"\n[web]\npublic_url = "http://127.0.0.1:8080"'),
     "web.public_url: webhook mode needs https:// (Telegram delivers over TLS)"),
    (_("web", 'public_url = "https://bot.example.com/bot"'), f"web.public_url: {PUBLIC_ROOT}"),
    (_("web", 'public_url = "https://bot.example.com/?x=1"'), f"web.public_url: {PUBLIC_ROOT}"),
    (_("web", 'public_url = "https://u:p@bot.example.com"'), f"web.public_url: {PUBLIC_ROOT}"),
    (_("web", 'public_url = "bot.example.com"'), "web.public_url: not a URL"),
    (_("web", "port = 70000"), f"web.port: {PORT_RULE}"),
    (_("web", "port = 0"), f"web.port: {PORT_RULE}"),
    (_("web", 'listen = ""'), "web.listen: must not be empty"),
    # elicitation and sessions
    (_("elicitation", "timeout_s = 0"), "elicitation.timeout_s: must be a positive number"),
    (_("elicitation", "timeout_s = -1"), "elicitation.timeout_s: must be a positive number"),
    (_("elicitation", 'timeout_s = "600"'), "elicitation.timeout_s: must be a positive number"),
    (_("elicitation", "timeout_s = true"), "elicitation.timeout_s: must be a positive number"),
    (_("elicitation", "timeout_s = inf"), "elicitation.timeout_s: must be a positive number"),
    (_("elicitation", "timeout_s = nan"), "elicitation.timeout_s: must be a positive number"),
    (_("sessions", "idle_timeout_s = 0"), "sessions.idle_timeout_s: must be a positive number"),
    (_("sessions", "max_open = 1.5"), "sessions.max_open: must be a positive integer"),
    (_("sessions", "max_open = 0"), "sessions.max_open: must be a positive integer"),
    # environment variables
    ('[servers.remote]\nurl = "${MCP_URL}"\n', "servers.remote.url: environment variable MCP_URL is not set"),
    (REMOTE + 'headers = { Authorization = "Bearer ${REMOTE_TOKEN}" }\n',
     "servers.r.headers.Authorization: environment variable REMOTE_TOKEN is not set"),
    (SERVER + 'args = ["${A}-${B}-${A}"]\n', "servers.demo.args[0]: environment variables A, B are not set"),
    (SERVER + 'env = { K = "${K}" }\n', "servers.demo.env.K: environment variable K is not set"),
    (SERVER + 'title = "${not closed"\n', f"servers.demo.title: {BAD_REFERENCE}"),
    (SERVER + 'title = "${1X}"\n', f"servers.demo.title: {BAD_REFERENCE}"),
    (SERVER + 'title = "${X:default}"\n', f"servers.demo.title: {BAD_REFERENCE}"),
    ('[servers.remote]\nurl = "${U:-}"\n', "servers.remote.url: not a URL"),
]
# fmt: on


@pytest.mark.parametrize(("text", "line"), BAD, ids=[b[1] for b in BAD])
def test_each_invalid_config_reports_exactly_its_problem_line(text: str, line: str) -> None:
    """A config with one mistake raises ConfigError whose only problem is one line naming the key."""
    assert problems_of(text) == (line,)


def test_every_problem_is_reported_at_once_in_a_stable_order() -> None:
    """All problems are collected into one ConfigError, section by section, in the documented key order."""
    text = """
        [telegram]
        mode = "webhook"
        [elicitation]
        timeout_s = -1
        [servers.demo]
        comand = "python"
        [servers.remote]
        url = "nope"
        shared = "no"
    """
    assert problems_of(text) == (
        "telegram.webhook_secret: required when telegram.mode is webhook",
        "web.public_url: required when telegram.mode is webhook",
        "elicitation.timeout_s: must be a positive number",
        "servers.demo.comand: unknown key (did you mean command?)",
        "servers.demo: give either command (a program to run) or url (a streamable HTTP endpoint)",
        "servers.remote.url: not a URL",
        "servers.remote.shared: must be a boolean (true or false)",
    )
    with pytest.raises(ConfigError) as info:
        parse(text)
    assert str(info.value) == "\n".join(info.value.problems)
    assert info.value.path is None


def test_parse_config_reads_only_the_environ_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """parse_config is pure: a variable in os.environ but not in `environ` counts as unset."""
    monkeypatch.setenv("TOOLNEXUS_TEST_ONLY_IN_OS", "http://h/")
    text = '[servers.r]\nurl = "${TOOLNEXUS_TEST_ONLY_IN_OS}"\n'
    assert problems_of(text) == ("servers.r.url: environment variable TOOLNEXUS_TEST_ONLY_IN_OS is not set",)


def test_variable_names_are_case_sensitive() -> None:
    """`${K}` is not satisfied by `k`, as in a POSIX shell."""
    text = SERVER + 'env = { K = "${K}" }\n'
    assert problems_of(text, {"k": "v"}) == ("servers.demo.env.K: environment variable K is not set",)


# fmt: off
TOKENS: list[tuple[str, str, dict[str, str], str]] = [
    ("no telegram section", SERVER, {}, TOKEN_REQUIRED),
    ("no token key", _("telegram", 'mode = "polling"'), {}, TOKEN_REQUIRED),
    ("unset variable", _("telegram", 'token = "${TELEGRAM_BOT_TOKEN}"'), {},
     "telegram.token: environment variable TELEGRAM_BOT_TOKEN is not set"),
    ("empty variable", _("telegram", 'token = "${TELEGRAM_BOT_TOKEN}"'), {"TELEGRAM_BOT_TOKEN": ""},
     "telegram.token: must not be empty"),
    ("empty default", _("telegram", 'token = "${TELEGRAM_BOT_TOKEN:-}"'), {},
     "telegram.token: must not be empty"),
    ("not a string", _("telegram", "token = 123456"), {}, "telegram.token: must be a string"),
    ("bot prefix", _("telegram", 'token = "${T}"'), {"T": "bot" + TOKEN},
     "telegram.token: not a bot token (expected <digits>:<characters>, as @BotFather gives it)"),
    ("trailing newline", _("telegram", 'token = "${T}"'), {"T": TOKEN + "\n"},
     "telegram.token: not a bot token (expected <digits>:<characters>, as @BotFather gives it)"),
]
# fmt: on


@pytest.mark.parametrize(("text", "env", "line"), [t[1:] for t in TOKENS], ids=[t[0] for t in TOKENS])
def test_a_missing_or_bad_token_only_fails_require_telegram(
    text: str, env: dict[str, str], line: str
) -> None:
    """Without a usable token the config parses (for console and check); require_telegram says why."""
    config = parse(text, env)
    assert config.telegram.token is None
    with pytest.raises(ConfigError) as info:
        config.require_telegram()
    assert info.value.problems == (line,)
    assert TOKEN not in str(info.value)


def test_require_telegram_returns_the_token_from_the_environment() -> None:
    """`${TELEGRAM_BOT_TOKEN}` is read from environ into a Secret that `.get()` reveals."""
    config = parse(_("telegram", 'token = "${TELEGRAM_BOT_TOKEN}"'), {"TELEGRAM_BOT_TOKEN": TOKEN})
    token = config.require_telegram()
    assert token == Secret(TOKEN)
    assert token.get() == TOKEN
    assert config.telegram.token_problem is None


def test_secrets_never_appear_in_repr_or_str() -> None:
    """The token, the webhook secret, header values and server env values are masked in every repr."""
    secrets = {
        "T": TOKEN,
        "WH": "webhook-secret-value",
        "RT": "remote-bearer-value",
        "K": "env-api-key-value",
    }
    text = """
        [telegram]
        token = "${T}"
        webhook_secret = "${WH}"
        [servers.remote]
        url = "https://h/mcp"
        headers = { Authorization = "Bearer ${RT}" }
        [servers.local]
        command = "srv"
        env = { API_KEY = "${K}" }
    """
    config = parse(text, secrets)
    shown = repr(config) + str(config) + repr(config.servers) + f"{config.telegram.token}"
    for value in secrets.values():
        assert value not in shown
    assert repr(Secret(TOKEN)) == "Secret('**********')"
    assert str(Secret(TOKEN)) == "**********"
    assert "headers={'Authorization': '**********'}" in repr(config.servers[0])
    assert "env={'API_KEY': '**********'}" in repr(config.servers[1])
    assert config.servers[0].headers["Authorization"].get() == "Bearer remote-bearer-value"
    assert config.servers[1].env["API_KEY"] == "env-api-key-value"


def test_problem_lines_never_quote_the_bad_value() -> None:
    """A bad value may be a secret pasted in the wrong place, so problems name the key, not the value."""
    problems = problems_of(_("telegram", f'api_base_url = "{TOKEN}"\n[web]\nport = "{TOKEN}"'))
    assert problems == ("telegram.api_base_url: not a URL", f"web.port: {PORT_RULE}")


def test_server_config_built_by_hand_checks_its_transport_and_masks_headers() -> None:
    """ServerConfig needs exactly one of command/url; plain header strings become Secrets."""
    with pytest.raises(ValueError, match="either command"):
        ServerConfig(name="x")
    with pytest.raises(ValueError, match="either command or url"):
        ServerConfig(name="x", command="a", url="http://h/")
    server = ServerConfig(name="r", url="http://h/", headers={"X-Key": "v"})  # type: ignore[dict-item]
    assert server.headers == {"X-Key": Secret("v")}
    assert server.reveal_headers() == {"X-Key": "v"}
    assert server.transport is Transport.HTTP


def test_config_built_by_hand_rejects_duplicate_names_and_looks_servers_up() -> None:
    """Config keeps servers as a tuple with unique names; `server(name)` finds one."""
    demo = ServerConfig(name="demo", command="x")
    with pytest.raises(ValueError, match="unique"):
        Config(servers=(demo, demo))
    config = Config(servers=[demo])  # type: ignore[arg-type]
    assert config.servers == (demo,)
    assert config.server("demo") is demo
    assert config.server("other") is None


def test_config_values_are_frozen() -> None:
    """Config and its parts cannot be changed after parsing."""
    config = parse(SERVER + 'env = { A = "b" }\n')
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        config.sessions = SessionsConfig()
    with pytest.raises(TypeError):
        config.servers[0].env["A"] = "c"  # type: ignore[index]


# -- the file loader ---------------------------------------------------------------------------------------


def test_load_config_reads_a_file_with_the_given_environ(tmp_path: Path) -> None:
    """load_config parses TOML from a path and expands variables from `environ`."""
    path = tmp_path / "bot.toml"
    path.write_text('[servers.r]\nurl = "${U}"\n', encoding="utf-8")
    assert load_config(path, {"U": "http://h/"}).servers == (ServerConfig(name="r", url="http://h/"),)


def test_load_config_reports_content_problems_with_the_path(tmp_path: Path) -> None:
    """Problems found by parse_config keep their key lines; the error carries the file path."""
    path = tmp_path / "bot.toml"
    path.write_text('[servers.r]\nurl = "nope"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.problems == ("servers.r.url: not a URL",)
    assert info.value.path == str(path)


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"a = 1\n[x]\n[x]\n", ":3:3: invalid TOML: Cannot declare ('x',) twice"),
        (b"[servers.demo]\ncommand = \n", ":2:11: invalid TOML: Invalid value"),
        (b"[servers.demo]\nargs = [1,\n", ": invalid TOML: Invalid value (at end of document)"),
        (b'title = "\xff"\n', ": not UTF-8 text"),
    ],
    ids=["duplicate table", "missing value", "unclosed list", "not utf-8"],
)
def test_load_config_reports_unreadable_toml_with_path_and_line(
    tmp_path: Path, content: bytes, line: str
) -> None:
    """A TOML syntax error is one problem line: `path:line:column: invalid TOML: ...`."""
    path = tmp_path / "bad.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.problems == (f"{path}{line}",)
    assert info.value.path == str(path)


def test_load_config_reports_a_missing_file(tmp_path: Path) -> None:
    """A missing file is a ConfigError naming the path, not a FileNotFoundError."""
    path = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path, {})
    assert info.value.problems == (f"{path}: no such file",)


def test_load_config_reports_a_directory_as_unreadable(tmp_path: Path) -> None:
    """Any other OSError is a ConfigError naming the path."""
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    assert info.value.problems[0].startswith(f"{tmp_path}: cannot read it (")


# -- config.example.toml -----------------------------------------------------------------------------------


def test_the_example_config_runs_the_demo_server_with_token_and_users_from_env() -> None:
    """config.example.toml works as is: the demo server on this interpreter, token and users from env."""
    config = load_config(EXAMPLE, {"TELEGRAM_BOT_TOKEN": TOKEN, "TOOLNEXUS_ALLOWED_USERS": "42, 43"})
    assert config.require_telegram().get() == TOKEN
    assert config.telegram.allowed_users == {42, 43}
    assert config.telegram.allow_everyone is False
    [demo] = config.servers
    assert (demo.name, demo.command, demo.args) == ("demo", sys.executable, ("-m", "bot.demo_server"))
    assert TOKEN not in repr(config)


def test_the_example_config_parses_without_any_environment() -> None:
    """`check` and `console` can use the example with no Telegram variables set; only the bot needs them."""
    config = load_config(EXAMPLE, {})
    assert config.telegram.allowed_users == frozenset()
    with pytest.raises(ConfigError) as info:
        config.require_telegram()
    assert info.value.problems == ("telegram.token: environment variable TELEGRAM_BOT_TOKEN is not set",)


def test_the_example_config_shows_every_option_and_its_commented_ones_are_valid() -> None:
    """Uncommenting every `# key = ...` line of the example gives a valid config that sets every option."""
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    uncommented = "\n".join(re.sub(r"^# (?=\[|[a-z_]+ = )", "", line) for line in lines)
    data = tomllib.loads(uncommented)
    env = {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_WEBHOOK_SECRET": "s",
        "REMOTE_TOKEN": "t",
        "TOOLNEXUS_SECRET_KEY": "ZE684GUyyWUEIP44cl3mB7pQEbd5iodm_LILuxrMOH4=",
        "OAUTH_CLIENT_SECRET": "c",
    }
    config = parse_config(data, env)
    assert [s.transport for s in config.servers] == ["stdio", "http", "http"]

    def keys(cls: type[pydantic.BaseModel]) -> set[str]:
        return set(cls.model_fields)

    assert set(data) == {
        "telegram",
        "elicitation",
        "sessions",
        "servers",
        "web",
        "miniapp",
        "storage",
        "audit",
        "limits",
        "approvals",
        "run",
        "gateway",
    }
    assert set(data["run"]) == keys(RunConfig)
    assert set(data["gateway"]) == keys(GatewayConfig)
    assert set(data["approvals"][0]) == keys(ApprovalRule) - {"index"}
    assert set(data["limits"]) == keys(LimitsConfig)
    assert set(data["telegram"]) == keys(TelegramConfig) - {"token_problem"}
    assert set(data["web"]) == keys(WebConfig)
    assert set(data["miniapp"]) == keys(MiniAppConfig)
    assert set(data["elicitation"]) == keys(ElicitationConfig)
    assert set(data["sessions"]) == keys(SessionsConfig)
    assert set(data["storage"]) == keys(StorageConfig)
    assert set(data["audit"]) == keys(AuditConfig)
    assert set(data["servers"]["demo"]) | set(data["servers"]["remote"]) == keys(ServerConfig) - {
        "name",
        "oauth",
    }
    assert set(data["servers"]["signin"]) - {"url"} == {"auth"} | keys(OAuthClient)


_TABLES: dict[str, type[pydantic.BaseModel]] = {
    "telegram": TelegramConfig,
    "web": WebConfig,
    "miniapp": MiniAppConfig,
    "storage": StorageConfig,
    "audit": AuditConfig,
    "elicitation": ElicitationConfig,
    "run": RunConfig,
    "sessions": SessionsConfig,
    "limits": LimitsConfig,
    "servers": ServerConfig,
    "approvals": ApprovalRule,
    "gateway": GatewayConfig,
}
# What the example sets to show a value rather than to state the default (each is documented as an example).
_EXAMPLES = {
    *(("telegram", key) for key in ("token", "allowed_users", "admins", "webhook_secret")),
    ("web", "public_url"),
    ("storage", "url"),
    ("storage", "secret_key"),
    *(("servers.demo", key) for key in ("command", "args", "cwd", "title", "shared")),
    *(("servers.remote", key) for key in ("url", "headers", "title")),
    *(
        ("servers.signin", key)
        for key in (
            "url",
            "auth",
            "client_id",
            "client_secret",
            "token_endpoint_auth_method",
            "client_metadata_url",
            "scopes",
        )
    ),
    *(
        ("approvals", key)
        for key in ("servers", "tools", "approvers", "quorum", "chat", "second_factor", "hooks")
    ),
    *(("approvals", key) for key in ("remind_after_s", "escalate_after_s", "escalate_to")),
}


def _default(table: str, key: str) -> Any:
    model = _TABLES[table.partition(".")[0]]
    if model is LimitsConfig:  # the example shows the defaults under allow_everyone, as it says
        return getattr(LimitsConfig.public(), key)
    if model is ServerConfig and key in OAuthClient.model_fields:
        return OAuthClient.model_fields[key].get_default(call_default_factory=True)
    if model is ServerConfig and key == "auth":
        return "none"
    return model.model_fields[key].get_default(call_default_factory=True)


def _same(documented: Any, default: Any) -> bool:
    if isinstance(default, tuple | frozenset | set) and isinstance(documented, list):
        return type(default)(documented) == default
    if isinstance(default, Mapping) and isinstance(documented, dict):
        return dict(default) == documented
    return bool(documented == default)


def test_every_key_the_example_documents_is_in_the_model_with_its_documented_default() -> None:
    """Each `key = value` of config.example.toml, live or commented out, is a key of its table's model, and
    its value is the model's default (unless it is one of the few values shown as an example); a
    `(default X)` in a line's comment is the model's default too."""
    table, checked = "", 0
    for line in EXAMPLE.read_text(encoding="utf-8").splitlines():
        header = re.fullmatch(r"(?:# )?\[\[?([a-z_.]+)\]\]?\s*(#.*)?", line)
        setting = re.fullmatch(r"(?:# )?([a-z_]+) = (.*)", line)
        if header:
            table = header[1]
            continue
        if not setting:
            continue
        key, rest = setting[1], setting[2]
        model = _TABLES[table.partition(".")[0]]
        assert key in model.toml_keys(), f"[{table}] {key}: not a key of {model.__name__}"  # type: ignore[attr-defined]
        documented = tomllib.loads(f"v = {rest}")["v"]
        if (table, key) not in _EXAMPLES:
            assert _same(documented, _default(table, key)), (
                f"[{table}] {key} = {rest}: not the model's default"
            )
        stated = re.search(r"\(default ([^)]+)\)", rest.partition("#")[2])
        if stated:
            assert _same(tomllib.loads(f"v = {stated[1]}")["v"], _default(table, key)), (
                f"[{table}] {key}: {stated[0]}"
            )
        checked += 1
    assert checked > 50

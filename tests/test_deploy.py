"""The operations guide's files (deploy/): the compose file runs PostgreSQL, the bot and Caddy with every
secret from the env file, and the production config it mounts is one the bot accepts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bot.config import TelegramMode, load_config

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)")


def _env_names() -> set[str]:
    lines = (DEPLOY / "env.example").read_text().splitlines()
    return {line.split("=", 1)[0] for line in lines if line and not line.startswith("#")}


def test_compose_runs_the_database_the_bot_and_caddy_with_their_volumes() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "bot", "caddy"}
    bot = services["bot"]
    assert bot["depends_on"]["db"]["condition"] == "service_healthy" and bot["init"] is True
    assert "./production.toml:/data/config.toml:ro" in bot["volumes"]
    assert bot["environment"]["TOOLNEXUS_CONFIG"] == "/data/config.toml"
    assert "80:80" in services["caddy"]["ports"] and "443:443" in services["caddy"]["ports"]
    assert "ports" not in bot  # only Caddy reaches the bot
    named = {
        v.split(":")[0] for s in services.values() for v in s.get("volumes", []) if not v.startswith(".")
    }
    assert named == set(compose["volumes"])
    for mounted in (
        v.split(":")[0] for s in services.values() for v in s.get("volumes", []) if v.startswith(".")
    ):
        assert (DEPLOY / mounted).is_file(), mounted


def test_every_secret_the_deploy_reads_is_in_the_env_file() -> None:
    used = set(VAR.findall((DEPLOY / "compose.yaml").read_text()))
    used |= set(VAR.findall((DEPLOY / "production.toml").read_text()))
    assert used <= _env_names(), used - _env_names()
    bot_env = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["bot"]["environment"]
    needed = set(VAR.findall((DEPLOY / "production.toml").read_text()))
    assert needed <= set(bot_env), needed - set(bot_env)


def _environ() -> dict[str, str]:
    return {
        "TELEGRAM_BOT_TOKEN": "123456:" + "A" * 35,
        "TOOLNEXUS_ALLOWED_USERS": "1001,1002",
        "TOOLNEXUS_SECRET_KEY": "A" * 43 + "=",
        "TELEGRAM_WEBHOOK_SECRET": "s" * 32,
        "PGPASSWORD": "pw",
    }


def test_every_stop_timeout_leaves_the_drain_its_time() -> None:
    """SIGTERM drains for `[run] drain_s`: compose and the systemd unit wait drain_s + 10 s before SIGKILL."""
    drain_s = load_config(DEPLOY / "production.toml", _environ()).run.drain_s
    bot = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["bot"]
    assert bot["stop_grace_period"] == f"{drain_s + 10:g}s"
    unit = (DEPLOY / "toolnexus-bot.service").read_text()
    assert f"TimeoutStopSec={drain_s + 10:g}" in unit.splitlines()


def test_the_production_config_is_one_the_bot_accepts() -> None:
    environ = {
        "TELEGRAM_BOT_TOKEN": "123456:" + "A" * 35,
        "TOOLNEXUS_ALLOWED_USERS": "1001,1002",
        "TOOLNEXUS_SECRET_KEY": "A" * 43 + "=",
        "TELEGRAM_WEBHOOK_SECRET": "s" * 32,
        "PGPASSWORD": "pw",
    }
    config = load_config(DEPLOY / "production.toml", environ)
    config.require_telegram()
    assert config.telegram.mode is TelegramMode.WEBHOOK
    assert config.storage is not None and config.storage.url.get() == "postgresql://bot:pw@db/toolnexus"
    assert config.web is not None and config.web.public_url == "https://bot.example.com"


FLEET = DEPLOY / "fleet"
SECRET_NAMES = re.compile(r"TOKEN|SECRET|PASSWORD|KEY", re.IGNORECASE)


def test_the_fleet_compose_runs_the_database_two_bots_with_one_config_and_caddy_in_front_of_both() -> None:
    """deploy/fleet: two bot services alike but for their own /data, only Caddy published, Caddy balancing over
    both with the health check a drain answers 503 to, every mounted file present, every named volume declared."""
    compose = yaml.safe_load((FLEET / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"db", "bot1", "bot2", "caddy"}
    one, two = services["bot1"], services["bot2"]
    assert {k: v for k, v in one.items() if k != "volumes"} == {
        k: v for k, v in two.items() if k != "volumes"
    }
    drain_s = load_config(DEPLOY / "production.toml", _environ()).run.drain_s
    for bot in (one, two):
        assert bot["depends_on"]["db"]["condition"] == "service_healthy" and bot["init"] is True
        assert "../production.toml:/data/config.toml:ro" in bot["volumes"]
        assert bot["environment"]["TOOLNEXUS_CONFIG"] == "/data/config.toml"
        assert bot["stop_grace_period"] == f"{drain_s + 10:g}s"
        assert "ports" not in bot  # only Caddy reaches the bots
    assert "80:80" in services["caddy"]["ports"] and "443:443" in services["caddy"]["ports"]
    named = {
        v.split(":")[0] for s in services.values() for v in s.get("volumes", []) if not v.startswith(".")
    }
    assert named == set(compose["volumes"])
    for mounted in (
        v.split(":")[0] for s in services.values() for v in s.get("volumes", []) if v.startswith(".")
    ):
        assert (FLEET / mounted).is_file(), mounted
    caddy = (FLEET / "Caddyfile").read_text()
    assert "reverse_proxy bot1:8080 bot2:8080" in caddy and "health_uri /healthz" in caddy
    assert "respond /metrics 404" in caddy


def test_the_fleet_compose_reads_every_secret_from_the_env_file_and_holds_none() -> None:
    """No secret written into the fleet's compose file: every value of a secret's name is read from deploy/.env,
    and every variable it reads is in env.example."""
    text = (FLEET / "compose.yaml").read_text()
    assert set(VAR.findall(text)) <= _env_names(), set(VAR.findall(text)) - _env_names()
    services = yaml.safe_load(text)["services"]
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAMES.search(key):
                assert VAR.fullmatch(str(value).split(":", 1)[0]), (name, key)
    needed = set(VAR.findall((DEPLOY / "production.toml").read_text()))
    for bot in ("bot1", "bot2"):
        assert needed <= set(services[bot]["environment"]), needed - set(services[bot]["environment"])


def _unit(key: str) -> str:
    """One `Key=value` of the systemd unit."""
    lines = (DEPLOY / "toolnexus-bot.service").read_text().splitlines()
    (value,) = [line.split("=", 1)[1] for line in lines if line.startswith(f"{key}=")]
    return value


def test_the_guide_runs_audit_and_db_upgrade_by_hand_where_the_unit_keeps_its_database() -> None:
    """Run from a shell, the commands have neither the unit's $STATE_DIRECTORY nor its secrets: the guide's
    command lines give them the unit's user, environment file, state directory, program and config (and
    compose's run the service's own container, whose config names its database)."""
    guide = (DEPLOY / "README.md").read_text()
    program, config_flag, config = _unit("ExecStart").split()
    assert config_flag == "--config"
    for command in ("audit --verify", "db upgrade"):
        systemd = (
            f"sudo systemd-run --pipe --wait --quiet -p User={_unit('User')} "
            f"-p EnvironmentFile={_unit('EnvironmentFile')} -p StateDirectory={_unit('StateDirectory')} "
            f"{program} {command} --config {config}"
        )
        assert f"  {systemd}" in guide.splitlines(), command
        compose = f"docker compose -f deploy/compose.yaml --env-file deploy/.env run --rm bot {command}"
        assert f"  {compose}" in guide.splitlines(), command
    environ = _environ()
    storage = load_config(DEPLOY / "production.toml", environ).storage
    assert storage is not None and storage.url.get() == "postgresql://bot:pw@db/toolnexus"


def test_the_nginx_snippet_passes_the_host_the_gateway_checks() -> None:
    """The gateway's DNS-rebinding check reads Host: nginx must pass the public one on."""
    assert "proxy_set_header Host $host;" in (DEPLOY / "README.md").read_text()

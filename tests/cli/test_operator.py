"""The operator's first runs of the installed `toolnexus-bot` (issue 33): where the database goes, what
`check` validates, read-only commands, pipes, `TOOLNEXUS_CONFIG`, the image's files. Real processes, but for
a config error (refused before anything starts)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bot.config import Secret, StorageConfig, load_config
from bot.store import AuditEvent, open_store
from tests.cli.test_cli import main_in_process
from tests.zygote import run_bot_text

REPO = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).with_name("toolnexus-bot")
TOKEN = "123456:" + "A" * 35


# Root may write anywhere: as root, the command runs without the capabilities that let it (as a service's
# unprivileged user would); as anyone else, file modes are enough.
UNPRIVILEGED = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.getuid() == 0 else []


def run(
    *args: str, env: dict[str, str] | None = None, stdin: str = "", unprivileged: bool = False
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TELEGRAM_", "TOOLNEXUS_", "STATE_"))}
    if not unprivileged:
        return run_bot_text(
            [str(EXE), *args], input=stdin, cwd=REPO, env={**environ, **(env or {})}, timeout=60
        )
    return subprocess.run(
        [*UNPRIVILEGED, str(EXE), *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**environ, **(env or {})},
        timeout=60,
    )


def _read_only_config(root: Path) -> Path:
    """The README's systemd layout: a config in a folder the service's user may read but not write."""
    etc = root / "etc"
    etc.mkdir()
    config = etc / "config.toml"
    config.write_text(
        f'[telegram]\ntoken = "{TOKEN}"\nallowed_users = [1]\n[servers.demo]\ncommand = "python"\n'
    )
    config.chmod(0o644)
    etc.chmod(0o555)
    return config


def test_without_a_url_the_database_goes_to_the_state_directory(tmp_path: Path) -> None:
    """Under systemd (`StateDirectory=` sets `$STATE_DIRECTORY`) and in the image (which sets it to /data)
    the default SQLite file is there; otherwise beside the config."""
    config = tmp_path / "c.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    state = tmp_path / "state"
    under_systemd = load_config(config, {"STATE_DIRECTORY": f"{state}:/elsewhere"})
    assert under_systemd.storage is not None
    assert under_systemd.storage.url.get() == f"sqlite:///{state / 'toolnexus.db'}"
    plain = load_config(config, {})
    assert plain.storage is not None and plain.storage.url.get() == f"sqlite:///{tmp_path / 'toolnexus.db'}"


def test_the_systemd_layout_keeps_its_database_in_the_state_directory(tmp_path: Path) -> None:
    """Unprivileged, config in a read-only folder, `$STATE_DIRECTORY` writable: the database is
    made there (what the unit's `StateDirectory=` gives the service), not beside the config."""
    config = _read_only_config(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    done = run(
        "db", "upgrade", "--config", str(config), env={"STATE_DIRECTORY": str(state)}, unprivileged=True
    )
    assert done.returncode == 0, done.stderr
    assert (state / "toolnexus.db").exists()
    assert not (config.parent / "toolnexus.db").exists()


def test_an_unwritable_database_folder_is_one_line_naming_it(tmp_path: Path) -> None:
    """No state directory and a config folder the bot may not write: one `error:` line that names the
    folder (not SQLAlchemy's two lines, not "check that the database is running"), exit 1."""
    config = _read_only_config(tmp_path)
    done = run("--config", str(config), unprivileged=True)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and f"folder {config.parent} is not writable" in lines[0]
    assert "sqlalche.me" not in lines[0] and "running" not in lines[0]


def test_check_fails_on_an_unwritable_database_folder_with_the_line_run_prints(tmp_path: Path) -> None:
    """`check` promises what `run` would refuse: a database folder the bot may not write is `run`'s one
    `error:` line and exit 1, before any server is probed, and nothing is created."""
    config = _read_only_config(tmp_path)
    ran = run("--config", str(config), unprivileged=True)
    checked = run("check", "--config", str(config), unprivileged=True)
    assert checked.returncode == ran.returncode == 1, checked.stdout
    assert checked.stderr.strip() == ran.stderr.strip()
    assert f"folder {config.parent} is not writable" in checked.stderr
    assert "demo:" not in checked.stdout
    assert sorted(p.name for p in config.parent.iterdir()) == ["config.toml"]


def test_check_rejects_the_token_run_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`check` validates through the same code as `run`: a token `run` refuses (exit 2) fails `check` too.
    In process: the config is refused before anything starts."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[telegram]\ntoken = "not-a-token"\n[servers.demo]\ncommand = "python"\nargs = ["-m", "bot.demo_server"]\n'
    )
    assert main_in_process(monkeypatch, capsys, "--config", str(config))[0] == 2
    code, stdout, stderr = main_in_process(monkeypatch, capsys, "check", "--config", str(config))
    assert code == 2, stdout
    assert "config error: telegram.token" in stderr


@pytest.mark.parametrize("args", [("--verify",), ()], ids=["verify", "export"])
def test_audit_where_there_is_no_database_is_an_error_and_creates_none(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """A wrong path must not look like a clean audit: exit 1, the missing file named, nothing created."""
    config = tmp_path / "c.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    done = run("audit", "--config", str(config), *args)
    assert done.returncode == 1, done.stdout
    assert "no database file at" in done.stderr and str(tmp_path / "toolnexus.db") in done.stderr
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


def test_audit_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    """`audit | head -1`: the reader goes away after one line; no "Broken pipe", exit 0."""
    db = tmp_path / "toolnexus.db"

    async def fill() -> None:
        async with open_store(StorageConfig(url=Secret(f"sqlite:///{db}"))) as store:
            for n in range(60):  # about 300 KB of output: far more than a pipe holds
                await store.audit.append(AuditEvent.CALL_STARTED, user_id=n, detail={"pad": "x" * 5000})

    anyio.run(fill)
    config = tmp_path / "c.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLNEXUS_", "STATE_"))}
    with subprocess.Popen(
        [str(EXE), "audit", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
    assert json.loads(first)["seq"] == 1
    assert err == "" and code == 0


def test_toolnexus_config_stands_in_for_the_option_in_every_subcommand(tmp_path: Path) -> None:
    """The image sets `TOOLNEXUS_CONFIG`; `check`, `db upgrade`, `audit`, `console` and `run` read it."""
    config = tmp_path / "c.toml"
    config.write_text(
        f'[telegram]\ntoken = "{TOKEN}"\napi_base_url = "http://127.0.0.1:9/bot"\n'
        '[servers.envdemo]\ncommand = "python"\nargs = ["-m", "bot.demo_server"]\n'
    )
    env = {"TOOLNEXUS_CONFIG": str(config)}
    checked = run("check", env=env)
    assert checked.returncode == 0, checked.stderr
    assert "envdemo: ok" in checked.stdout
    upgraded = run("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert str(tmp_path / "toolnexus.db") in upgraded.stdout
    assert run("audit", "--verify", env=env).stdout.startswith("audit chain ok: 0 rows")
    console = run("console", env=env, stdin="/servers\n")
    assert "envdemo (stdio): ok" in console.stdout, console.stderr
    started = run(env=env)  # `run`: the config is read, then Telegram (nobody on port 9) refuses
    assert started.returncode == 1 and "127.0.0.1 refused the connection" in started.stderr


def test_a_date_audit_cannot_read_says_which_forms_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--since yesterday` names the value and the forms that work (not "invalid parse_since value").
    In process: the option is refused before anything starts."""
    code, _, stderr = main_in_process(
        monkeypatch, capsys, "audit", "--config", str(tmp_path / "c.toml"), "--since", "yesterday"
    )
    assert code == 2
    assert "parse_since" not in stderr
    assert "'yesterday' is not a date" in stderr and "2026-12-01T08:30" in stderr


def test_the_healthcheck_names_where_the_image_puts_it() -> None:
    """Its docstring says how the image runs it: the path the Dockerfile copies it to."""
    dockerfile = (REPO / "Dockerfile").read_text()
    copied = re.search(r"COPY deploy/healthcheck\.py (\S+)", dockerfile)
    assert copied is not None
    health = (REPO / "deploy" / "healthcheck.py").read_text()
    doc = health.split('"""')[1]
    assert f"python {copied[1]}" in doc
    assert re.findall(r"python (/\S+\.py)", doc) == [copied[1]]

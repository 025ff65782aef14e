"""Operations: `--version`, the LICENSE, the Dockerfile, the container health check and the systemd unit.

The image cannot be built where no Docker daemon runs (it is then skipped), so the Dockerfile is also read
for what a deployment relies on; the unit is checked by `systemd-analyze verify` when the machine has it.
"""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXE = Path(sys.executable).with_name("toolnexus-bot")


def test_version_prints_the_installed_version() -> None:
    """`toolnexus-bot --version` answers with the distribution's version and exits 0."""
    done = subprocess.run([str(EXE), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0
    assert done.stdout.strip() == f"toolnexus-bot {version('toolnexus-bot')}"


def test_the_license_file_is_the_mit_license_pyproject_names() -> None:
    """pyproject says MIT; the LICENSE file holds that text."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "MIT"
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text


def _instructions() -> list[tuple[str, str]]:
    lines = (REPO / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    return [
        (word.upper(), rest.strip())
        for word, _, rest in (line.strip().partition(" ") for line in lines)
        if word and not word.startswith("#")
    ]


def test_the_dockerfile_runs_the_bot_as_a_non_root_user_with_data_on_a_volume() -> None:
    """Slim Python base, every COPY source present, a non-root USER, /data a volume, HEALTHCHECK, the bot as entry point."""
    steps = _instructions()
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM") :]
    assert all(rest.split()[0].startswith("python:3.11-slim") for word, rest in steps if word == "FROM")
    for word, rest in steps:
        if word == "COPY" and not rest.startswith("--from"):
            for source in rest.split()[:-1]:
                assert (REPO / source).exists(), f"COPY {source}: not in the repository"
    users = [rest for word, rest in final if word == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert ("VOLUME", '["/data"]') in final
    assert json.loads(dict(final)["ENTRYPOINT"]) == ["toolnexus-bot"]
    assert "--config" in json.loads(dict(final)["CMD"])
    assert "healthcheck.py" in dict(final)["HEALTHCHECK"]
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and "config.toml" in ignored


def test_the_image_builds_when_a_docker_daemon_is_available() -> None:
    """`docker build` of the repository succeeds (skipped without a daemon)."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True, check=False).returncode:
        pytest.skip("no Docker daemon on this machine")
    done = subprocess.run(
        [docker, "build", "-q", "-t", "toolnexus-bot:test", str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        return None


@pytest.fixture
def health_port() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def _healthcheck(config: Path) -> int:
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "healthcheck.py")],
        env={"TOOLNEXUS_CONFIG": str(config)},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.returncode


def test_the_health_check_passes_without_web_and_asks_healthz_with_it(
    tmp_path: Path, health_port: int
) -> None:
    """No [web]: healthy (polling). With [web]: /healthz on its port decides; nobody listening is unhealthy."""
    config = tmp_path / "config.toml"
    config.write_text('[servers.demo]\ncommand = "python"\n')
    assert _healthcheck(config) == 0
    config.write_text(f'[web]\nport = {health_port}\npublic_url = "https://bot.example.com"\n')
    assert _healthcheck(config) == 0
    with socket.create_server(("127.0.0.1", 0)) as s:
        closed = s.getsockname()[1]
    config.write_text(f"[web]\nport = {closed}\n")
    assert _healthcheck(config) == 1


def test_the_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    """`systemd-analyze verify` finds nothing to say (ExecStart pointed at this venv's command)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = (REPO / "deploy" / "toolnexus-bot.service").read_text()
    assert "ExecStart=/opt/toolnexus-bot/.venv/bin/toolnexus-bot --config " in unit
    local = tmp_path / "toolnexus-bot.service"
    local.write_text(unit.replace("/opt/toolnexus-bot/.venv/bin/toolnexus-bot", str(EXE)))
    done = subprocess.run(
        [analyze, "verify", str(local)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stderr.strip() == "" and done.stdout.strip() == "", done.stderr


def test_the_readme_pipe_example_works_as_written_from_the_readme_venv(tmp_path: Path) -> None:
    """The `printf ... | .venv/bin/toolnexus-bot console` line of the README completes a deploy, as written."""
    readme = (REPO / "README.md").read_text()
    examples = [line for line in readme.split("`") if line.startswith("printf ") and "console" in line]
    assert examples, "the README has no pipe example"
    if not (REPO / ".venv" / "bin" / "toolnexus-bot").exists():
        pytest.skip("no .venv in the repository (the README's install makes one)")
    done = subprocess.run(
        ["sh", "-c", examples[0]],
        cwd=REPO,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),  # the demo server's state (its key file) stays out of the checkout
        },  # nothing of this venv on PATH: the line must name it
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Deployed web to staging" in done.stdout

"""`toolnexus-bot check` (bot/servers/check.py): bounded, parallel, and precise about why a server failed.

Real servers on loopback and real child processes; the guards are `anyio.fail_after` bounds, never timings.
"""

from __future__ import annotations

import os
import signal
import socket
import ssl
import sys
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest

from bot.config import ServerConfig, ServerProtocol
from bot.servers.check import check, probe
from bot.servers.connections import Connection, describe_error
from bot.servers.stdio import TAIL_CLIP, stderr_tail
from tests.cli.test_cli import EXE, REPO, TOKEN_LINE
from tests.fakes.servers.elicit import build_server
from tests.fakes.servers.exits import BAD_CONFIG
from tests.fakes.servers.http import serve_http
from tests.fakes.servers.hung import hung_http
from tests.inprocess import toolnexus
from tests.ports import closed_port
from tests.zygote import open_bot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PY = sys.executable
HUNG = ServerConfig(name="hung", command=PY, args=("-m", "tests.fakes.servers.hung"), cwd=str(REPO))
DEMO = ServerConfig(name="demo", command=PY, args=("-m", "bot.demo_server"), cwd=str(REPO))
# A probe of a hung server takes its timeout plus the MCP client's bounded shutdown of the child.
BOUND = 20


async def test_a_hung_stdio_server_fails_with_no_answer_within_the_timeout() -> None:
    """A stdio server that reads the handshake and never answers is given up on after `timeout_s`."""
    with anyio.fail_after(BOUND):
        result = await probe(HUNG, timeout_s=1)
    assert not result.ok
    assert result.detail == "no answer within 1 s"


async def test_a_hung_http_server_fails_with_no_answer_within_the_timeout() -> None:
    """An HTTP server that accepts the connection and never answers is given up on after `timeout_s`."""
    async with hung_http() as url:
        with anyio.fail_after(BOUND):
            result = await probe(ServerConfig(name="web", url=url), timeout_s=1)
    assert result.line == "web: FAILED: no answer within 1 s"


async def test_servers_are_probed_at_once_so_a_quick_one_is_reported_before_a_hung_one() -> None:
    """The hung server comes first in the config, yet the demo's line is printed first; the summary keeps config order."""
    from bot.config import parse_config

    config = parse_config(
        {
            "servers": {
                "hung": {"command": PY, "args": ["-m", "tests.fakes.servers.hung"], "cwd": str(REPO)},
                "demo": {"command": PY, "args": ["-m", "bot.demo_server"], "cwd": str(REPO)},
            }
        },
        {},
    )
    lines: list[str] = []
    # 10 s: the demo starts well within it, also on a loaded CI machine
    with anyio.fail_after(BOUND):
        status = await check(config, timeout_s=10, write=lines.append)
    assert status == 1
    assert lines[0].startswith("demo: ok (protocol ")
    assert lines[1] == "hung: FAILED: no answer within 10 s"
    assert lines[2] == "1 of 2 ok: hung FAILED, demo ok"


@pytest.mark.parametrize(
    ("server", "expected"),
    [
        (
            ServerConfig(
                name="s", command=PY, args=("-c", "import sys; sys.stderr.write('no db\\n'); sys.exit(3)")
            ),
            "the server process exited with status 3; its stderr ends: no db",
        ),
        (
            ServerConfig(name="s", command=PY, args=("-m", "bot.demo_server"), cwd="/nonexistent/toolnexus"),
            "the working folder does not exist: /nonexistent/toolnexus",
        ),
        (
            ServerConfig(name="s", command="toolnexus-no-such-command"),
            "command not found: toolnexus-no-such-command",
        ),
        (
            ServerConfig(name="s", command=PY, args=("-c", "input(); print('hello', flush=True); input()")),
            "not an MCP server (the answer was not JSON-RPC)",
        ),
        (
            ServerConfig(name="s", url=f"http://127.0.0.1:{closed_port()}/mcp"),
            "connection refused by 127.0.0.1",
        ),
    ],
    ids=["exit-status", "missing-cwd", "missing-command", "not-json-rpc", "refused"],
)
async def test_a_failure_names_what_happened(server: ServerConfig, expected: str) -> None:
    """Exit status with stderr, a missing folder or command, a non-MCP answer, a refused connection."""
    with anyio.fail_after(BOUND):
        result = await probe(server, timeout_s=10)
    assert result.detail == expected


async def test_an_http_404_is_named_with_a_hint_about_the_path() -> None:
    """A real MCP server asked at the wrong path: the status and a hint, not "Server returned an error"."""
    async with serve_http(build_server) as url:
        with anyio.fail_after(BOUND):
            result = await probe(ServerConfig(name="web", url=url.replace("/mcp", "/wrong")), timeout_s=10)
    assert result.detail == "HTTP 404 Not Found: is the path /mcp?"


async def test_https_to_a_plain_http_server_is_a_tls_failure_with_its_reason() -> None:
    """TLS failures say so and why."""
    async with serve_http(build_server) as url:
        with anyio.fail_after(BOUND):
            result = await probe(
                ServerConfig(name="web", url=url.replace("http://", "https://")), timeout_s=10
            )
    assert result.detail == "TLS failure: wrong version number (is it plain http?)"


def test_a_dns_failure_is_named_as_such() -> None:
    """An unknown host name (as httpx raises it) is "DNS name not found", not "cannot connect"."""
    request = httpx2.Request("POST", "https://mcp.nowhere.example/mcp")
    error = httpx2.ConnectError("[Errno -2] Name or service not known", request=request)
    error.__cause__ = socket.gaierror(-2, "Name or service not known")
    assert describe_error(error) == "DNS name not found: mcp.nowhere.example"


def test_a_certificate_failure_gives_the_verification_reason() -> None:
    """A bad certificate names the verification problem."""
    request = httpx2.Request("POST", "https://mcp.example.com/mcp")
    cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
    cause.verify_message = "self-signed certificate"
    error = httpx2.ConnectError("failed", request=request)
    error.__cause__ = cause
    assert describe_error(error) == "TLS failure: self-signed certificate"


def test_each_failure_is_printed_once_without_log_lines(tmp_path: Path) -> None:
    """The CLI prints the FAILED line and the summary; no WARNING line repeats it (its main in process)."""
    config = tmp_path / "c.toml"
    config.write_text(
        TOKEN_LINE + '[servers.gone]\ncommand = "python"\nargs = ["-c", "import sys; sys.exit(4)"]\n'
    )
    done = toolnexus("check", "--config", str(config))
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines.count("gone: FAILED: the server process exited with status 4") == 1
    assert not [line for line in lines if "WARNING" in line]
    assert done.stderr == ""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


async def test_sigterm_during_check_stops_every_server_process(tmp_path: Path) -> None:
    """SIGTERM while a hung server is being probed: check exits 130 and the server process is gone."""
    pid_file = tmp_path / "pid"
    os.mkfifo(pid_file)  # the server writes its pid here once it runs; reading it is the wait
    config = tmp_path / "c.toml"
    config.write_text(
        f'{TOKEN_LINE}[servers.hung]\ncommand = "python"\nargs = ["-m", "tests.fakes.servers.hung", "{pid_file}"]\ncwd = "{REPO}"\n'
    )
    process = await open_bot([str(EXE), "check", "--config", str(config), "--timeout", "600"], cwd=REPO)
    async with process:
        with anyio.fail_after(BOUND):
            server_pid = int(await anyio.to_thread.run_sync(pid_file.read_text))
            assert _alive(server_pid)
            process.send_signal(signal.SIGTERM)
            status = await process.wait()
    assert status == 130
    assert not _alive(server_pid)


def test_a_missing_working_folder_is_named_everywhere_not_as_a_missing_command() -> None:
    """The hub's sessions report a missing `cwd` as such too (the spawn error names the folder)."""
    server = ServerConfig(name="s", command=PY, cwd="/nonexistent/toolnexus")
    error = FileNotFoundError(2, "No such file or directory", "/nonexistent/toolnexus")
    assert describe_error(error, server) == "the working folder does not exist: /nonexistent/toolnexus"
    assert describe_error(FileNotFoundError(2, "No such file", "nosuch")) == "command not found: nosuch"


@pytest.mark.parametrize(
    ("protocol", "says"),
    [
        (ServerProtocol.AUTO, "; shared: calls of different people run concurrently"),
        (ServerProtocol.LEGACY, "; shared, but a 2025 revision cannot say whose call a question belongs to"),
    ],
)
async def test_check_says_what_sharing_means_in_the_era_it_found(protocol: ServerProtocol, says: str) -> None:
    """A shared server's line says whether its calls run concurrently (2026-07-28) or one at a time (2025)."""
    shared = ServerConfig(
        name="demo", command=PY, args=("-m", "bot.demo_server"), cwd=str(REPO), shared=True, protocol=protocol
    )
    with anyio.fail_after(BOUND):
        result = await probe(shared)
    assert result.ok and says in result.line
    with anyio.fail_after(BOUND):
        unshared = await probe(DEMO)
    assert unshared.ok and unshared.line.endswith(" tools)")


async def _nobody_asks(*_: object) -> types.ElicitResult | types.ErrorData:
    raise AssertionError("no question expected")


async def _no_messages(*_: object) -> None:
    return None


async def test_a_session_to_a_missing_command_names_the_command_as_check_does() -> None:
    """The bot's and the console's sessions explain a missing command as `check` does: by its name, not as
    "[Errno 2] No such file or directory" (the spawn error carries no file name)."""
    server = ServerConfig(name="gh", command="toolnexus-no-such-command")
    conn = Connection(server, ("test", "gh"), _nobody_asks, _no_messages)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(conn.own)
    assert conn.client is None
    assert conn.error == "command not found: toolnexus-no-such-command"
    assert (await probe(server)).detail == conn.error


async def test_a_session_to_the_wrong_http_path_is_explained_as_check_explains_it() -> None:
    """The bot's and the console's sessions say what `check` says of an HTTP answer ("HTTP 404 Not Found: is
    the path /mcp?"), not the SDK's bare "Not Found"."""
    async with serve_http(build_server) as url:
        server = ServerConfig(name="web", url=url.replace("/mcp", "/wrong"))
        conn = Connection(server, ("test", "web"), _nobody_asks, _no_messages)
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                await tg.start(conn.own)
            checked = await probe(server, timeout_s=10)
    assert conn.client is None
    assert conn.error == checked.detail == "HTTP 404 Not Found: is the path /mcp?"


async def test_a_session_to_a_server_that_exits_at_start_is_explained_as_check_explains_it() -> None:
    """The bot's and the console's sessions say what `check` says of a stdio server that exits at start: its
    exit status and the end of its stderr, not the SDK's "Connection closed"."""
    server = ServerConfig(
        name="x", command=PY, args=("-m", "tests.fakes.servers.exits", "start"), cwd=str(REPO)
    )
    conn = Connection(server, ("test", "x"), _nobody_asks, _no_messages)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(conn.own)
        checked = await probe(server)
    assert conn.client is None
    assert conn.error == checked.detail
    assert (
        conn.error
        == f"the server process exited with status 3; its stderr ends: starting the exits server | {BAD_CONFIG}"
    )


def test_the_quoted_stderr_is_its_last_lines_with_control_characters_escaped_and_its_end_kept() -> None:
    """Three last non-empty lines, a terminal's escape sequence shown as text, and a long line cut at its start."""
    assert stderr_tail(b"zero\none\n\n\x1b]0;owned\x07two\nthree\n") == "one | \\x1b]0;owned\\x07two | three"
    long = stderr_tail("a" * 1000 + "END")
    assert len(long) == TAIL_CLIP and long.startswith("...") and long.endswith("aEND")


async def test_a_command_that_is_not_executable_is_explained_alike_by_a_session_and_by_check(
    tmp_path: Path,
) -> None:
    """A server command that is a file without the execute bit: `check` and a session both say it cannot be
    run, not how the watcher that starts it exited."""
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    server = ServerConfig(name="x", command=str(script))
    conn = Connection(server, ("test", "x"), _nobody_asks, _no_messages)
    with anyio.fail_after(BOUND):
        async with anyio.create_task_group() as tg:
            await tg.start(conn.own)
        checked = await probe(server)
    assert conn.error == checked.detail == f"cannot run {script}: permission denied"

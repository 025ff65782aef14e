"""The MCP conformance suite (`@modelcontextprotocol/conformance`) as a process: one client scenario in its
interactive mode. Does I/O.

`.ci/run` installs Node.js 22 and the two pinned suite versions from the npm registry into `.cache/conformance`
(`tests/conformance/package.json` and its lock). `node <suite>/dist/index.js client --scenario X -o DIR` starts
the scenario's mock server(s) and prints `Server URL: ...`; the bot is pointed at it and driven through the
chat; SIGINT then makes the suite write `checks.json` (and print where).
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "conformance"
NODE = CACHE / "node_modules" / ".bin" / "node"
VERSIONS = {"0.1.16": "conformance-stable", "0.2.0-alpha.12": "conformance-next"}
"""Suite version -> the alias it is installed under (package.json)."""
COMPILE_CACHE = CACHE / "compile-cache"
"""Node's on-disk cache of compiled code (`NODE_COMPILE_CACHE`, Node 22): the suite's ~100 processes in a run load the
same JavaScript, so all but the first of each version skip compiling it (about a tenth of their CPU). Node checks
each entry and compiles afresh when one is stale or half-written."""
INSTALL = "mkdir -p .cache/conformance && cp tests/conformance/package*.json .cache/conformance/ && npm ci --prefix .cache/conformance"


def missing() -> str | None:
    """Why the suite cannot run here (not installed), or None."""
    wanted = [NODE, *(entry(v) for v in VERSIONS)]
    absent = [str(p.relative_to(ROOT)) for p in wanted if not p.exists()]
    return f"not installed ({', '.join(absent)}); run: {INSTALL}" if absent else None


def entry(version: str) -> Path:
    return CACHE / "node_modules" / VERSIONS[version] / "dist" / "index.js"


@dataclass
class Scenario:
    """One running scenario: its URL (and context, e.g. pre-registered credentials), and its output."""

    name: str
    version: str
    url: str
    process: Process
    out: Path
    lines: list[str] = field(default_factory=list)

    async def finish(self) -> list[dict[str, Any]]:
        """SIGINT: the suite evaluates, writes checks.json; its checks (INFO request logs left out)."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        with anyio.fail_after(20):
            await self.process.wait()
        found = sorted(self.out.rglob("checks.json"))
        assert found, f"{self.name}: no checks.json\n" + "".join(self.lines)
        checks: list[dict[str, Any]] = json.loads(found[-1].read_text())
        return [c for c in checks if c.get("status") != "INFO"]


@asynccontextmanager
async def scenario(name: str, version: str, out: Path) -> AsyncIterator[Scenario]:
    """Start `name` of suite `version` in interactive mode; yields once it printed its server URL."""
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0", "NODE_COMPILE_CACHE": str(COMPILE_CACHE)}
    command = [str(NODE), str(entry(version)), "client", "--scenario", name, "-o", str(out)]
    process = await anyio.open_process(command, env=env, stderr=-2)  # stderr into stdout
    assert process.stdout is not None
    lines: list[str] = []
    url: str | None = None
    stream = TextReceiveStream(process.stdout)
    try:
        with anyio.fail_after(30):
            buffer = ""
            while url is None:
                try:
                    buffer += await stream.receive()
                except anyio.EndOfStream:
                    raise AssertionError(
                        f"{name}: the suite ended before printing its URL\n{buffer}"
                    ) from None
                found = re.search(r"Server URL: (\S+)", buffer)
                url = found.group(1) if found else None
            lines.append(buffer)
        running = Scenario(name, version, url, process, out, lines)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_drain, stream, lines)
            yield running
            tg.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.aclose()


async def _drain(stream: TextReceiveStream, lines: list[str]) -> None:
    """Keep reading the suite's output (a full pipe would stall it); kept for failure messages."""
    try:
        async for text in stream:
            lines.append(text)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        return


SHIM = Path(__file__).resolve().parent / "bearer.mjs"
"""Loaded into the suite (`node --import`) to make it an agent of the gateway: see its header."""


@dataclass
class ServerRun:
    """One server scenario's outcome: its checks (INFO request logs left out) and the suite's output."""

    checks: list[dict[str, Any]]
    output: str


async def server_scenario(
    name: str, version: str, spec: str, url: str, out: Path, *, token: str, prefix: str, force: bool = False
) -> ServerRun:
    """Run server scenario `name` of suite `version` at protocol `spec` against `url` (the gateway), as the agent
    with `token`, the reference tools named `<prefix><tool>` there. The suite's exit status says only whether
    every check passed: the checks are read from the checks.json it writes. `force`: run an extension's scenario
    (the suite runs those only when forced)."""
    await anyio.Path(out).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0", "NODE_COMPILE_CACHE": str(COMPILE_CACHE)}
    env |= {"TNX_TOKEN": token, "TNX_PREFIX": prefix}
    command = [str(NODE), "--import", SHIM.as_uri(), str(entry(version)), "server"]
    command += ["--url", url, "--scenario", name, "--spec-version", spec, "-o", str(out)]
    command += ["--force"] if force else []  # an extension's scenario is on no spec version's timeline
    with anyio.fail_after(90):
        done = await anyio.run_process(command, env=env, check=False, stderr=-2)  # stderr into stdout
    output = done.stdout.decode(errors="replace")
    found = sorted([path async for path in anyio.Path(out).rglob("checks.json")])
    assert found, f"{name}: no checks.json\n{output}"
    checks: list[dict[str, Any]] = json.loads(await found[-1].read_text())
    return ServerRun([c for c in checks if c.get("status") != "INFO"], output)

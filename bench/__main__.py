"""`python -m bench`: run every scenario once, print one table per scenario to stdout, write the figures as JSON.

The JSON goes to bench/results/local/latest.json, which git ignores; `--out bench/results/latest.json` updates
the published figures (a tracked file) on purpose.

Progress goes to stderr. `--quick` runs tiny sizes (a smoke run); `--profile-bot PATH` profiles the bot
process of the bridge scenario with cProfile (read it with `python -m pstats PATH`). The exit status is 1 when
scenario e had a stranger refused, lost or crossed (its table says which and why), else 0.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from bench import demo, fleet, gateway, report, scenarios

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    p.add_argument(
        "--elicitations", type=int, default=1000, help="a. single-choice elicitations (default 1000)"
    )
    p.add_argument("--parallel", type=int, default=8, help="a. people answering in parallel (default 8)")
    p.add_argument(
        "--instructions-per-person",
        type=int,
        default=6,
        help="a. elicitations per person counted under callgrind (default 6; 0 skips the count)",
    )
    p.add_argument("--per-kind", type=int, default=40, help="b. elicitations per form kind (default 40)")
    p.add_argument(
        "--users", type=int, default=1000, help="c. people with a prompt pending at once (default 1000)"
    )
    p.add_argument(
        "--pending-protocol",
        default="legacy",
        help="c. the MCP revision of the pending prompts (default legacy; 2026-07-28 keeps resumable rounds)",
    )
    p.add_argument(
        "--flood", type=int, default=300, help="d. prompts started within one second (default 300)"
    )
    p.add_argument(
        "--strangers",
        type=int,
        default=1000,
        help="e. strangers through the demo deploy with the shipped config (default 1000)",
    )
    p.add_argument(
        "--fleet-prompts",
        type=int,
        default=300,
        help="f. prompts started within one second through 2 instances (default 300)",
    )
    p.add_argument(
        "--takeover-wait",
        type=float,
        default=30.0,
        help="f. seconds the killed instance's people are given after the kill before they count as lost "
        "(default 30)",
    )
    p.add_argument(
        "--agent-calls",
        type=int,
        default=1000,
        help="g. sequential calls by one agent through the gateway, and as many straight to the server "
        "(default 1000)",
    )
    p.add_argument("--agents", type=int, default=100, help="g. agents calling at once (default 100)")
    p.add_argument(
        "--gateway-instructions",
        type=int,
        default=24,
        help="g. agent calls (and chat /calls) counted under callgrind (default 24; 0 skips the count)",
    )
    p.add_argument(
        "--protocols", default="legacy,2026-07-28", help="a, g. MCP revisions to measure (comma-separated)"
    )
    p.add_argument(
        "--clients",
        default="aiohttp,httpx",
        help="a. Bot API clients under the bot to compare, the shipped one first (default aiohttp,httpx)",
    )
    p.add_argument("--only", default="abcdefg", help="which scenarios to run (default abcdefg)")
    p.add_argument(
        "--profile-bot",
        metavar="PATH",
        type=Path,
        help="cProfile the bot's measured phases (a: PATH, c: PATH.c, g: PATH.g, the agent's calls in the "
        "first revision); its figures are then inflated",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=RESULTS / "local" / "latest.json",
        help="JSON file to write (default bench/results/local/latest.json, which git ignores; "
        "--out bench/results/latest.json updates the published figures)",
    )
    return p


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.quick:
        args.elicitations, args.parallel, args.per_kind, args.users, args.flood = 20, 2, 4, 10, 10
        args.strangers, args.fleet_prompts, args.takeover_wait = 10, 10, 5.0
        args.instructions_per_person = 1
        args.agent_calls, args.agents, args.gateway_instructions = 20, 5, 2
    results: dict[str, Any] = {}
    if "a" in args.only:
        protocols, (shipped, *others) = args.protocols.split(","), args.clients.split(",")
        results["bridge"] = []
        for i, protocol in enumerate(protocols):
            profile = args.profile_bot if i == 0 else None
            results["bridge"].append(
                await scenarios.bridge_cost(
                    args.elicitations, args.parallel, protocol, profile=profile, client=shipped
                )
            )
        # The other clients' CPU on the first revision only: CPU ms drift, the instruction counts compare.
        results["bridge_other_clients"] = [
            await scenarios.bridge_cost(args.elicitations, args.parallel, protocols[0], client=c, bare=False)
            for c in others
        ]
        results["instructions"] = []
        results["bare_instructions"] = []
        for protocol in protocols:
            if args.instructions_per_person < 1:
                break
            for client in (shipped, *others):
                counted = await scenarios.bridge_instructions(
                    args.instructions_per_person, args.parallel, protocol, client
                )
                if counted is not None:
                    results["instructions"].append(counted)
            bare = await scenarios.bare_instructions(args.instructions_per_person * args.parallel, protocol)
            if bare is not None:
                results["bare_instructions"].append(bare)
    if "b" in args.only:
        results["calls_per_kind"] = await scenarios.calls_per_kind(args.per_kind, "legacy")
    if "c" in args.only:
        profile = args.profile_bot.with_suffix(".c") if args.profile_bot else None
        results["pending"] = await scenarios.pending_users(args.users, args.pending_protocol, profile=profile)
    if "d" in args.only:
        results["flood"] = await scenarios.flood(args.flood)
    if "e" in args.only:
        results["public_demo"] = await demo.public_demo(args.strangers)
    if "f" in args.only:
        results["fleet"] = [
            await fleet.fleet_flood(args.fleet_prompts),
            await fleet.fleet_flood(args.fleet_prompts, kill=True, takeover_wait_s=args.takeover_wait),
        ]
    if "g" in args.only:
        results.update(await _gateway(args))
    return results


async def _gateway(args: argparse.Namespace) -> dict[str, Any]:
    """g: one agent's calls through the gateway and straight to the server, agents at once, instructions."""
    protocols = args.protocols.split(",")
    results: dict[str, Any] = {
        "gateway": [
            await gateway.gateway_overhead(
                args.agent_calls,
                p,
                profile=args.profile_bot.with_suffix(".g") if args.profile_bot and i == 0 else None,
            )
            for i, p in enumerate(protocols)
        ],
        "gateway_agents": [
            await gateway.agents_at_once(args.agents, p) for p in protocols if args.agents > 0
        ],
        "gateway_instructions": [],
    }
    for protocol in protocols if args.gateway_instructions > 0 else []:
        counted = await gateway.gateway_instructions(args.gateway_instructions, protocol)
        if counted is not None:
            results["gateway_instructions"].append(counted)
    return results


def _commit() -> str:
    """The measured code's commit, marked when the tree had changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
        )
        dirty = subprocess.run(
            # The figures file itself is not the measured code.
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "bot",
                "mapping",
                "bench",
                ":!bench/results",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
    except OSError:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def main() -> int:
    args = _parser().parse_args()
    started = time.perf_counter()
    results = anyio.run(run, args)
    results["meta"] = {
        "seconds": round(time.perf_counter() - started, 1),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "quick": args.quick,
        "commit": _commit(),
        "conditions": {
            "a_b_c": "bot unthrottled (no rate limits; at most 32 Bot API requests in flight), fake without limits",
            "d": "bot as shipped (its flood control), fake enforcing Telegram's limits (RateLimits)",
            "f": "2 bots as shipped (each its own flood control) in webhook mode on one PostgreSQL (started for "
            "the run), behind a round-robin proxy; the fake enforcing Telegram's limits, delivering up to 40 "
            "updates at once; the bench server over streamable HTTP, 2026-07-28",
            "g": "bot unthrottled with [gateway] on and its [storage] (SQLite); agents are mcp.Client over "
            "streamable HTTP, the bench server in its own process",
            "cpu": "utime+stime of the bot process from /proc/<pid>/stat, children excluded",
        },
    }
    print(report.table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    scenarios.progress(f"done in {results['meta']['seconds']} s; figures in {args.out}")
    if "public_demo" in results and demo.went_wrong(results["public_demo"]):
        scenarios.progress("e: not every stranger completed (refused, lost or crossed): exit status 1")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

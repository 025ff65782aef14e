"""The bare `mcp` Client as a process of its own, so callgrind can count it as it counts the bot. Does I/O.

`python -m bench.bare --protocol P --count N --log PATH`: connects to the bench server over stdio, makes one
`pick` call (warm-up), prints `ready`, waits for a line on stdin, makes N `pick` calls (each a single-choice
elicitation answered at once by the callback), prints `done`, waits for another line and exits. The
measuring side switches callgrind's counting on between `ready` and the go line.
"""

from __future__ import annotations

import argparse
import sys

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client import ClientRequestContext


async def _run(protocol: str, count: int, log: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "bench.server", "--log", log])

    async def answer(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"colour": "green"})

    stdin = anyio.wrap_file(sys.stdin)
    client = Client(
        stdio_client(params, errlog=sys.stderr),
        elicitation_callback=answer,
        mode=protocol,
        read_timeout_seconds=None,
    )
    async with client:
        await client.call_tool("pick", {"tag": "bare-warm"})
        print("ready", flush=True)
        await stdin.readline()
        for n in range(count):
            await client.call_tool("pick", {"tag": f"bare-{n}"})
        print("done", flush=True)
        await stdin.readline()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    parser.add_argument("--protocol", default="legacy")
    parser.add_argument("--count", type=int, default=10)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    anyio.run(_run, args.protocol, args.count, args.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())

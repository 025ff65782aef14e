"""The container's HEALTHCHECK: GET /healthz of the bot's [web] endpoint; healthy without one. Does I/O.

Stdlib only (the image runs it as `python /opt/toolnexus/healthcheck.py`). Reads the config named by
`TOOLNEXUS_CONFIG` (default /data/config.toml): without a `[web]` table the bot serves no HTTP (polling
mode) and the check passes; with one it asks http://127.0.0.1:<port>/healthz and passes on a 2xx answer.
"""

from __future__ import annotations

import os
import sys
import tomllib
import urllib.error
import urllib.request

DEFAULT_PORT = 8080


def main() -> int:
    path = os.environ.get("TOOLNEXUS_CONFIG", "/data/config.toml")
    try:
        with open(path, "rb") as f:
            web = tomllib.load(f).get("web")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        print(f"healthcheck: cannot read {path}: {exc}", file=sys.stderr)
        return 1
    if not isinstance(web, dict):
        return 0
    port = web.get("port", DEFAULT_PORT)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return 0 if 200 <= response.status < 300 else 1
    except (urllib.error.URLError, OSError) as exc:
        print(f"healthcheck: {url}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

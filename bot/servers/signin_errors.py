"""The sign-in failure a connect may end with (raised by `bot.servers.oauth`). No I/O.

Apart from `oauth.py` so that `connections.py` can recognise it without importing the OAuth machinery.
"""

from __future__ import annotations

from bot.errors import ToolnexusError

__all__ = ["SignInFailed"]


class SignInFailed(ToolnexusError):
    """The person did not finish signing in; `reason` is one line for them."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"sign-in to {server} {reason}")
        self.server = server
        self.reason = f"sign-in to {server} {reason}"

"""Agent tokens: what the gateway (`bot.web.gateway`) and the `/agents` command need of the store. No I/O here.

A person makes a token in the chat (`/agents new <name>`); an agent (Claude Code, an IDE, a CI job) presents
it to `<public_url>/mcp` and then acts as that person. The token's text is shown once and kept only as its
SHA-256 hash (it is 256 random bits: a plain hash is enough, no salt or slow hash needed).
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "AGENT_NAME",
    "GATEWAY_PATH",
    "TOKEN_PREFIX",
    "AgentBook",
    "AgentToken",
    "TokenEnd",
    "hash_token",
    "new_token_text",
]

GATEWAY_PATH: Final = "/mcp"
"""Where the gateway serves MCP under the public URL (`bot.web.gateway` serves it, `/agents` shows it)."""
TOKEN_PREFIX: Final = "tnx_"
"""Every agent token starts so (secret scanners and people can tell what leaked)."""
AGENT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
"""An agent's name: 1-32 of A-Z a-z 0-9 _ . -, starting with a letter or digit (it goes into shell commands)."""


def new_token_text() -> str:
    """A fresh token: the prefix and 256 random bits."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(text: str) -> str:
    """What the store keeps of a token, and looks it up by."""
    return hashlib.sha256(text.encode()).hexdigest()


class TokenEnd(enum.StrEnum):
    """Why a token no longer works."""

    REVOKED = "revoked"
    EXPIRED = "expired"
    DELETED = "deleted"
    """Its row is gone (deleted by hand in the database)."""


@dataclass(frozen=True, slots=True)
class AgentToken:
    """One agent token as the store keeps it (never its text)."""

    id: int
    user_id: int
    """The person the agent acts as."""
    name: str
    """Unique among the person's live tokens."""
    created: dt.datetime
    expires: dt.datetime | None
    """None: lasts until revoked."""
    last_used: dt.datetime | None
    calls: int
    """Tool calls made with it."""
    revoked: dt.datetime | None = None

    def live(self, now: dt.datetime) -> bool:
        """Not revoked and not expired at `now`."""
        return self.revoked is None and (self.expires is None or now < self.expires)


class AgentBook(Protocol):
    """The store's agent tokens (`bot.store.agents.AgentStore`)."""

    async def create(self, user_id: int, name: str, days: int) -> tuple[AgentToken, str]:
        """A new token for `user_id` named `name`, lasting `days` (0: until revoked); returns it and its text
        (the only time the text exists outside the agent).

        Raises:
            ValueError: the person already has a live token of that name.
        """
        ...

    async def verify(self, text: str) -> AgentToken | None:
        """The live token whose text this is; None when unknown, revoked or expired (read fresh each time, so a
        revoked token is refused at once). A token first found expired here is audited as such, once."""
        ...

    async def used(self, token_id: int) -> None:
        """Count one tool call on the token and set its `last_used`."""
        ...

    async def of(self, user_id: int) -> list[AgentToken]:
        """The person's live tokens, oldest first."""
        ...

    async def revoke(self, user_id: int, name: str) -> bool:
        """Revoke the person's live token `name` (audited as the person's doing); False when there is none."""
        ...

    async def ended(self, ids: Collection[int]) -> dict[int, TokenEnd]:
        """Of the tokens `ids`, those that no longer work, and why (read fresh: a revocation made by any process,
        the command line's too, shows here). A token first found expired here is audited as such, once."""
        ...

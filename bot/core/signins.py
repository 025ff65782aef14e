"""Who keeps the people's OAuth sign-ins: what is kept of each, and the protocol its keeper implements. No I/O.

`bot.servers.oauth` signs people in and asks a `SignInBook` to keep their tokens and client registrations;
`bot.store.tokens.SignInStore` is the one in the database (sealed at rest), handed over by the host that wires
both (`bot.telegram.app`, `bot.console.main`). Token material crosses as the SDK's JSON text, never logged.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Account", "SignInBook", "SignInRelay"]


@dataclass(frozen=True, slots=True)
class Account:
    """A person's sign-in to one server, as `/accounts` shows it (no token material)."""

    server: str
    issuer: str | None
    expires_at: float | None
    """Unix time the access token expires; None when unknown or when no token is held."""
    signed_in: bool
    """Whether tokens are held (a registration alone is not a sign-in)."""


class SignInBook(Protocol):
    """One row per (Telegram user, server): the token response and the client registration (JSON text), the
    issuer and the access token's expiry. A row that cannot be read (a changed key) reads as absent."""

    async def tokens(self, user_id: int, server: str) -> tuple[str, float | None] | None:
        """The token response (JSON) and its expiry (Unix time), or None."""
        ...

    async def client(self, user_id: int, server: str) -> str | None:
        """The client registration (JSON), or None."""
        ...

    async def save_tokens(
        self, user_id: int, server: str, tokens: str, expires_at: float | None, issuer: str | None
    ) -> None: ...

    async def save_client(self, user_id: int, server: str, client: str, issuer: str | None) -> None: ...

    async def forget_tokens(self, user_id: int, server: str) -> None:
        """Drop the tokens (a refresh failed), keeping the client registration."""
        ...

    async def delete(self, user_id: int, server: str) -> bool:
        """Forget the sign-in altogether; False when there was none."""
        ...

    async def accounts(self, user_id: int) -> list[Account]:
        """The person's rows, by server name."""
        ...

    def refreshing(self, user_id: int, server: str) -> AbstractAsyncContextManager[None]:
        """Held around a refresh of the person's tokens for `server` (read, refresh, write): one at a time per
        (user, server), in this process and in every other on the same database. A rotating refresh token
        works once: a second refresh with it would be refused, and the person signed out."""
        ...


class SignInRelay(Protocol):
    """Where a fleet keeps the sign-ins waiting for their browser (`bot.store.fleet_state.PendingSignIns`), so
    a callback landing on another instance finds its sign-in. The PKCE verifier stays in the process whose flow
    waits (the SDK keeps it there); only the state's hash, the person, the server and the expiry are written."""

    async def opened(self, state: str, user_id: int, server: str, expires: float) -> None:
        """A sign-in card is out, waiting for the browser to come back with `state` until `expires` (Unix time).

        Raises:
            StoreUnavailable: the row could not be written (the sign-in still works on this instance).
        """
        ...

    async def closed(self, state: str) -> None:
        """The flow of `state` is over here: forget it.

        Raises:
            StoreUnavailable: the row could not be deleted (it expires anyway).
        """
        ...

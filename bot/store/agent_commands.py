"""The operator's agent tokens: `toolnexus-bot agents list` and `agents revoke --user ID [--name N]`. Does I/O
(database, stdout).

For when a token must go and its person cannot (or may no longer) revoke it in the chat: no SQL needed. The
database is opened as `audit` opens it (never created, not migrated: a missing one is an error); a revocation is
audited as the operator's doing. Output is one line per token: never its text, nor its hash. A running bot
notices a revocation on its next request with the token, and ends the token's calls in flight within about a
second (`bot.web.gateway_guard.WATCH_S`).

Exit status: 0 fine; 1 nothing to revoke, or the database cannot be used.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import Final, TextIO

from sqlalchemy.exc import SQLAlchemyError

from bot.config import Config
from bot.core.agents import AgentToken
from bot.store.agents import AgentStore, Revoker
from bot.store.audit import AuditLog
from bot.store.audit_keys import AuditKeys
from bot.store.engine import DatabaseMissing, display_url, failure_reason, open_engine
from bot.store.errors import StoreUnavailable

__all__ = ["agents_command", "describe"]

_TIME: Final = "%Y-%m-%d %H:%M UTC"


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(_TIME)


def describe(token: AgentToken) -> str:
    """One line about a token for the operator: whose, which, made, used, calls, expiry (never its text)."""
    used = "never used" if token.last_used is None else f"last used {_when(token.last_used)}"
    expiry = "until revoked" if token.expires is None else f"expires {_when(token.expires)}"
    calls = "1 call" if token.calls == 1 else f"{token.calls} calls"
    return f"user {token.user_id}  {token.name}  made {_when(token.created)} · {used} · {calls} · {expiry}"


async def agents_command(
    config: Config,
    action: str,
    *,
    user_id: int | None = None,
    name: str | None = None,
    out: TextIO | None = None,
) -> int:
    """`action` "list": the live tokens (of `user_id`, or everyone's); "revoke": `user_id`'s token `name`, or
    every live one of theirs. `out`: by default the `sys.stdout` of the moment."""
    out = sys.stdout if out is None else out
    assert config.storage is not None  # load_config always sets one
    url = config.storage.url.get()
    secret = config.storage.secret_key
    try:
        engine = await open_engine(url, migrate=False, create=False)
        try:
            log = AuditLog(engine, None if secret is None else AuditKeys(secret.get()))
            store = AgentStore(engine, log=log)
            if action == "list":
                tokens = await store.live(user_id)
                for token in tokens:
                    print(describe(token), file=out)
                if not tokens:
                    print(
                        "no live agent tokens" + ("" if user_id is None else f" of user {user_id}"), file=out
                    )
                return 0
            assert user_id is not None  # argparse requires --user for revoke
            revoked = await store.revoke_tokens(user_id, name, Revoker.OPERATOR)
        finally:
            await engine.dispose()
    except (SQLAlchemyError, OSError, DatabaseMissing, StoreUnavailable) as exc:
        print(f"database {display_url(url)}: {failure_reason(exc)}", file=sys.stderr)
        return 1
    for token in revoked:
        print(f"revoked: {describe(token)}", file=out)
    if not revoked:
        which = "live agent tokens" if name is None else f"live agent token named {name!r}"
        print(f"user {user_id} has no {which}: nothing revoked", file=sys.stderr)
        return 1
    return 0

"""Telegram Mini App launch data (`initData`): its signature, its age and whose it is. Pure (no I/O).

Telegram signs the query string it hands a Mini App: every `key=value` pair but `hash`, sorted by key and
joined with newlines (the data-check-string), under `HMAC_SHA256(key="WebAppData", msg=bot_token)`. Only the
bot (which holds the token) and Telegram can make a valid one, so a page's request that carries it speaks for
the user named inside. `auth_date` bounds how long a captured copy stays usable.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode

__all__ = ["MAX_INIT_DATA", "Launch", "Refused", "check_init_data", "sign_init_data"]

MAX_INIT_DATA: Final = 4096
"""Characters; Telegram's launch data is a few hundred."""
CLOCK_SKEW_S: Final = 60
"""An `auth_date` this far in the future is still taken (the two clocks differ a little)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """Launch data whose signature and age checked out."""

    user_id: int
    auth_date: int
    hash: str
    """The signature: the same launch sends the same one (used to refuse a second answer from it)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Why launch data is not accepted (said to the page as is)."""

    reason: str


def _secret(bot_token: str) -> bytes:
    return hmac.new(b"WebAppData", bot_token.encode(), hashlib.sha256).digest()


def _check_string(pairs: Mapping[str, str]) -> bytes:
    return "\n".join(f"{key}={pairs[key]}" for key in sorted(pairs)).encode()


def check_init_data(raw: object, bot_token: str, *, now: float, max_age_s: float) -> Launch | Refused:
    """Verify `raw` (the page's `Telegram.WebApp.initData`) was signed with `bot_token` at most `max_age_s`
    seconds before `now` (Unix time), and say whose it is. Never raises."""
    if not isinstance(raw, str) or not raw:
        return Refused(
            "the request carries no Telegram launch data (open the form from its button in Telegram)"
        )
    if len(raw) > MAX_INIT_DATA:
        return Refused("the Telegram launch data is too long")
    try:
        items = parse_qsl(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return Refused("the Telegram launch data is malformed")
    pairs = dict(items)
    if len(pairs) != len(items):
        return Refused("the Telegram launch data repeats a key")
    given = pairs.pop("hash", "")
    expected = hmac.new(_secret(bot_token), _check_string(pairs), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode()):
        return Refused("the Telegram launch data is not signed by Telegram for this bot")
    auth_date = pairs.get("auth_date", "")
    if not auth_date.isascii() or not auth_date.isdigit():
        return Refused("the Telegram launch data has no valid auth_date")
    age = now - int(auth_date)
    if age > max_age_s:
        return Refused("the Telegram launch data is too old: close the form and open it again from the chat")
    if age < -CLOCK_SKEW_S:
        return Refused("the Telegram launch data is dated in the future")
    try:
        user = json.loads(pairs.get("user", ""))
    except ValueError:
        return Refused("the Telegram launch data names no user")
    user_id = user.get("id") if isinstance(user, dict) else None
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        return Refused("the Telegram launch data names no user")
    return Launch(user_id=user_id, auth_date=int(auth_date), hash=expected)


def sign_init_data(fields: Mapping[str, str], bot_token: str) -> str:
    """Launch data as Telegram would make it for `fields` (`user` as JSON, `auth_date`, ...): for tests and
    the bench, which play Telegram's part."""
    pairs = dict(fields)
    pairs["hash"] = hmac.new(_secret(bot_token), _check_string(pairs), hashlib.sha256).hexdigest()
    return urlencode(pairs)

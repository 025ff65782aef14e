"""Approval receipts: what the bot sends with an approved call so the MCP server can check the approval itself.
Pure (no I/O); imports nothing of the bot, so a server can copy this one file.

A call that an `[[approvals]]` rule let through carries, in its request's `_meta` under `META_KEY`, a receipt:
the content hash of (server, tool, arguments) the approvers saw, who asked, who approved (when, with which
factor), a random nonce and an expiry, signed with the bot's audit key (Ed25519). A server holding only the
public key (`toolnexus-bot audit public-key`) checks it with `verify`: the signature, that it is for this
server and tool, that the arguments it received hash to the approved ones, that it has not expired, and, given
a `Nonces`, that it was not used before. Ed25519 is not in the standard library: the one import beyond it is
`cryptography`, which the MCP Python SDK already requires (through `pyjwt[crypto]`).

A 2026-07-28 call that asks its person questions is sent again with `requestState` (its next rounds): the
same receipt comes with each round. Count the nonce on the first round (a request without `requestState`);
the rounds after it are bound to it by the server's own sealed `requestState`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "META_KEY",
    "TTL_S",
    "Approval",
    "BadReceipt",
    "Nonces",
    "Receipt",
    "content_hash",
    "issue",
    "sign",
    "signed_bytes",
    "verify",
]

META_KEY: Final = "io.toolnexus/approval"
"""The key of the receipt in a `tools/call` request's `_meta`."""
TTL_S: Final = 300
"""How long a receipt is good for after it was issued (the call is sent right after)."""
_MAGIC: Final = b"toolnexus-approval-receipt v1\n"
"""Prefixed to what is signed: a receipt's signature can never pass for an audit checkpoint's (same key)."""
_SKEW: Final = dt.timedelta(seconds=60)
"""Clock difference between the bot and a server tolerated for `issued_at`."""


class BadReceipt(ValueError):
    """A receipt that is missing, malformed, forged, for other content, expired or used before (`reason`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def content_hash(server: str, tool: str, content: Mapping[str, Any] | None) -> str:
    """SHA-256 (hex) of what an approval is bound to: server (the bot's name for it), tool and the exact
    content, as canonical JSON."""
    text = json.dumps(
        {"server": server, "tool": tool, "content": content},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def signed_bytes(body: Mapping[str, Any]) -> bytes:
    """What the signature covers: every field of the receipt but `sig`, as canonical JSON."""
    unsigned = {k: v for k, v in body.items() if k != "sig"}
    return _MAGIC + json.dumps(unsigned, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(body: Mapping[str, Any], signer: Callable[[bytes], bytes]) -> dict[str, Any]:
    """The receipt `body` with its signature (`signer`: Ed25519 over `signed_bytes`)."""
    sig = signer(signed_bytes(body))
    return {**body, "sig": base64.urlsafe_b64encode(sig).decode("ascii")}


def issue(
    signer: Callable[[bytes], bytes],
    *,
    server: str,
    tool: str,
    hash: str,
    approval: str,
    requester: tuple[int, str],
    approvers: tuple[Approval, ...],
    asked_at: str,
    now: dt.datetime,
) -> dict[str, Any]:
    """A signed receipt for one sending of an approved call (the bot's side): a fresh nonce each time."""
    body = {
        "v": 1,
        "server": server,
        "tool": tool,
        "hash": hash,
        "approval": approval,
        "requester": {"id": requester[0], "name": requester[1]},
        "approvers": [{"id": a.id, "name": a.name, "at": a.at, "factor": a.factor} for a in approvers],
        "factor": "tap" if not approvers or any(a.factor == "tap" for a in approvers) else "totp",
        "asked_at": asked_at,
        "approved_at": max((a.at for a in approvers), default=asked_at),
        "nonce": secrets.token_urlsafe(16),
        "issued_at": now.isoformat(timespec="seconds"),
        "expires_at": (now + dt.timedelta(seconds=TTL_S)).isoformat(timespec="seconds"),
    }
    return sign(body, signer)


@dataclass(frozen=True, slots=True)
class Approval:
    """One approver's approval."""

    id: int
    """Telegram user id."""
    name: str
    at: str
    """UTC, ISO 8601."""
    factor: str
    """"tap" (a button alone), "totp" (and a code from an authenticator app) or "recovery_code" (and one of
    the approver's single-use recovery codes)."""


@dataclass(frozen=True, slots=True)
class Receipt:
    """A receipt that held."""

    server: str
    tool: str
    hash: str
    approval: str
    """The bot's id of the approval request (its audit rows name it)."""
    requester: int
    approvers: tuple[Approval, ...]
    factor: str
    """"totp" when every approval came with a one-time code (an authenticator's or a recovery code), else
    "tap"."""
    asked_at: str
    approved_at: str
    nonce: str
    expires_at: str


class Nonces:
    """The nonces of receipts already used, each kept until its receipt expires. One process's memory: servers
    with several workers keep them where all workers see them (a table with a unique key, Redis `SET NX`)."""

    def __init__(self) -> None:
        self._seen: dict[str, dt.datetime] = {}
        self._lock = threading.Lock()

    def first_use(self, nonce: str, expires_at: dt.datetime, now: dt.datetime) -> bool:
        """True the first time `nonce` is offered (before it expires), False after."""
        with self._lock:
            for old in [n for n, until in self._seen.items() if until < now]:
                del self._seen[old]
            if nonce in self._seen:
                return False
            self._seen[nonce] = expires_at
            return True


def _time(value: Any, name: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(str(value))
    except ValueError:
        raise BadReceipt(f"{name} is not a time") from None
    if when.tzinfo is None:
        raise BadReceipt(f"{name} has no time zone")
    return when


def verify(
    meta: Mapping[str, Any] | None,
    *,
    public_key: str,
    server: str,
    tool: str,
    arguments: Mapping[str, Any] | None,
    nonces: Nonces | None = None,
    now: dt.datetime | None = None,
) -> Receipt:
    """Check the receipt in a `tools/call` request's `_meta` (`meta`) against the call received: `server` is
    the name the bot's config gives this server, `tool` and `arguments` what the request carries, `public_key`
    what `toolnexus-bot audit public-key` printed (URL-safe base64). With `nonces`, a receipt is good once.

    Raises:
        BadReceipt: no receipt, a bad signature, another server, tool or arguments, expired, or used before.
    """
    body = None if meta is None else meta.get(META_KEY)
    if not isinstance(body, Mapping):
        raise BadReceipt("no approval receipt")
    try:
        key = Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(public_key.strip()))
        key.verify(base64.urlsafe_b64decode(str(body["sig"])), signed_bytes(body))
    except (KeyError, ValueError, InvalidSignature):
        raise BadReceipt("the receipt's signature does not hold") from None
    if body.get("v") != 1:
        raise BadReceipt("unknown receipt version")
    if body.get("server") != server or body.get("tool") != tool:
        raise BadReceipt("the receipt is for another server or tool")
    received = {content_hash(server, tool, arguments)}
    if not arguments:  # no arguments and empty arguments are the same call
        received |= {content_hash(server, tool, None), content_hash(server, tool, {})}
    if body.get("hash") not in received:
        raise BadReceipt("the arguments differ from the approved ones")
    moment = now or dt.datetime.now(dt.UTC)
    expires = _time(body.get("expires_at"), "expires_at")
    if moment > expires:
        raise BadReceipt("the receipt has expired")
    if _time(body.get("issued_at"), "issued_at") > moment + _SKEW:
        raise BadReceipt("the receipt was issued in the future")
    try:
        receipt = Receipt(
            server=server,
            tool=tool,
            hash=str(body["hash"]),
            approval=str(body["approval"]),
            requester=int(body["requester"]["id"]),
            approvers=tuple(
                Approval(int(a["id"]), str(a["name"]), str(a["at"]), str(a["factor"]))
                for a in body["approvers"]
            ),
            factor=str(body["factor"]),
            asked_at=str(body["asked_at"]),
            approved_at=str(body["approved_at"]),
            nonce=str(body["nonce"]),
            expires_at=str(body["expires_at"]),
        )
    except (KeyError, TypeError, ValueError):
        raise BadReceipt("the receipt is incomplete") from None
    if nonces is not None and not nonces.first_use(receipt.nonce, expires, moment):
        raise BadReceipt("the receipt was used before")
    return receipt

"""The audit chain's keys and its signed checkpoints. Pure (no I/O).

From `[storage] secret_key` (HKDF-SHA256 from `cryptography`, one `info` per use) come two keys: the HMAC key
that chains the rows (`hash = HMAC-SHA-256(key, canonical form)`, one HMAC per row) and an Ed25519 key that
signs checkpoints. Someone who can write the database but holds no key cannot make an edited, re-numbered,
forged or re-chained row verify. A checkpoint, `toolnexus-audit-checkpoint v1 count=N head=H at=T key=K
sig=S`, says "the chain had N rows and the N-th row's hash was H at time T"; it is signed with the Ed25519
key and carries the public key, so anyone can check it, and the chain against it, without any secret: a cut
tail (fewer than N rows) or a rewritten history (another hash at row N) shows. The key it carries proves
nothing by itself (anyone can sign with a key of their own): check it against the key you trust (`parse`
with `public_key`). Ship the lines elsewhere (a log host, a ticket): a checkpoint kept only in the database
can be deleted with the rows it covers.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bot.errors import StoreError

__all__ = ["CHECKPOINT_EVERY", "AuditKeys", "BadCheckpoint", "Checkpoint", "public_key_text"]

CHECKPOINT_EVERY: Final = 1000
"""A checkpoint is recorded every this many rows (and when the bot stops)."""
_MAGIC: Final = "toolnexus-audit-checkpoint"
_VERSION: Final = "v1"


def _derive(secret: str, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(secret.encode("utf-8"))


def public_key_text(key: Ed25519PublicKey) -> str:
    """The raw 32-byte public key in URL-safe base64 (what checkpoint lines and `audit public-key` show)."""
    return base64.urlsafe_b64encode(key.public_bytes(Encoding.Raw, PublicFormat.Raw)).decode("ascii")


class BadCheckpoint(StoreError, ValueError):
    """A checkpoint line that does not parse, or whose signature does not hold."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The chain's length and head at a time, signed."""

    count: int
    head: str
    at: str
    key: str
    """The signer's public key (`public_key_text`)."""
    sig: str

    def signed_text(self) -> str:
        return f"{_MAGIC} {_VERSION} count={self.count} head={self.head} at={self.at} key={self.key}"

    def line(self) -> str:
        return f"{self.signed_text()} sig={self.sig}"

    @classmethod
    def parse(cls, line: str, public_key: str | None = None) -> Checkpoint:
        """A checkpoint line, its signature checked (with `public_key` when given, which must be the line's).

        Raises:
            BadCheckpoint: not a checkpoint line, another key, or a signature that does not hold.
        """
        words = line.strip().split()
        if len(words) != 7 or words[:2] != [_MAGIC, _VERSION]:
            raise BadCheckpoint(f"not a {_MAGIC} {_VERSION} line")
        fields = dict(word.partition("=")[::2] for word in words[2:])
        try:
            found = cls(int(fields["count"]), fields["head"], fields["at"], fields["key"], fields["sig"])
            raw_key = base64.urlsafe_b64decode(found.key)
            signature = base64.urlsafe_b64decode(found.sig)
            Ed25519PublicKey.from_public_bytes(raw_key).verify(signature, found.signed_text().encode())
        except (KeyError, ValueError, InvalidSignature) as exc:
            raise BadCheckpoint(f"the checkpoint's signature does not hold ({type(exc).__name__})") from None
        if public_key is not None and public_key.strip() != found.key:
            raise BadCheckpoint("the checkpoint is signed with another key than the one given")
        return found


class AuditKeys:
    """The chain's HMAC key and the checkpoint signing key, derived from one secret."""

    def __init__(self, secret: str) -> None:
        self.mac_key = _derive(secret, b"toolnexus-bot audit chain hmac-sha256")
        self._mac = hmac.new(self.mac_key, digestmod=hashlib.sha256)
        """Keyed once; each row's HMAC copies it (the key's two blocks are not hashed again per row)."""
        self._signer = Ed25519PrivateKey.from_private_bytes(
            _derive(secret, b"toolnexus-bot audit checkpoint ed25519")
        )
        self.public_key = public_key_text(self._signer.public_key())

    def digest(self, canonical: bytes) -> str:
        """HMAC-SHA-256 of a row's canonical form (hex)."""
        mac = self._mac.copy()
        mac.update(canonical)
        return mac.hexdigest()

    def sign(self, data: bytes) -> bytes:
        """Ed25519 signature of `data` with the checkpoint key (approval receipts: `bot.receipts`, whose signed
        bytes start with their own prefix, so no receipt can pass for a checkpoint)."""
        return self._signer.sign(data)

    def checkpoint(self, count: int, head: str, at: dt.datetime | None = None) -> Checkpoint:
        when = (at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
        unsigned = Checkpoint(count, head, when, self.public_key, "")
        sig = self._signer.sign(unsigned.signed_text().encode())
        return Checkpoint(count, head, when, self.public_key, base64.urlsafe_b64encode(sig).decode("ascii"))

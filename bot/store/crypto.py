"""Authenticated encryption of secrets at rest (OAuth tokens), with `[storage] secret_key`. Pure, no I/O.

Fernet (AES-128-CBC with HMAC-SHA256) from `cryptography`: a row changed or read with another key fails to
decrypt instead of yielding garbage. Each value is bound to the row it belongs to (`context`), so a
ciphertext copied into another person's row does not decrypt there.
"""

from __future__ import annotations

import base64
import hashlib

from cryptography.fernet import Fernet, InvalidToken

from bot.errors import StoreError

__all__ = ["Sealer", "Unreadable", "new_key"]


class Unreadable(StoreError):
    """A stored secret cannot be decrypted: another key, another row, or tampered with."""


def new_key() -> str:
    """A fresh random key for `[storage] secret_key` (44 characters of URL-safe base64)."""
    return Fernet.generate_key().decode("ascii")


class Sealer:
    """Encrypts and decrypts text with one key; `context` names the row a value belongs to."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode("ascii"))

    def seal(self, plain: str, context: str) -> str:
        return self._fernet.encrypt(_bind(plain, context)).decode("ascii")

    def open(self, sealed: str, context: str) -> str:
        """The plain text.

        Raises:
            Unreadable: wrong key, wrong row, or changed.
        """
        try:
            data = self._fernet.decrypt(sealed.encode("ascii"))
        except (InvalidToken, ValueError):
            raise Unreadable("the stored secret cannot be decrypted with this key") from None
        tag, _, plain = data.partition(b"\n")
        if tag != _tag(context):
            raise Unreadable("the stored secret belongs to another row")
        return plain.decode("utf-8")


def _tag(context: str) -> bytes:
    return base64.urlsafe_b64encode(hashlib.sha256(context.encode("utf-8")).digest())


def _bind(plain: str, context: str) -> bytes:
    return _tag(context) + b"\n" + plain.encode("utf-8")

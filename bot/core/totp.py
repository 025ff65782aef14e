"""One-time codes for approvals (`second_factor = "totp"`): TOTP (RFC 6238, from `pyotp`) and recovery codes.
Pure: the time is a parameter, randomness comes from `secrets`; the store keeps the state (`bot.store.factors`).

A code is accepted for the 30-second step it belongs to, one step either side (clocks drift), and only for a
step later than the last one accepted: a code seen once (over a shoulder, in a screenshot) cannot be used
again. After `MAX_FAILURES` wrong codes in a row, no code is tried for `LOCK_S` seconds: six digits are a
million tries, not a hundred thousand a minute.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Final

import pyotp

__all__ = [
    "LOCK_S",
    "MAX_FAILURES",
    "RECOVERY_CODES",
    "STEP_S",
    "Lockout",
    "matching_step",
    "new_recovery_codes",
    "new_secret",
    "normal",
    "provisioning_uri",
    "recovery_hash",
]

STEP_S: Final = 30
"""A TOTP code's time step (what every authenticator app uses)."""
DRIFT_STEPS: Final = 1
"""Steps either side of now a code is accepted for."""
MAX_FAILURES: Final = 5
"""Wrong codes in a row before the approver is locked out for `LOCK_S`."""
LOCK_S: Final = 300
RECOVERY_CODES: Final = 10
"""Recovery codes made at enrolment (each works once)."""
_RECOVERY_ALPHABET: Final = "abcdefghjkmnpqrstuvwxyz23456789"
_TOTP: Final = re.compile(r"\d{6}")


def new_secret() -> str:
    """A fresh TOTP secret (base32, 160 bits)."""
    return pyotp.random_base32(32)


def provisioning_uri(secret: str, account: str, issuer: str) -> str:
    """The `otpauth://` address authenticator apps read from a QR code."""
    return pyotp.TOTP(secret, interval=STEP_S).provisioning_uri(name=account, issuer_name=issuer)


def normal(code: str) -> str:
    """A code as typed, without spaces and dashes, lower case."""
    return re.sub(r"[\s-]", "", code).lower()


def matching_step(secret: str, code: str, now: float, after_step: int) -> int | None:
    """The time step `code` is the TOTP code of, within the drift of `now` and later than `after_step` (the
    last step accepted before), or None."""
    code = normal(code)
    if not _TOTP.fullmatch(code):
        return None
    totp = pyotp.TOTP(secret, interval=STEP_S)
    current = int(now) // STEP_S
    for step in range(current - DRIFT_STEPS, current + DRIFT_STEPS + 1):
        if step > after_step and hmac.compare_digest(totp.generate_otp(step), code):
            return step
    return None


def new_recovery_codes() -> list[str]:
    """`RECOVERY_CODES` fresh codes, `xxxx-xxxx-xxxx-xxxx` (about 79 bits each: a stolen hash is not reversed)."""
    return [
        "-".join("".join(secrets.choice(_RECOVERY_ALPHABET) for _ in range(4)) for _ in range(4))
        for _ in range(RECOVERY_CODES)
    ]


def recovery_hash(code: str) -> str:
    """What is stored of a recovery code (SHA-256 of its normal form, hex)."""
    return hashlib.sha256(normal(code).encode("ascii", "replace")).hexdigest()


@dataclass(frozen=True, slots=True)
class Lockout:
    """Consecutive wrong codes and until when no code is tried (Unix time)."""

    failures: int = 0
    until: float = 0.0

    def locked(self, now: float) -> bool:
        return now < self.until

    def failed(self, now: float) -> Lockout:
        """After one more wrong code: locked for `LOCK_S` once `MAX_FAILURES` are reached (the count restarts)."""
        failures = self.failures + 1
        if failures >= MAX_FAILURES:
            return Lockout(0, now + LOCK_S)
        return Lockout(failures, self.until)

    def left(self) -> int:
        """Wrong codes left before the lock."""
        return MAX_FAILURES - self.failures

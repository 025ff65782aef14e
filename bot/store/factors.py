"""Approvers' second factor in the database: TOTP secrets sealed at rest, the last step used, recovery codes as
hashes, and the count of wrong codes. Does I/O.

One row per approver (`second_factors`). The secret is sealed with `[storage] secret_key` like OAuth tokens
(`bot.store.crypto`, bound to its row); an enrolment waits in `pending` until the person sends a code from it,
so a half-finished `/2fa` never locks anyone out, and a new phone replaces the old one only once it works.
Every check is a compare-and-set on the row's revision, so two processes (or two taps) cannot both accept one
code: the last step accepted only grows, a recovery code is removed by the check that uses it, and wrong codes
add up to a lock (`bot.core.totp`). Nothing here logs a secret or a code.

The code an approver was asked for (`code_prompts`, one per approver): which request, at which content, and until
when their next code approves it. It is kept here rather than in a process's memory so a code sent after a
restart, or received by another process of the fleet, still counts.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Row, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.core.approvals import Factor
from bot.core.totp import Lockout, matching_step, new_recovery_codes, new_secret, recovery_hash
from bot.store.audit import AuditEvent, AuditLog
from bot.store.crypto import Sealer, Unreadable
from bot.store.errors import unavailable_as
from bot.store.tables import code_prompts, second_factors

__all__ = ["CodeCheck", "CodePrompt", "CodeStatus", "FactorStore"]


_ATTEMPTS: Final = 5
"""Fresh reads a check gets when another change of the row commits first."""


class CodeStatus(enum.StrEnum):
    OK = "ok"
    WRONG = "wrong"
    USED = "used"
    """The code of a step already accepted: a code works once."""
    LOCKED = "locked"
    """Too many wrong codes: no code is tried until `CodeCheck.until`."""
    NOT_ENROLLED = "not_enrolled"


@dataclass(frozen=True, slots=True)
class CodeCheck:
    """What a code got: accepted (with which factor), or why not."""

    status: CodeStatus
    factor: Factor | None = None
    left: int = 0
    """Wrong codes left before the lock (WRONG, USED)."""
    until: float = 0.0
    """Unix time the lock ends (LOCKED)."""
    recovery_left: int = 0
    """Unused recovery codes (OK)."""

    @property
    def ok(self) -> bool:
        return self.status is CodeStatus.OK


@dataclass(frozen=True, slots=True)
class CodePrompt:
    """An approver was asked for a code to approve a request: the Approve they tapped (the request, the content
    generation and hash it showed, the card), the prompt's message in their private chat, and its end."""

    approval_id: str
    generation: int
    content_hash: str
    card: tuple[int, int] | None
    expires_at: float
    """Unix time after which a code no longer answers it."""
    message_id: int | None = None


class FactorStore:
    """The `second_factors` table of one database, sealed with one key. `clock` is Unix time; `log` records
    enrolments and lockouts (never a code)."""

    def __init__(
        self,
        engine: AsyncEngine,
        secret_key: str,
        clock: Callable[[], float] = time.time,
        log: AuditLog | None = None,
    ) -> None:
        self.engine = engine
        self._sealer = Sealer(secret_key)
        self.clock = clock
        self.log = log

    @unavailable_as("reading a second factor")
    async def enrolled(self, user_id: int) -> bool:
        """Whether the person finished enrolling (a confirmed secret)."""
        row = await self._row(user_id)
        return row is not None and row.secret is not None

    @unavailable_as("reading a second factor")
    async def enrolling(self, user_id: int) -> bool:
        """Whether an enrolment waits for its confirmation code."""
        row = await self._row(user_id)
        return row is not None and row.pending is not None

    @unavailable_as("starting an enrolment")
    async def begin(self, user_id: int) -> str:
        """A new secret for the person's authenticator app, kept (sealed) until a code from it confirms it; an
        enrolled secret keeps working meanwhile."""
        secret = new_secret()
        sealed = self._sealer.seal(secret, _context(user_id))
        async with self.engine.begin() as conn:
            found = await conn.execute(
                update(second_factors)
                .where(second_factors.c.user_id == user_id)
                .values(pending=sealed, revision=second_factors.c.revision + 1)
            )
            if found.rowcount == 0:
                await conn.execute(
                    insert(second_factors).values(
                        user_id=user_id,
                        pending=sealed,
                        last_step=-1,
                        recovery="[]",
                        failures=0,
                        locked_until=0.0,
                        revision=0,
                    )
                )
        return secret

    @unavailable_as("confirming an enrolment")
    async def confirm(self, user_id: int, code: str) -> tuple[CodeCheck, list[str]]:
        """Finish the enrolment with a code from the new secret: it replaces any earlier one, and fresh recovery
        codes are made (returned once, kept only as hashes)."""
        for _ in range(_ATTEMPTS):
            row = await self._row(user_id)
            if row is None or row.pending is None:
                return CodeCheck(CodeStatus.NOT_ENROLLED), []
            now = self.clock()
            lockout = Lockout(row.failures, row.locked_until)
            if lockout.locked(now):
                return CodeCheck(CodeStatus.LOCKED, until=lockout.until), []
            secret = self._open(row.pending, user_id)
            step = None if secret is None else matching_step(secret, code, now, -1)
            if step is None:
                failed = lockout.failed(now)
                if await self._advance(row, failures=failed.failures, locked_until=failed.until):
                    await self._locked(user_id, failed, now)
                    return _wrong(CodeStatus.WRONG, failed, now), []
                continue
            codes = new_recovery_codes()
            if await self._advance(
                row,
                secret=row.pending,
                pending=None,
                enrolled_at=dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"),
                last_step=step,
                recovery=json.dumps([recovery_hash(c) for c in codes]),
                failures=0,
                locked_until=0.0,
            ):
                await self._audit(AuditEvent.SECOND_FACTOR_ENROLLED, user_id, {"recovery_codes": len(codes)})
                return CodeCheck(CodeStatus.OK, Factor.TOTP, recovery_left=len(codes)), codes
        return CodeCheck(CodeStatus.WRONG, left=0), []

    @unavailable_as("checking a code")
    async def check(self, user_id: int, code: str) -> CodeCheck:
        """Check a code from the person's authenticator app (a step later than the last one accepted) or one of
        their recovery codes (used up by this check); a wrong one counts towards the lock."""
        for _ in range(_ATTEMPTS):
            row = await self._row(user_id)
            if row is None or row.secret is None:
                return CodeCheck(CodeStatus.NOT_ENROLLED)
            secret = self._open(row.secret, user_id)
            if secret is None:
                return CodeCheck(CodeStatus.NOT_ENROLLED)  # another key: enrol again
            now = self.clock()
            lockout = Lockout(row.failures, row.locked_until)
            if lockout.locked(now):
                return CodeCheck(CodeStatus.LOCKED, until=lockout.until)
            step = matching_step(secret, code, now, row.last_step)
            unused: list[str] = json.loads(row.recovery)
            if step is not None:
                if await self._advance(row, last_step=step, failures=0):
                    return CodeCheck(CodeStatus.OK, Factor.TOTP, recovery_left=len(unused))
                continue
            hashed = recovery_hash(code)
            if hashed in unused:
                unused.remove(hashed)
                if await self._advance(row, recovery=json.dumps(unused), failures=0):
                    return CodeCheck(CodeStatus.OK, Factor.RECOVERY, recovery_left=len(unused))
                continue
            used = matching_step(secret, code, now, -1) is not None  # a right code of a step already used
            failed = lockout.failed(now)
            if await self._advance(row, failures=failed.failures, locked_until=failed.until):
                await self._locked(user_id, failed, now)
                return _wrong(CodeStatus.USED if used else CodeStatus.WRONG, failed, now)
        return CodeCheck(CodeStatus.WRONG, left=0)

    @unavailable_as("keeping a code prompt")
    async def ask(self, user_id: int, prompt: CodePrompt) -> None:
        """The person's next code answers `prompt` (in place of any earlier prompt of theirs)."""
        card_chat, card_message = prompt.card if prompt.card is not None else (None, None)
        async with self.engine.begin() as conn:
            await conn.execute(delete(code_prompts).where(code_prompts.c.user_id == user_id))
            await conn.execute(
                insert(code_prompts).values(
                    user_id=user_id,
                    approval_id=prompt.approval_id,
                    generation=prompt.generation,
                    content_hash=prompt.content_hash,
                    card_chat=card_chat,
                    card_message=card_message,
                    message_id=prompt.message_id,
                    expires_at=prompt.expires_at,
                )
            )

    @unavailable_as("keeping a code prompt")
    async def asked_in(self, user_id: int, approval_id: str, message_id: int) -> None:
        """Where the prompt about `approval_id` was sent (a reply to it is a code)."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(code_prompts)
                .where(code_prompts.c.user_id == user_id, code_prompts.c.approval_id == approval_id)
                .values(message_id=message_id)
            )

    @unavailable_as("reading a code prompt")
    async def asked(self, user_id: int) -> CodePrompt | None:
        """The prompt the person's next code answers; None: none, or it ended."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(code_prompts).where(code_prompts.c.user_id == user_id))).first()
        if row is None or row.expires_at <= self.clock():
            return None
        card = None if row.card_chat is None else (int(row.card_chat), int(row.card_message))
        return CodePrompt(
            row.approval_id, row.generation, row.content_hash, card, row.expires_at, row.message_id
        )

    @unavailable_as("ending a code prompt")
    async def answered(self, user_id: int, approval_id: str) -> bool:
        """End the person's prompt about `approval_id`: True for exactly one caller (a code counts once)."""
        async with self.engine.begin() as conn:
            gone = await conn.execute(
                delete(code_prompts).where(
                    code_prompts.c.user_id == user_id, code_prompts.c.approval_id == approval_id
                )
            )
        return gone.rowcount == 1

    async def _locked(self, user_id: int, lockout: Lockout, now: float) -> None:
        if lockout.locked(now):
            until = dt.datetime.fromtimestamp(lockout.until, dt.UTC).isoformat(timespec="seconds")
            await self._audit(AuditEvent.SECOND_FACTOR_LOCKED, user_id, {"until": until})

    async def _audit(self, event: AuditEvent, user_id: int, detail: dict[str, Any]) -> None:
        """Record it; the change itself is committed, and a lost audit row must not undo it."""
        if self.log is not None:
            await self.log.record(event, user_id=user_id, detail=detail)

    def _open(self, sealed: str, user_id: int) -> str | None:
        try:
            return self._sealer.open(sealed, _context(user_id))
        except Unreadable:
            return None

    async def _row(self, user_id: int) -> Row[Any] | None:
        async with self.engine.connect() as conn:
            result = await conn.execute(select(second_factors).where(second_factors.c.user_id == user_id))
            return result.first()

    async def _advance(self, row: Row[Any], **values: Any) -> bool:
        """Write `values` only if nobody changed the row since it was read."""
        async with self.engine.begin() as conn:
            changed = await conn.execute(
                update(second_factors)
                .where(second_factors.c.user_id == row.user_id, second_factors.c.revision == row.revision)
                .values(revision=row.revision + 1, **values)
            )
        return changed.rowcount == 1


def _wrong(status: CodeStatus, lockout: Lockout, now: float) -> CodeCheck:
    if lockout.locked(now):
        return CodeCheck(CodeStatus.LOCKED, until=lockout.until)
    return CodeCheck(status, left=lockout.left())


def _context(user_id: int) -> str:
    return f"second_factor {user_id}"

"""The audit log: append-only rows, each carrying the SHA-256 of the previous row's canonical form. Does I/O.

The canonical form of a row is the UTF-8 bytes of the JSON object of all its columns except `hash`
(`seq`, `id`, `at`, `event`, `user_id`, `chat_id`, `server`, `tool`, `request_id`, `detail`, `prev_hash`),
with keys sorted, no whitespace (`separators=(",", ":")`) and non-ASCII kept as is; `detail` enters as the
JSON text stored in the row. `hash` is the SHA-256 (hex) of that form and the next row's `prev_hash`; the
first row's `prev_hash` is 64 zeros. Editing a row changes its canonical form; deleting one leaves a gap
in `seq` and a `prev_hash` that matches nothing.

With a key (`[storage] secret_key`, `bot.store.audit_keys`) `hash` is the HMAC-SHA-256 of that form instead,
so whoever edits the database without the key cannot re-chain it; signed checkpoints (every
`CHECKPOINT_EVERY` rows and at stop) anchor its length and head for anyone holding the public key alone.
Without a key the chain is plain SHA-256: it shows accidents, not tampering.

Appends are serialised in `AuditLog.append`: one writer at a time per process (it writes every event
queued meanwhile in one transaction, with the kept questions' writes: the store's one writer, `bot.store.writer`), the database's lock across processes
(PostgreSQL: `LOCK TABLE audit`; SQLite: its write lock, taken before the head is read), and the unique
`seq` turns any race left into a retry instead of a fork.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from sqlalchemy import Connection, Select, false, insert, select, text, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.audit_keys import CHECKPOINT_EVERY, AuditKeys, Checkpoint
from bot.store.tables import audit, audit_checkpoints
from bot.store.writer import Prepared, StoreWriter

__all__ = ["GENESIS", "AuditEvent", "AuditLog", "AuditRow", "ChainBreak", "canonical_form"]

logger = logging.getLogger(__name__)

GENESIS: Final = "0" * 64
"""The first row's `prev_hash`."""


class AuditEvent(enum.StrEnum):
    """What an audit row records."""

    CALL_STARTED = "call_started"
    """Who called which tool of which server, in which chat, with which arguments."""
    QUESTION_SHOWN = "question_shown"
    """A server's question reached a person (before the card was sent)."""
    ANSWERED = "answered"
    """The person answered: accept (with content), decline or cancel."""
    EXPIRED = "expired"
    """Nobody answered in time."""
    CANCELLED = "cancelled"
    """The bot ended the question (stopping, undeliverable)."""
    WITHDRAWN = "withdrawn"
    """The server withdrew the question, or its session ended."""
    CALL_ENDED = "call_ended"
    """A call's outcome."""
    APPROVAL_REQUESTED = "approval_requested"
    """A gated call (or answer) asked its approvers, with the content's SHA-256 (before any card was sent)."""
    APPROVED = "approved"
    """An approver approved (`user_id` is theirs); `detail.status` says whether that reached the quorum."""
    REJECTED = "rejected"
    """An approver rejected: the request ended, nothing is sent."""
    APPROVAL_EXPIRED = "approval_expired"
    """Not decided in time: nothing is sent."""
    APPROVAL_CHANGED = "approval_changed"
    """Gate "answers": the requester changed the answer; approvals given before no longer count."""
    APPROVAL_CANCELLED = "approval_cancelled"
    """The call went away before a decision (the bot stopped, its requester cancelled it)."""
    APPROVAL_ESCALATED = "approval_escalated"
    """Not decided within the rule's `escalate_after_s`: more approvers joined (`detail.added`)."""
    SIGNED_IN = "signed_in"
    """A person signed in to a server with OAuth (the issuer; never a token)."""
    REFRESH_FAILED = "refresh_failed"
    """The authorization server refused to refresh a person's token (they are asked to sign in again)."""
    LOGGED_OUT = "logged_out"
    """A person signed out of a server (`/logout`); whether the token was revoked."""
    SECOND_FACTOR_ENROLLED = "second_factor_enrolled"
    """An approver finished enrolling an authenticator app (`/2fa`), or moved it to a new one."""
    SECOND_FACTOR_LOCKED = "second_factor_locked"
    """An approver sent too many wrong codes in a row: no code is tried until `detail.until`."""
    AUDIT_SEALED = "audit_sealed"
    """The chain's first row when it was keyed from its start: the public half of the key that seals it."""
    AUDIT_RESEALED = "audit_resealed"
    """An operator re-chained a chain written without a key (`audit reseal`): its old head, how it stood."""
    AGENT_TOKEN_CREATED = "agent_token_created"
    """A person made an agent token (`user_id` is theirs; its name and expiry, never the token)."""
    AGENT_TOKEN_REVOKED = "agent_token_revoked"
    """An agent token was revoked: by its person (`/agents`) or by the operator (`toolnexus-bot agents`)."""
    AGENT_TOKEN_EXPIRED = "agent_token_expired"
    """An agent token was first found past its expiry (refused, or found so while its agent was busy)."""
    DECISION_REMEMBERED = "decision_remembered"
    """A person's answer to their agent's permission prompt was kept for a session, an hour or always (`tool`,
    the decision's id, allow or deny, its span, who made it)."""
    DECISION_USED = "decision_used"
    """Rows of earlier versions only: a remembered decision's use is now the prompt's `permission_decided`
    (`by: remembered`, which decision, who made it and when), written where it is used."""
    DECISION_FORGOTTEN = "decision_forgotten"
    """A person revoked one of their remembered decisions (`/agents`)."""
    PERMISSION_ASKED = "permission_asked"
    """An agent's permission prompt (its hook's, or its permission-prompt tool's) reached its person: the client,
    the tool and its input, the working directory and session (`server` is the agent token's name)."""
    PERMISSION_DECIDED = "permission_decided"
    """The answer an agent's permission prompt got: allow or deny, and by whom: the person's tap (and for how
    long it is remembered), a remembered decision (its id and when it was made), or nobody (the agent stopped
    waiting, nobody answered in time, a limit)."""
    OAUTH_CONSENTED = "oauth_consented"
    """A person tapped Allow on an OAuth client's consent card (`user_id`: the tapper, whom the grant is for)."""
    OAUTH_DENIED = "oauth_denied"
    """A person tapped Deny on an OAuth client's consent card."""
    OAUTH_REFRESHED = "oauth_refreshed"
    """An OAuth client exchanged its refresh token for new tokens (the grant's id; never a token)."""


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One row of the log, as stored."""

    seq: int
    id: str
    at: str
    event: str
    user_id: int | None
    chat_id: int | None
    server: str | None
    tool: str | None
    request_id: str | None
    detail: str
    """Canonical JSON text of an object."""
    prev_hash: str
    hash: str

    def as_dict(self) -> dict[str, Any]:
        """The row with `detail` parsed, for printing."""
        values = asdict(self)
        values["detail"] = json.loads(self.detail)
        return values


@dataclass(frozen=True, slots=True)
class ChainBreak:
    """The first row where the chain does not hold."""

    seq: int
    """The bad row's place (for a deleted row: the place that is missing)."""
    id: str | None
    """The bad row's id (None for a deleted row)."""
    reason: str

    def __str__(self) -> str:
        who = f"row {self.seq}" + (f" ({self.id})" if self.id else "")
        return f"{who}: {self.reason}"


_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What `json.dumps` with these options builds anew for every call (every row is encoded twice: its detail,
then its canonical form)."""


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII as is: one text for one value."""
    return _CANONICAL.encode(value)


def canonical_form(row: Mapping[str, Any]) -> bytes:
    """The bytes a row's hash covers (see the module docstring)."""
    return canonical_json({name: row[name] for name in _HASHED}).encode("utf-8")


_HASHED: Final = (
    *("seq", "id", "at", "event", "user_id", "chat_id", "server", "tool", "request_id", "detail"),
    "prev_hash",
)


_INSERT: Final = Prepared(insert(audit))


def _lock_head(conn: Connection) -> None:
    """Hold the database's lock on the chain's head until this transaction ends: other processes wait."""
    if conn.dialect.name == "postgresql":
        # Conflicts with itself, not with readers.
        conn.execute(text("LOCK TABLE audit IN SHARE ROW EXCLUSIVE MODE"))
    else:
        # SQLite: a write statement (even one that changes nothing) takes the database's write lock, which
        # a plain SELECT would not.
        conn.execute(update(audit).where(false()).values(seq=audit.c.seq))


def _head() -> Select[tuple[int, str]]:
    """The newest row's `seq` and `hash`."""
    return select(audit.c.seq, audit.c.hash).order_by(audit.c.seq.desc()).limit(1)


def _digest(row: Mapping[str, Any], keys: AuditKeys | None = None) -> str:
    """The row's hash: HMAC-SHA-256 under the audit key, or SHA-256 without one (one pass either way)."""
    form = canonical_form(row)
    return hashlib.sha256(form).hexdigest() if keys is None else keys.digest(form)


class AuditLog:
    """The audit table of one database; `append` is the only writer."""

    def __init__(
        self, engine: AsyncEngine, keys: AuditKeys | None = None, writer: StoreWriter | None = None
    ) -> None:
        self.engine = engine
        self.keys = keys
        """The chain's HMAC and checkpoint keys; None: plain SHA-256, no checkpoints."""
        self.writer = StoreWriter(engine, thread=False) if writer is None else writer
        """Commits the rows: events appended while a batch is being written go together in the next
        transaction, with the kept questions' writes queued meanwhile (the store's one writer)."""
        self._head: tuple[int, str] | None = None
        """(seq, hash) of the last row this log wrote; None until known."""
        self.rows_written = 0
        """Rows this process appended (read by bench)."""

    async def read_head(self) -> None:
        """Read the chain's head now (at start), so that the first append takes the fast path: without it,
        the first question of a flood waits for the database's lock and a read before its card goes out. A
        head another process moves meanwhile costs that append one retry, as any race does."""
        async with self.engine.connect() as conn:
            head = (await conn.execute(_head())).first()
        self._head = (0, GENESIS) if head is None else (head.seq, head.hash)

    async def record(self, event: AuditEvent, **fields: Any) -> None:
        """`append`, for a change already committed: a row the database refuses is logged as lost, never raised
        (what was done stays done; a lost audit row must not undo it). Never raises for the database."""
        try:
            await self.append(event, **fields)
        except SQLAlchemyError:
            logger.exception("could not write the audit event %s", event.value)

    async def append(
        self,
        event: AuditEvent,
        *,
        user_id: int | None = None,
        chat_id: int | None = None,
        server: str | None = None,
        tool: str | None = None,
        request_id: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditRow:
        """Append one event and commit it; returns the row as stored.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused the write.
        """
        values: dict[str, Any] = {
            "id": str(uuid.uuid4()),
            "at": dt.datetime.now(dt.UTC).isoformat(timespec="microseconds"),
            "event": event.value,
            "user_id": user_id,
            "chat_id": chat_id,
            "server": server,
            "tool": tool,
            "request_id": request_id,
            "detail": canonical_json(dict(detail or {})),
        }
        row: AuditRow = await self.writer.submit(self, values)
        if self.keys is not None and row.seq % CHECKPOINT_EVERY == 0:
            await self.checkpoint()
        return row

    async def checkpoint(self) -> Checkpoint | None:
        """Sign the chain's length and head now, keep the checkpoint in the database and return it (None
        without a key).

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database refused.
        """
        if self.keys is None:
            return None
        async with self.engine.begin() as conn:
            head = (await conn.execute(_head())).first()
            count, head_hash = (0, GENESIS) if head is None else (head.seq, head.hash)
            found = self.keys.checkpoint(count, head_hash)
            exists = select(audit_checkpoints.c.count).where(
                audit_checkpoints.c.count == count, audit_checkpoints.c.key == found.key
            )
            if (await conn.execute(exists)).first() is None:
                values = {
                    "count": count,
                    "head": head_hash,
                    "at": found.at,
                    "key": found.key,
                    "sig": found.sig,
                }
                await conn.execute(insert(audit_checkpoints).values(**values))
        return found

    async def stored_checkpoints(self) -> list[Checkpoint]:
        """The checkpoints kept in the database, oldest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(audit_checkpoints).order_by(audit_checkpoints.c.count))
            return [Checkpoint(*row) for row in rows]  # columns in the dataclass's order

    def stage(self, conn: Connection, items: Sequence[Any], attempt: int) -> Callable[[], Sequence[AuditRow]]:
        """Chain and insert `items` (the rows' values) after the head, in the writer's open transaction
        (`bot.store.writer.Part`).

        The fast path trusts the head this process wrote last: `seq` is dense and unique, so the insert only
        succeeds when nobody appended since, and then the cached hash is the head's. When another process
        did (or on the first write), the slow path (a retry) takes the database's lock and reads the head.
        """
        batch: Sequence[dict[str, Any]] = items
        if self._head is None or attempt > 0:
            _lock_head(conn)
            head = conn.execute(_head()).first()
            self._head = (0, GENESIS) if head is None else (head.seq, head.hash)
        seq, prev_hash = self._head
        for values in batch:
            seq += 1
            values["seq"], values["prev_hash"] = seq, prev_hash
            values["hash"] = prev_hash = _digest(values, self.keys)
        _INSERT.executemany(conn, batch)

        def committed() -> list[AuditRow]:
            self._head = (seq, prev_hash)
            self.rows_written += len(batch)
            return [AuditRow(**values) for values in batch]

        return committed

    def rolled_back(self, exc: SQLAlchemyError, attempt: int) -> bool:
        """An `IntegrityError`: another process took these places in the chain; take the lock, read the head,
        again."""
        self._head = None
        return isinstance(exc, IntegrityError)

    async def rows(
        self,
        *,
        since: dt.datetime | None = None,
        user_id: int | None = None,
        server: str | None = None,
        last: int | None = None,
    ) -> list[AuditRow]:
        """Rows in chain order, optionally filtered; `last` keeps only the newest that many."""
        query: Select[Any] = select(audit)
        if since is not None:
            query = query.where(audit.c.at >= since.astimezone(dt.UTC).isoformat(timespec="microseconds"))
        if user_id is not None:
            query = query.where(audit.c.user_id == user_id)
        if server is not None:
            query = query.where(audit.c.server == server)
        if last is not None:
            query = query.order_by(audit.c.seq.desc()).limit(last)
        else:
            query = query.order_by(audit.c.seq)
        async with self.engine.connect() as conn:
            found = [AuditRow(**row._asdict()) for row in await conn.execute(query)]
        return sorted(found, key=lambda row: row.seq) if last is not None else found

    async def verify(
        self, checkpoints: Sequence[Checkpoint] = (), *, content: bool = True
    ) -> tuple[int, ChainBreak | None]:
        """Walk the chain: how many rows were checked, and the first bad row (None when it holds).

        Each of `checkpoints` (their signatures already checked: trust them before passing them) must find
        its row with its hash, and the chain at least that long; several at one count are each checked, so
        none can stand in for another. The hash a checkpoint is compared with is the row's as the walk
        recomputed it (with `content`), or as stored when only the links are checked. Without `content` (no
        key at hand for a keyed chain) only the links are checked: `seq` dense, each `prev_hash` the previous
        row's `hash`, and the checkpoints.
        """
        expected_seq, prev_hash, count = 1, GENESIS, 0
        previous: AuditRow | None = None
        anchors: dict[int, list[Checkpoint]] = {}
        for checkpoint in checkpoints:
            anchors.setdefault(checkpoint.count, []).append(checkpoint)
        for anchor in anchors.get(0, ()):
            if anchor.head != GENESIS:
                return 0, ChainBreak(0, None, f"rewritten (the checkpoint of {anchor.at} holds another head)")
        async with self.engine.connect() as conn:
            result = await conn.stream(select(audit).order_by(audit.c.seq))
            try:
                async for found in result:
                    row = AuditRow(**found._asdict())
                    count += 1
                    broken = _check(
                        row, expected_seq, prev_hash, previous, self.keys if content else None, content
                    )
                    for anchor in anchors.get(row.seq, ()) if broken is None else ():
                        if anchor.head != row.hash:
                            broken = ChainBreak(
                                row.seq,
                                row.id,
                                f"rewritten (the checkpoint of {anchor.at} holds another hash)",
                            )
                            break
                    if broken is not None:
                        return count, broken
                    expected_seq, prev_hash, previous = row.seq + 1, row.hash, row
            finally:
                await result.close()
        beyond = [c for c in checkpoints if c.count > count]
        if beyond:
            last = max(beyond, key=lambda c: c.count)
            return count, ChainBreak(
                count + 1,
                None,
                f"cut: the checkpoint of {last.at} counts {last.count} rows, the chain has {count}",
            )
        return count, None


def _check(
    row: AuditRow,
    expected_seq: int,
    prev_hash: str,
    previous: AuditRow | None,
    keys: AuditKeys | None = None,
    content: bool = True,
) -> ChainBreak | None:
    """The break at `row`, given what the rows before it promise (None when it holds); `content` False
    checks the links only."""
    if row.seq != expected_seq:
        return ChainBreak(expected_seq, None, f"missing (deleted); the chain resumes at row {row.seq}")
    if row.prev_hash != prev_hash:
        if previous is not None:
            return ChainBreak(previous.seq, previous.id, "altered (the next row holds another hash for it)")
        return ChainBreak(row.seq, row.id, "altered (the first row must follow the genesis hash)")
    if content and _digest(asdict(row), keys) != row.hash:
        return ChainBreak(row.seq, row.id, "altered (its content does not match its hash)")
    return None

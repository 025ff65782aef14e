"""Tests for bot/store/factors.py on SQLite and PostgreSQL, on a virtual clock: enrolment needs a code from the
new secret, a code works once, wrong codes lock the approver out, recovery codes work once, and the secret is
sealed in the database and outlives the process."""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pyotp
import pytest
from sqlalchemy import select

from bot.config import Secret, StorageConfig
from bot.core.approvals import Factor
from bot.core.totp import LOCK_S, MAX_FAILURES, RECOVERY_CODES, STEP_S, normal, recovery_hash
from bot.store import open_store
from bot.store.factors import CodePrompt, CodeStatus, FactorStore
from bot.store.tables import audit, second_factors

pytestmark = pytest.mark.anyio

KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
BOB = 1002


@dataclass
class Clock:
    now: float

    def __call__(self) -> float:
        return self.now


@dataclass
class Enrolled:
    factors: FactorStore
    clock: Clock
    secret: str
    recovery: list[str]

    def code(self, steps: int = 0) -> str:
        """The app's code `steps` steps from now."""
        return pyotp.TOTP(self.secret).at(self.clock.now + steps * STEP_S)


@pytest.fixture
async def enrolled(store_url: str) -> AsyncIterator[Enrolled]:
    """Bob enrolled (a minute ago on the real clock, so codes of now are later steps)."""
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as store:
        clock = Clock(time.time() - 60)
        factors = FactorStore(store.engine, KEY, clock, log=store.audit)
        secret = await factors.begin(BOB)
        checked, recovery = await factors.confirm(BOB, pyotp.TOTP(secret).at(clock.now))
        assert checked.ok
        clock.now += STEP_S
        yield Enrolled(factors, clock, secret, recovery)


async def test_enrolment_needs_a_code_from_the_new_secret_and_keeps_it_sealed(store_url: str) -> None:
    """Until a code from the new secret comes, Bob is not enrolled and no code is accepted; a wrong code is
    counted; the right one finishes it with ten recovery codes, stored only as hashes, the secret sealed."""
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as store:
        clock = Clock(1_800_000_000.0)
        factors = FactorStore(store.engine, KEY, clock)
        secret = await factors.begin(BOB)
        totp = pyotp.TOTP(secret)
        assert await factors.enrolling(BOB) and not await factors.enrolled(BOB)
        assert (await factors.check(BOB, totp.at(clock.now))).status is CodeStatus.NOT_ENROLLED

        wrong, none = await factors.confirm(BOB, "000000" if totp.at(clock.now) != "000000" else "111111")
        assert (wrong.status, wrong.left, none) == (CodeStatus.WRONG, MAX_FAILURES - 1, [])
        right, recovery = await factors.confirm(BOB, totp.at(clock.now))
        assert right.ok and len(recovery) == RECOVERY_CODES == len(set(recovery))
        assert await factors.enrolled(BOB) and not await factors.enrolling(BOB)
        async with store.engine.connect() as conn:
            row = (await conn.execute(select(second_factors))).one()
    stored = " ".join(str(v) for v in row)
    assert secret not in stored
    assert not any(code in stored or normal(code) in stored for code in recovery)  # as shown, or as typed
    assert all(recovery_hash(code) in stored for code in recovery)


async def test_a_code_works_once_in_its_window_and_the_next_one_works(enrolled: Enrolled) -> None:
    """The code of now is accepted; sent again it is refused as used (and counted as wrong); the next
    step's code is accepted."""
    code = enrolled.code()
    first = await enrolled.factors.check(BOB, code)
    again = await enrolled.factors.check(BOB, code)
    enrolled.clock.now += STEP_S
    later = await enrolled.factors.check(BOB, enrolled.code())
    assert (first.status, first.factor) == (CodeStatus.OK, Factor.TOTP)
    assert (again.status, again.left) == (CodeStatus.USED, MAX_FAILURES - 1)
    assert later.ok


async def test_five_wrong_codes_lock_out_even_the_right_code_until_the_lock_ends(enrolled: Enrolled) -> None:
    """Four wrong codes count down; the fifth locks (an audit row says until when, after the one of the
    enrolment); then the right code is refused too, until LOCK_S later."""
    right = enrolled.code()
    wrong = next(c for c in ("123456", "654321") if c not in {right, enrolled.code(-1), enrolled.code(1)})
    lefts = [(await enrolled.factors.check(BOB, wrong)).left for _ in range(MAX_FAILURES - 1)]
    locked = await enrolled.factors.check(BOB, wrong)
    refused = await enrolled.factors.check(BOB, right)
    enrolled.clock.now += LOCK_S
    accepted = await enrolled.factors.check(BOB, enrolled.code())
    assert lefts == [4, 3, 2, 1]
    assert locked.status is CodeStatus.LOCKED and locked.until == pytest.approx(enrolled.clock.now)
    assert refused.status is CodeStatus.LOCKED
    assert accepted.ok
    async with enrolled.factors.engine.connect() as conn:
        rows = (await conn.execute(select(audit.c.event, audit.c.user_id).order_by(audit.c.seq))).all()
    assert [tuple(r) for r in rows if r.event.startswith("second_factor")] == [
        ("second_factor_enrolled", BOB),
        ("second_factor_locked", BOB),
    ]


async def test_a_recovery_code_works_once_in_place_of_the_app_code(enrolled: Enrolled) -> None:
    """Typed with spaces or in capitals it still counts, as a recovery code; a second time it does not."""
    code = enrolled.recovery[3]
    first = await enrolled.factors.check(BOB, f" {code.upper()} ")
    again = await enrolled.factors.check(BOB, code)
    assert (first.status, first.factor, first.recovery_left) == (
        CodeStatus.OK,
        Factor.RECOVERY,
        RECOVERY_CODES - 1,
    )
    assert again.status is CodeStatus.WRONG


async def test_an_enrolment_outlives_the_process(enrolled: Enrolled, store_url: str) -> None:
    """The store opened afresh (a restart) knows Bob is enrolled and accepts his app's code of now."""
    async with open_store(StorageConfig(url=Secret(store_url), secret_key=Secret(KEY))) as again:
        assert again.factors is not None and await again.factors.enrolled(BOB)
        checked = await again.factors.check(BOB, pyotp.TOTP(enrolled.secret).now())
    assert checked.ok


async def test_a_code_prompt_is_kept_per_approver_until_it_ends_and_is_answered_once(
    enrolled: Enrolled,
) -> None:
    """The prompt Bob's next code answers is in the database (the request, its content hash, the card, the
    message asking): a newer Approve replaces it, it is answered once, and after its end it is gone."""
    factors, clock = enrolled.factors, enrolled.clock
    assert await factors.asked(BOB) is None
    await factors.ask(BOB, CodePrompt("req-1", 0, "a" * 64, (-7001, 5), clock.now + 600))
    await factors.ask(BOB, CodePrompt("req-2", 3, "b" * 64, None, clock.now + 600))
    await factors.asked_in(BOB, "req-2", 42)
    assert await factors.asked(BOB) == CodePrompt("req-2", 3, "b" * 64, None, clock.now + 600, 42)
    assert not await factors.answered(BOB, "req-1")
    assert await factors.answered(BOB, "req-2") and not await factors.answered(BOB, "req-2")
    assert await factors.asked(BOB) is None

    await factors.ask(BOB, CodePrompt("req-3", 0, "c" * 64, (-7001, 6), clock.now + 600))
    assert (await factors.asked(BOB)) == CodePrompt("req-3", 0, "c" * 64, (-7001, 6), clock.now + 600)
    clock.now += 600
    assert await factors.asked(BOB) is None

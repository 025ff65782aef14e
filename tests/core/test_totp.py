"""The pure parts of the second factor: `tally` never counts a tap alone where a rule asks for a code
(bot/core/approvals.py), and codes and their step (bot/core/totp.py)."""

from __future__ import annotations

import pyotp

from bot.core.approvals import ApprovalState, ApprovalStatus, Ballot, Factor, Vote, tally
from bot.core.totp import STEP_S, matching_step, new_secret

AT = "2026-12-07T03:00:00+00:00"


def state(factor: Factor = Factor.TOTP, ballots: tuple[Ballot, ...] = ()) -> ApprovalState:
    return ApprovalState(
        id="a1",
        requester_id=1001,
        approvers=frozenset({2002, 3003}),
        quorum=1,
        self_approval=False,
        content_hash="h",
        factor=factor,
        ballots=ballots,
    )


def test_a_tap_alone_is_refused_as_needing_a_code_and_changes_nothing() -> None:
    """Approve without a code on a rule with a second factor: refused (the host asks for the code); with
    the code it counts and decides. A reject needs no code."""
    refused = tally(state(), 2002, "Bob", Vote.APPROVE, AT)
    counted = tally(state(), 2002, "Bob", Vote.APPROVE, AT, factor=Factor.TOTP)
    rejected = tally(state(), 3003, "Carol", Vote.REJECT, AT)
    assert refused.needs_code and refused.refusal and refused.state == state()
    assert counted.state.status is ApprovalStatus.APPROVED and counted.ballot is not None
    assert counted.ballot.factor is Factor.TOTP
    assert rejected.state.status is ApprovalStatus.REJECTED


def test_a_stored_tap_on_a_request_that_needs_a_code_does_not_count() -> None:
    """A ballot without a code (written by an older version, or straight into the database) is no approval
    of a request whose rule asks for a code; on a tap-only request it is."""
    tap = Ballot(2002, "Bob", Vote.APPROVE, "h", AT, Factor.TAP)
    assert state(ballots=(tap,)).approvals == ()
    assert state(Factor.TAP, (tap,)).approvals == (tap,)


def test_a_code_matches_its_step_and_the_next_only_once_past_the_last_used() -> None:
    """The code of now is found for its step; not when that step was already used; one step of drift
    either way is accepted, two are not."""
    secret, now = new_secret(), 1_800_000_000.0
    step = int(now) // STEP_S
    totp = pyotp.TOTP(secret)
    assert matching_step(secret, totp.at(now), now, -1) == step
    assert matching_step(secret, totp.at(now), now, step) is None
    assert matching_step(secret, totp.at(now + STEP_S), now, step) == step + 1
    assert matching_step(secret, totp.at(now + 2 * STEP_S), now, -1) is None

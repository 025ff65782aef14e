"""Tests for bot/config/'s `[[approvals]]`."""

from __future__ import annotations

import tomllib

import pytest

from bot.config import ApprovalGate, ConfigError, parse_config

BASE = '[telegram]\nallowed_users = [1001]\n[servers.prod]\ncommand = "python"\n[servers.demo]\ncommand = "python"\n'


def parse(text: str) -> object:
    return parse_config(tomllib.loads(BASE + text), {})


def problems(text: str) -> tuple[str, ...]:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    return caught.value.problems


def test_a_rule_with_only_the_required_keys_takes_the_defaults() -> None:
    """quorum 1, each approver privately, no self-approval, gate "call"."""
    config = parse_config(
        tomllib.loads(BASE + '[[approvals]]\nservers = ["prod"]\ntools = ["deploy*"]\napprovers = [2001]\n'),
        {},
    )
    (rule,) = config.approvals
    assert rule.quorum == 1 and rule.chat is None and rule.self_approval is False
    assert rule.gate is ApprovalGate.CALL and rule.timeout_s > 0
    assert config.approvers == frozenset({2001})


def test_tool_patterns_match_shell_style_on_the_named_servers_only() -> None:
    """`deploy*` covers prod's deploy and deploy_eu, not rollback, and nothing of demo."""
    config = parse_config(
        tomllib.loads(
            BASE
            + '[[approvals]]\nservers = ["prod"]\ntools = ["deploy*", "rotate_key"]\napprovers = [2001]\n'
        ),
        {},
    )
    assert config.approval_rule("prod", "deploy") is not None
    assert config.approval_rule("prod", "deploy_eu") is not None
    assert config.approval_rule("prod", "rotate_key") is not None
    assert config.approval_rule("prod", "rollback") is None
    assert config.approval_rule("demo", "deploy") is None


def test_every_key_is_read() -> None:
    """All eight keys, with a group chat and the answers gate."""
    config = parse_config(
        tomllib.loads(
            BASE
            + '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [2001, 2002, 2003]\nquorum = 2\n'
            'chat = -1001234567890\nself_approval = true\ntimeout_s = 60\ngate = "answers"\n'
        ),
        {},
    )
    (rule,) = config.approvals
    assert (rule.quorum, rule.chat, rule.self_approval, rule.timeout_s, rule.gate) == (
        2,
        -1001234567890,
        True,
        60.0,
        ApprovalGate.ANSWERS,
    )


def test_missing_and_bad_keys_are_named() -> None:
    """Each problem names its key under approvals[i]."""
    found = problems(
        '[[approvals]]\nservers = ["nope"]\ntools = []\nquorum = 0\ngate = "vote"\nchat = "x"\ncolour = 1\n'
    )
    assert "approvals[0].servers[0]: no server 'nope' is configured" in found
    assert "approvals[0].tools: must list at least one" in found
    assert "approvals[0].approvers: required" in found
    assert "approvals[0].quorum: must be a positive integer" in found
    assert any(p.startswith("approvals[0].gate: must be one of 'call', 'answers'") for p in found)
    assert any(p.startswith("approvals[0].chat: must be a Telegram chat id") for p in found)
    assert any(p.startswith("approvals[0].colour: unknown key") for p in found)


def test_a_quorum_larger_than_the_approvers_is_an_error() -> None:
    """3 of 2 can never be reached."""
    found = problems(
        '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [2001, 2002]\nquorum = 3\n'
    )
    assert found == ("approvals[0].quorum: 3 approvals needed but only 2 approvers",)


def test_a_quorum_an_approving_requester_could_never_reach_is_an_error() -> None:
    """2 of 2 with self_approval = false, and approver 1001 may call tools: their own request could never
    be approved. The same rule with self_approval = true, or approvers who cannot call, is fine."""
    rule = '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [1001, 2002]\nquorum = 2\n'
    (found,) = problems(rule)
    assert found.startswith("approvals[0].quorum: 2 approvals needed, but with self_approval = false")
    assert "1001 is in telegram.allowed_users" in found
    parse(rule + "self_approval = true\n")
    parse(rule.replace("1001, 2002", "2001, 2002"))


def test_the_second_rule_is_named_by_its_place() -> None:
    """Problems in the second table say approvals[1]."""
    ok = '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [2001]\n'
    found = problems(ok + '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [0]\n')
    assert found == ("approvals[1].approvers[0]: not a Telegram user id (a positive integer)",)


def test_a_second_factor_needs_the_key_that_seals_the_authenticator_secrets() -> None:
    """`second_factor = "totp"` without `[storage] secret_key` is refused naming the rule's key; an unknown
    factor names the one allowed; with a key the rule asks for TOTP."""
    rule = '[[approvals]]\nservers = ["prod"]\ntools = ["deploy"]\napprovers = [2001]\nsecond_factor = "{}"\n'
    storage = '[storage]\nurl = "sqlite:///x.db"\n'
    key = 'secret_key = "' + "A" * 43 + '="\n'
    assert problems(storage + rule.format("totp")) == (
        "approvals[0].second_factor: needs [storage] secret_key (the authenticator secrets are kept sealed with it)",
    )
    assert problems(storage + key + rule.format("sms")) == (
        "approvals[0].second_factor: must be one of 'totp'",
    )
    config = parse_config(tomllib.loads(BASE + storage + key + rule.format("totp")), {})
    assert config.approvals[0].second_factor == "totp"


def test_reminder_and_escalation_keys_are_read_and_escalated_approvers_pass_the_gate() -> None:
    """`remind_after_s`, `escalate_after_s` and `escalate_to`: read, off by default, and the people a rule
    escalates to may tap approval cards (they are among `approvers`)."""
    rule = '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [2001]\ntimeout_s = 1800\n'
    config = parse_config(
        tomllib.loads(
            BASE + rule + "remind_after_s = 300\nescalate_after_s = 900\nescalate_to = [2002, 2003]\n"
        ),
        {},
    )
    (nudged,) = config.approvals
    assert (nudged.remind_after_s, nudged.escalate_after_s, nudged.escalate_to) == (
        300.0,
        900.0,
        frozenset({2002, 2003}),
    )
    assert config.approvers == frozenset({2001, 2002, 2003})
    (plain,) = parse_config(tomllib.loads(BASE + rule), {}).approvals
    assert (plain.remind_after_s, plain.escalate_after_s, plain.escalate_to) == (None, None, frozenset())


def test_escalation_needs_both_keys_and_every_step_comes_before_the_timeout() -> None:
    """`escalate_after_s` without `escalate_to` (or the reverse) is named; a reminder or an escalation at or
    after `timeout_s` could never happen."""
    rule = '[[approvals]]\nservers = ["prod"]\ntools = ["*"]\napprovers = [2001]\ntimeout_s = 600\n'
    assert problems(rule + "escalate_after_s = 300\n") == (
        "approvals[0].escalate_to: required with escalate_after_s",
    )
    assert problems(rule + "escalate_to = [2002]\n") == (
        "approvals[0].escalate_after_s: required with escalate_to",
    )
    found = problems(rule + "remind_after_s = 600\nescalate_after_s = 900\nescalate_to = [2002]\n")
    assert found == (
        "approvals[0].remind_after_s: must be less than timeout_s (600): the request ends then",
        "approvals[0].escalate_after_s: must be less than timeout_s (600): the request ends then",
    )

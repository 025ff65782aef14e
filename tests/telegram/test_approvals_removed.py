"""An approval that completes after its requester was removed from the people allowed (which takes a restart):
the call is not run for them. End to end: the installed bot on SQLite, restarted with the new config."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.telegram import FakeTelegram
from tests.telegram.test_approvals_restart import ALICE_ID, BOB_ID, CAROL_ID, OPS, config_text, ledger_lines
from tests.telegram.test_drain import bot_process

pytestmark = pytest.mark.anyio


async def test_a_call_approved_after_its_requester_was_removed_and_the_bot_restarted_is_not_run(
    tmp_path: Path,
) -> None:
    """Alice asks for a gated deploy and Bob approves (1 of 2); she is then removed from `allowed_users`, which
    takes a restart. Carol's approval completes the request on the new process, which does not run the call for
    someone who may no longer use the bot, and says so."""
    db, ledger, config = tmp_path / "bot.db", tmp_path / "ledger.jsonl", tmp_path / "bot.toml"
    async with FakeTelegram() as fake:
        alice = fake.user(id=ALICE_ID, first_name="Alice")
        bob = fake.user(id=BOB_ID, first_name="Bob")
        carol = fake.user(id=CAROL_ID, first_name="Carol")
        fake.group(OPS, title="On-call", members=[alice, bob, carol])
        config.write_text(config_text(fake, db, ledger))
        async with bot_process(config, fake) as first:
            await fake.wait_for_call("setMyCommands", timeout=30)
            await alice.send("/call prod deploy service=web version=1.2.3")
            card = await fake.wait_for(lambda m: m.chat_id == OPS and bool(m.reply_markup), timeout=30)
            await bob.press(card, "✅ Approve", timeout=30)
            await fake.wait_for(lambda m: m is card and "Approved by Bob, 1 of 2" in m.text, timeout=30)
            assert await first.terminate() == 0
        removed = f"allowed_users = [{ALICE_ID}, {BOB_ID}]"
        config.write_text(config_text(fake, db, ledger).replace(removed, f"allowed_users = [{BOB_ID}]"))
        async with bot_process(config, fake) as second:
            answer = await carol.press(card, "✅ Approve", timeout=60)
            assert not answer.show_alert, answer.text
            said = await fake.wait_for(
                lambda m: m.chat_id == ALICE_ID and "may no longer use the bot; not run" in m.text, timeout=60
            )
            assert await second.terminate() == 0
    assert "deploy" in said.text
    assert ledger_lines(ledger) == []

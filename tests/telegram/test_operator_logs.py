"""What an operator sees at INFO: one line per tool call and one per refused stranger, never private values."""

from __future__ import annotations

import json
import logging

import anyio
import pytest

from bot.core import CallStatus, ToolOutcome
from bot.logs import REFUSED_LOGGER, OncePerKeyFilter, setup_logging
from mapping import Submit, TextInput
from tests.fakes.surface import ALICE, fill
from tests.servers.test_mcp_hub import in_process
from tests.telegram.harness import MALLORY_ID, bot_scene

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.mark.anyio
async def test_each_call_logs_one_info_line_with_who_what_outcome_and_duration_but_no_values(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call with an argument and an answer: one line naming server, tool, user, chat, outcome, duration."""
    caplog.set_level(logging.INFO, logger="bot.servers.hub")
    results: list[ToolOutcome] = []
    async with in_process("auto") as (hub, prompts, surface):

        async def call() -> None:
            arguments = {"schema_json": json.dumps(SCHEMA), "message": "ARGUMENT-VALUE"}
            results.append(await hub.call_tool("t", "ask_form", arguments, ALICE))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            prompt = await surface.next_prompt()
            prompts.answer(prompt, fill(prompt, TextInput("ANSWER-VALUE"), Submit()))
    assert results[0].status is CallStatus.OK and "ANSWER-VALUE" in results[0].text
    lines = [
        r.getMessage() for r in caplog.records if r.name == "bot.servers.hub" and r.levelno == logging.INFO
    ]
    assert len(lines) == 1
    assert lines[0].startswith(f"call t/ask_form by user {ALICE.user_id} in chat {ALICE.chat_id}: ok in ")
    assert lines[0].endswith(" s")
    assert "ARGUMENT-VALUE" not in caplog.text and "ANSWER-VALUE" not in caplog.text


@pytest.mark.anyio
async def test_a_refused_stranger_is_logged_with_their_id(caplog: pytest.LogCaptureFixture) -> None:
    """The deny-by-default gate logs the stranger's user id at INFO (what an admin adds to allowed_users)."""
    caplog.set_level(logging.INFO, logger=REFUSED_LOGGER)
    async with bot_scene() as s:
        await s.mallory.send("/call demo echo text=hi")
        await s.fake.next_message(s.mallory)
    refused = [r for r in caplog.records if r.name == REFUSED_LOGGER]
    assert [r.getMessage() for r in refused] == [f"refused Telegram user {MALLORY_ID}"]
    assert refused[0].levelno == logging.INFO


def _record(user: int) -> logging.LogRecord:
    return logging.LogRecord(
        REFUSED_LOGGER, logging.INFO, __file__, 1, "refused Telegram user %s", (user,), None
    )


def test_refusals_are_logged_once_per_stranger_per_period() -> None:
    """A stranger who keeps writing is logged once per period; another stranger still is; later, again."""
    now = [0.0]
    limit = OncePerKeyFilter(3600, clock=lambda: now[0], max_keys=2)
    assert limit.filter(_record(1))
    assert not limit.filter(_record(1))
    assert limit.filter(_record(2))
    now[0] = 3600.0
    assert limit.filter(_record(1))
    assert limit.filter(_record(3)) and limit.filter(_record(4))  # 1 and 2 forgotten: memory stays bounded
    assert limit.filter(_record(2))


def test_setup_logging_rate_limits_the_refusal_logger() -> None:
    """The running bot's logging set-up puts the limit on the refusal logger (once, however often it runs)."""
    root, refused = logging.getLogger(), logging.getLogger(REFUSED_LOGGER)
    saved = (list(root.handlers), root.level)
    try:
        setup_logging("INFO")
        setup_logging("INFO")
        filters = list(refused.filters)
    finally:  # leave logging as the other tests expect it
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])
        for added in list(refused.filters):
            refused.removeFilter(added)
    assert len(filters) == 1 and isinstance(filters[0], OncePerKeyFilter)

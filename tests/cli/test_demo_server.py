"""The demo server end to end with the plain SDK `Client`, in both protocol eras and over every transport."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client, MCPError, StdioServerParameters, UrlElicitationRequiredError, stdio_client

from bot.demo_server import build_server
from tests.fakes.servers.http import serve_http
from tests.fakes.servers.scripted import Inbox, ScriptedUser, accept, cancel, decline

REPO_ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = {"legacy": "2025-11-25", "auto": "2026-07-28"}

DEPLOY_TARGET_SCHEMA = {
    "type": "object",
    "properties": {
        "environment": {
            "type": "string",
            "title": "Environment",
            "oneOf": [
                {"const": "staging", "title": "Staging (safe to try)"},
                {"const": "production", "title": "Production (live)"},
            ],
        }
    },
    "required": ["environment"],
}
DEPLOY_CONFIRM_SCHEMA = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Deploy now?"}},
    "required": ["confirm"],
}
BOOKING_SCHEMA = {
    "type": "object",
    "properties": {
        "party_size": {
            "type": "integer",
            "title": "Party size",
            "description": "Number of guests, 1 to 12",
            "minimum": 1,
            "maximum": 12,
        },
        "date": {"type": "string", "format": "date", "title": "Date"},
        "time": {
            "type": "string",
            "title": "Time",
            "enum": ["18:00", "18:30", "19:00", "19:30", "20:00", "20:30", "21:00"],
        },
        "email": {
            "type": "string",
            "format": "email",
            "title": "Email",
            "description": "Where to send the confirmation",
        },
        "outdoor": {"type": "boolean", "title": "Outdoor seating", "default": False},
        "notes": {
            "type": "string",
            "title": "Notes",
            "description": "Anything the restaurant should know",
            "default": "",
        },
        "dietary": {
            "type": "array",
            "title": "Dietary needs",
            "items": {"type": "string", "enum": ["vegetarian", "vegan", "gluten-free", "nut allergy"]},
        },
    },
    "required": ["party_size", "date", "time", "email"],
}


@pytest.fixture(params=["legacy", "auto"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _schema(asked: dict[str, Any]) -> dict[str, Any]:
    """The requested schema without the model's own `title`, which only the 2025-11-25 rendering keeps."""
    return {key: value for key, value in asked["requestedSchema"].items() if key != "title"}


def _text(result: types.CallToolResult) -> str:
    assert not result.is_error, result.content
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    return content.text


@asynccontextmanager
async def _demo(mode: str, user: ScriptedUser, inbox: Inbox | None = None) -> AsyncIterator[Client]:
    async with Client(build_server(), mode=mode, elicitation_callback=user, message_handler=inbox) as client:
        assert client.protocol_version == PROTOCOL[mode]
        yield client


@pytest.mark.anyio
async def test_demo_lists_every_tool_with_its_arguments(mode: str) -> None:
    """tools/list shows the six demo tools with their real arguments (elicited answers are not arguments)."""
    async with _demo(mode, ScriptedUser([])) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == ["book_table", "connect_calendar", "deploy", "echo", "long_task", "sync_calendar"]
    assert list(tools["deploy"].input_schema["properties"]) == ["service"]
    assert tools["book_table"].input_schema["required"] == ["restaurant"]
    assert tools["long_task"].input_schema["properties"]["steps"]["default"] == 5
    assert all(tool.description for tool in tools.values())


@pytest.mark.anyio
async def test_deploy_asks_for_a_titled_choice_then_a_confirmation(mode: str) -> None:
    """deploy asks where (titled oneOf), then yes/no naming the choice, and deploys when both are accepted."""
    user = ScriptedUser([accept(environment="staging"), accept(confirm=True)])
    async with _demo(mode, user) as client:
        result = await client.call_tool("deploy", {})
    assert _text(result) == "Deployed web to staging"
    assert [asked["message"] for asked in user.asked] == [
        "Where should web be deployed?",
        "Deploy web to staging? The version running there will be replaced.",
    ]
    assert all(asked["mode"] == "form" for asked in user.asked)
    assert [_schema(asked) for asked in user.asked] == [DEPLOY_TARGET_SCHEMA, DEPLOY_CONFIRM_SCHEMA]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("answers", "expected", "questions"),
    [
        ([decline()], "Deployment declined", 1),
        ([cancel()], "Deployment cancelled", 1),
        ([accept(environment="production"), accept(confirm=False)], "Deployment declined", 2),
        ([accept(environment="production"), decline()], "Deployment declined", 2),
        ([accept(environment="production"), cancel()], "Deployment cancelled", 2),
    ],
)
async def test_deploy_reports_a_no_at_either_step(
    mode: str, answers: list[types.ElicitResult], expected: str, questions: int
) -> None:
    """A decline or cancel of the choice skips the confirmation; "no" to the confirmation declines."""
    user = ScriptedUser(list(answers))
    async with _demo(mode, user) as client:
        result = await client.call_tool("deploy", {"service": "api"})
    assert _text(result) == expected
    assert len(user.asked) == questions


@pytest.mark.anyio
async def test_book_table_asks_one_form_with_every_field_kind(mode: str) -> None:
    """book_table asks one form (integer range, date, enum, email, boolean, text, multi-select), echoes it."""
    answer = accept(
        party_size=4,
        date="2026-05-01",
        time="19:30",
        email="ann@example.com",
        outdoor=True,
        notes="window seat",
        dietary=["vegan", "gluten-free"],
    )
    user = ScriptedUser([answer])
    async with _demo(mode, user) as client:
        result = await client.call_tool("book_table", {"restaurant": "Luigi's"})
    assert _text(result) == (
        "Booked a table for 4 at Luigi's on 2026-05-01 at 19:30, outdoors.\n"
        "Confirmation goes to ann@example.com.\n"
        "Dietary needs: vegan, gluten-free.\n"
        "Notes: window seat"
    )
    [asked] = user.asked
    assert asked["message"] == "Book a table at Luigi's: who is coming, and when?"
    assert _schema(asked) == BOOKING_SCHEMA


@pytest.mark.anyio
async def test_book_table_fills_in_the_optional_fields(mode: str) -> None:
    """Only the required fields answered: indoors, no notes, no dietary line."""
    user = ScriptedUser([accept(party_size=2, date="2026-06-30", time="18:00", email="bo@example.com")])
    async with _demo(mode, user) as client:
        result = await client.call_tool("book_table", {"restaurant": "Chez Bo"})
    assert _text(result) == (
        "Booked a table for 2 at Chez Bo on 2026-06-30 at 18:00, indoors.\n"
        "Confirmation goes to bo@example.com."
    )


@pytest.mark.anyio
async def test_book_table_reports_a_declined_form(mode: str) -> None:
    """Declining the form books nothing."""
    async with _demo(mode, ScriptedUser([decline()])) as client:
        result = await client.call_tool("book_table", {"restaurant": "Luigi's"})
    assert _text(result) == "Booking declined"


@pytest.mark.anyio
async def test_connect_calendar_sends_a_link_and_completes_it_where_the_era_allows(mode: str) -> None:
    """URL mode: 2025-11-25 carries an elicitationId and completes it; 2026-07-28 has neither."""
    user, inbox = ScriptedUser([accept()]), Inbox()
    async with _demo(mode, user, inbox) as client:
        result = await client.call_tool("connect_calendar", {})
        [asked] = user.asked
        if mode == "legacy":
            with anyio.fail_after(5):
                await inbox.wait_for_completion(asked["elicitationId"])
    assert _text(result) == "Calendar connected"
    assert asked["mode"] == "url"
    assert asked["message"] == "Sign in to your calendar provider to connect your calendar."
    assert asked["url"].startswith("https://example.com/calendar/connect?state=")
    if mode == "legacy":
        assert asked["url"].endswith(asked["elicitationId"])
    else:
        assert "elicitationId" not in asked
        assert inbox.completed_ids() == []


@pytest.mark.anyio
@pytest.mark.parametrize(("answer", "expected"), [(decline(), "declined"), (cancel(), "cancelled")])
async def test_connect_calendar_reports_a_refused_link(
    mode: str, answer: types.ElicitResult, expected: str
) -> None:
    """Declining or cancelling the link connects nothing and completes nothing."""
    inbox = Inbox()
    async with _demo(mode, ScriptedUser([answer]), inbox) as client:
        result = await client.call_tool("connect_calendar", {})
    assert _text(result) == f"Calendar connection {expected}"
    assert inbox.completed_ids() == []


@pytest.mark.anyio
async def test_sync_calendar_requires_authorization_once_then_succeeds(mode: str) -> None:
    """The first call fails with -32042 carrying a link; the retry succeeds (legacy: completing the link)."""
    user, inbox = ScriptedUser([]), Inbox()
    async with _demo(mode, user, inbox) as client:
        with pytest.raises(MCPError) as raised:
            await client.call_tool("sync_calendar", {})
        assert raised.value.code == types.URL_ELICITATION_REQUIRED
        [link] = UrlElicitationRequiredError.from_error(raised.value.error).elicitations
        assert _text(await client.call_tool("sync_calendar", {})) == "Calendar synced: 3 new events"
        if mode == "legacy":
            with anyio.fail_after(5):
                await inbox.wait_for_completion(link.elicitation_id or "")
        assert _text(await client.call_tool("sync_calendar", {})) == "Calendar synced: 3 new events"
    assert link.message == "Allow calendar sync to read your calendar, then try again."
    assert link.url == f"https://example.com/calendar/authorize?state={link.elicitation_id}"
    assert user.asked == []  # -32042 is an error, never a question to the callback


@pytest.mark.anyio
async def test_long_task_reports_progress_after_every_step(mode: str) -> None:
    """long_task sends progress i/steps with a message for each step, then a summary."""
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with _demo(mode, ScriptedUser([])) as client:
        result = await client.call_tool("long_task", {"steps": 3}, progress_callback=on_progress)
    assert _text(result) == "Finished all 3 steps"
    assert seen == [(1, 3, "Step 1 of 3 done"), (2, 3, "Step 2 of 3 done"), (3, 3, "Step 3 of 3 done")]


@pytest.mark.anyio
async def test_echo_returns_its_text(mode: str) -> None:
    """echo is the plain tool: no questions asked."""
    user = ScriptedUser([])
    async with _demo(mode, user) as client:
        assert _text(await client.call_tool("echo", {"text": "héllo <b>"})) == "héllo <b>"
    assert user.asked == []


@pytest.fixture
def stderr_log(tmp_path: Path) -> Iterator[Any]:
    with (tmp_path / "stderr.log").open("w+") as log:
        yield log


@pytest.mark.anyio
@pytest.mark.slow
async def test_demo_runs_over_stdio_without_writing_to_stderr(mode: str, stderr_log: Any) -> None:
    """`python -m bot.demo_server` serves a whole deploy over stdio and keeps stderr quiet."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.demo_server"], cwd=str(REPO_ROOT))
    user = ScriptedUser([accept(environment="production"), accept(confirm=True)])
    with anyio.fail_after(30):
        async with Client(
            stdio_client(params, errlog=stderr_log), mode=mode, elicitation_callback=user
        ) as client:
            assert client.protocol_version == PROTOCOL[mode]
            result = await client.call_tool("deploy", {"service": "shop"})
    assert _text(result) == "Deployed shop to production"
    stderr_log.seek(0)
    assert stderr_log.read() == ""


@pytest.mark.anyio
@pytest.mark.slow
async def test_demo_runs_over_streamable_http(mode: str) -> None:
    """Over HTTP the demo asks its questions and keeps authorization per session (legacy) or shared (2026)."""
    user = ScriptedUser([accept(environment="staging"), accept(confirm=True)])
    with anyio.fail_after(30):
        async with serve_http(build_server) as url:
            async with Client(url, mode=mode, elicitation_callback=user) as first:
                assert first.protocol_version == PROTOCOL[mode]
                assert _text(await first.call_tool("deploy", {})) == "Deployed web to staging"
                with pytest.raises(MCPError):
                    await first.call_tool("sync_calendar", {})
                assert _text(await first.call_tool("sync_calendar", {})) == "Calendar synced: 3 new events"
            async with Client(url, mode=mode, elicitation_callback=ScriptedUser([])) as second:
                if mode == "legacy":  # a new Mcp-Session-Id: authorized nothing yet
                    with pytest.raises(MCPError) as raised:
                        await second.call_tool("sync_calendar", {})
                    assert raised.value.code == types.URL_ELICITATION_REQUIRED
                else:  # no sessions in 2026-07-28: the demo cannot tell the two clients apart
                    assert (
                        _text(await second.call_tool("sync_calendar", {})) == "Calendar synced: 3 new events"
                    )

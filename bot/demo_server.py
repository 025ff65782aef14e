"""The bundled demo MCP server: one tool for each kind of elicitation, working in both protocol eras.

I/O: a server process. `python -m bot.demo_server` serves stdio; `--http PORT [--host H]` serves HTTP at /mcp.

A 2026-07-28 question's `requestState` is sealed with a key that outlives the process: `DEMO_STATE_KEY`
from the environment, else a key file made on first start under the state folder (`--state-dir`,
`DEMO_STATE_DIR`, or `$XDG_STATE_HOME/toolnexus-demo`), so a restarted server accepts the rounds its
predecessor issued (a client resuming a question after its own restart needs that).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import anyio
import mcp_types as types
from mcp import UrlElicitationRequiredError
from mcp.server.mcpserver import (
    AcceptedElicitation,
    CancelledElicitation,
    Context,
    DeclinedElicitation,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, Field

from bot.files import private_folder

__all__ = ["STATE_KEY_ENV", "build_server", "main", "state_key"]

STATE_KEY_ENV: Final = "DEMO_STATE_KEY"
"""The environment variable holding the key that seals `requestState` (any text; 32+ random characters)."""
STATE_KEY_FILE: Final = "request-state.key"

# How a server asks the user something depends on the protocol revision the client negotiated:
#
# * 2025-11-25 ("legacy"): the server sends an `elicitation/create` request in the middle of the tool call.
# * 2026-07-28: there are no server-to-client requests; the tool *returns* an `input_required` result that
#   holds the questions, and the client calls the tool again with the answers.
#
# Forms written with `Resolve(...)` + `Elicit(...)` (`deploy`, `book_table`) work in both eras unchanged: the
# SDK picks the transport. URL mode has no such helper yet, so `connect_calendar` writes out both paths.
# Never print to stdout here: over stdio it is the protocol's wire.

CALENDAR_CONNECT_URL: Final = "https://example.com/calendar/connect"
CALENDAR_AUTHORIZE_URL: Final = "https://example.com/calendar/authorize"
LONG_TASK_STEP_SECONDS: Final = 0.05
_CONNECT_CALENDAR_KEY: Final = "connect_calendar"


def _uses_input_required(ctx: Context[Any]) -> bool:
    """True from 2026-07-28 on: questions travel inside the tool's result, not as requests to the client."""
    return ctx.protocol_version is not None and is_version_at_least(ctx.protocol_version, "2026-07-28")


def _require_url_mode(ctx: Context[Any]) -> None:
    """The spec forbids sending a URL elicitation to a client that did not declare `elicitation.url`."""
    capabilities = ctx.client_capabilities
    elicitation = capabilities.elicitation if capabilities is not None else None
    if elicitation is None or elicitation.url is None:
        raise ToolError("This client cannot open links (it does not support URL elicitation)")


def _not_done(what: str, action: str) -> str:
    """The reply when the user said no ("decline") or backed out ("cancel")."""
    return f"{what} {'cancelled' if action == 'cancel' else 'declined'}"


# --- Per-connection state -----------------------------------------------------------------------------------


@dataclass(slots=True)
class DemoState:
    """What the server remembers between tool calls (see `_caller` for how far it is shared)."""

    pending_authorizations: dict[str, str] = field(default_factory=dict)
    """Caller -> id of the URL elicitation it was sent by `sync_calendar`."""
    authorized_callers: set[str] = field(default_factory=set)
    """Callers that completed the calendar authorization."""


@asynccontextmanager
async def _lifespan(server: MCPServer[DemoState]) -> AsyncIterator[DemoState]:
    # The lifespan runs once per stdio process or in-process client, but only once for a whole HTTP server.
    yield DemoState()


def _caller(ctx: Context[DemoState]) -> str:
    """Who is calling: over stdio the whole process serves one client; over HTTP, the `Mcp-Session-Id`.

    2026-07-28 has no sessions at all, so over HTTP its clients all look alike here; a real server keys
    such state by the authenticated user instead.
    """
    return (ctx.headers or {}).get("mcp-session-id", "this connection")


# --- deploy: a single choice, then a yes/no confirmation ----------------------------------------------------


def _titled_choices(titles: Mapping[str, str]) -> Callable[[dict[str, Any]], None]:
    """Render a `Literal` field as a titled single choice (`oneOf` of const/title), not a bare `enum`."""

    def render(schema: dict[str, Any]) -> None:
        schema.pop("enum", None)
        schema["oneOf"] = [{"const": value, "title": title} for value, title in titles.items()]

    return render


class DeployTarget(BaseModel):
    environment: Literal["staging", "production"] = Field(
        title="Environment",
        json_schema_extra=_titled_choices(
            {"staging": "Staging (safe to try)", "production": "Production (live)"}
        ),
    )


class DeployConfirmation(BaseModel):
    confirm: bool = Field(title="Deploy now?")


async def choose_environment(service: str) -> Elicit[DeployTarget]:
    return Elicit(f"Where should {service} be deployed?", DeployTarget)


async def confirm_deployment(
    service: str, target: Annotated[ElicitationResult[DeployTarget], Resolve(choose_environment)]
) -> Elicit[DeployConfirmation] | None:
    if not isinstance(target, AcceptedElicitation):
        return None  # nothing to confirm: `deploy` reports the declined or cancelled choice
    environment = target.data.environment
    return Elicit(
        f"Deploy {service} to {environment}? The version running there will be replaced.", DeployConfirmation
    )


async def deploy(
    target: Annotated[ElicitationResult[DeployTarget], Resolve(choose_environment)],
    confirmation: Annotated[ElicitationResult[DeployConfirmation], Resolve(confirm_deployment)],
    service: str = "web",
) -> str:
    """Deploy a service: asks where to (a choice), then asks for confirmation (yes/no)."""
    if not isinstance(target, AcceptedElicitation):
        return _not_done("Deployment", target.action)
    if not isinstance(confirmation, AcceptedElicitation):
        return _not_done("Deployment", confirmation.action)
    if not confirmation.data.confirm:
        return "Deployment declined"
    return f"Deployed {service} to {target.data.environment}"


# --- book_table: one form with every kind of field ----------------------------------------------------------


class Booking(BaseModel):
    party_size: int = Field(ge=1, le=12, title="Party size", description="Number of guests, 1 to 12")
    date: dt.date = Field(title="Date")
    time: Literal["18:00", "18:30", "19:00", "19:30", "20:00", "20:30", "21:00"] = Field(title="Time")
    email: str = Field(
        title="Email", description="Where to send the confirmation", json_schema_extra={"format": "email"}
    )
    outdoor: bool = Field(default=False, title="Outdoor seating")
    notes: str = Field(default="", title="Notes", description="Anything the restaurant should know")
    dietary: list[Literal["vegetarian", "vegan", "gluten-free", "nut allergy"]] = Field(
        default_factory=list, title="Dietary needs"
    )


async def ask_booking(restaurant: str) -> Elicit[Booking]:
    return Elicit(f"Book a table at {restaurant}: who is coming, and when?", Booking)


async def book_table(
    restaurant: str, booking: Annotated[ElicitationResult[Booking], Resolve(ask_booking)]
) -> str:
    """Book a restaurant table: asks for the details in one form."""
    if not isinstance(booking, AcceptedElicitation):
        return _not_done("Booking", booking.action)
    b = booking.data
    lines = [
        f"Booked a table for {b.party_size} at {restaurant} on {b.date.isoformat()} at {b.time}, "
        f"{'outdoors' if b.outdoor else 'indoors'}.",
        f"Confirmation goes to {b.email}.",
    ]
    if b.dietary:
        lines.append(f"Dietary needs: {', '.join(b.dietary)}.")
    if b.notes:
        lines.append(f"Notes: {b.notes}")
    return "\n".join(lines)


# --- connect_calendar: URL mode, written out for both eras --------------------------------------------------


async def connect_calendar(ctx: Context[DemoState]) -> str | types.InputRequiredResult:
    """Connect a calendar: sends you to a sign-in page (a URL elicitation)."""
    _require_url_mode(ctx)
    message = "Sign in to your calendar provider to connect your calendar."
    if _uses_input_required(ctx):
        return _connect_calendar_by_result(ctx, message)

    # 2025-11-25: ask mid-call; the id lets the client match the completion notice below.
    elicitation_id = uuid.uuid4().hex
    answer = await ctx.elicit_url(message, f"{CALENDAR_CONNECT_URL}?state={elicitation_id}", elicitation_id)
    if isinstance(answer, DeclinedElicitation | CancelledElicitation):
        return _not_done("Calendar connection", answer.action)
    # A real server sends this when its OAuth callback fires; the demo has no callback, so it is done at once.
    await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
    return "Calendar connected"


def _connect_calendar_by_result(ctx: Context[DemoState], message: str) -> str | types.InputRequiredResult:
    """2026-07-28: return the question as a result; the client calls again with `input_responses`."""
    answer = (ctx.input_responses or {}).get(_CONNECT_CALENDAR_KEY)
    if not isinstance(answer, types.ElicitResult):
        url = f"{CALENDAR_CONNECT_URL}?state={uuid.uuid4().hex}"
        question = types.ElicitRequest(params=types.ElicitRequestURLParams(message=message, url=url))
        return types.InputRequiredResult(input_requests={_CONNECT_CALENDAR_KEY: question})
    if answer.action != "accept":
        return _not_done("Calendar connection", answer.action)
    return "Calendar connected"  # no completion notice exists in this era: the accepted answer is the end


# --- sync_calendar: "URL elicitation required" (-32042) -----------------------------------------------------


async def sync_calendar(ctx: Context[DemoState]) -> str:
    """Sync the calendar. The first call fails until you authorize access at a link; then call it again."""
    await _require_calendar_access(ctx)
    return "Calendar synced: 3 new events"


async def _require_calendar_access(ctx: Context[DemoState]) -> None:
    """Raise -32042 (URL elicitation required) unless this caller has authorized calendar access.

    A real server learns that the user finished from its OAuth callback. The demo never sees the browser,
    so the caller's next call after the error stands for "the user authorized".
    """
    state, caller = ctx.request_context.lifespan_context, _caller(ctx)
    if caller in state.authorized_callers:
        return
    elicitation_id = state.pending_authorizations.pop(caller, None)
    if elicitation_id is not None:
        state.authorized_callers.add(caller)
        if not _uses_input_required(ctx):  # 2026-07-28 removed the completion notice
            await ctx.session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)
        return
    _require_url_mode(ctx)
    elicitation_id = uuid.uuid4().hex
    state.pending_authorizations[caller] = elicitation_id
    authorize = types.ElicitRequestURLParams(
        message="Allow calendar sync to read your calendar, then try again.",
        url=f"{CALENDAR_AUTHORIZE_URL}?state={elicitation_id}",
        elicitation_id=elicitation_id,
    )
    raise UrlElicitationRequiredError([authorize])


# --- long_task and echo: no elicitation ---------------------------------------------------------------------


async def long_task(ctx: Context[DemoState], steps: Annotated[int, Field(ge=1, le=100)] = 5) -> str:
    """Run a task in steps, reporting progress after each one."""
    for step in range(1, steps + 1):
        await anyio.sleep(LONG_TASK_STEP_SECONDS)  # stands in for real work
        await ctx.report_progress(step, steps, f"Step {step} of {steps} done")
    return f"Finished all {steps} steps"


def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def state_key(environ: Mapping[str, str], state_dir: str | None = None) -> str:
    """The key sealing `requestState`: `DEMO_STATE_KEY`, else the key file under the state folder (made,
    readable by its owner only, on first use)."""
    key = environ.get(STATE_KEY_ENV, "")
    if key:
        return key
    folder = (
        state_dir
        or environ.get("DEMO_STATE_DIR")
        or os.path.join(
            environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"),
            "toolnexus-demo",
        )
    )
    path = os.path.join(folder, STATE_KEY_FILE)
    private_folder(Path(folder))
    if not os.path.exists(path):
        # Written whole under a name of its own, then linked into place: a server starting at the same time
        # reads either no file or the whole key, and when two race, the first link wins for both.
        draft = os.path.join(folder, f".{STATE_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as file:
                file.write(secrets.token_hex(32))
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        finally:
            os.unlink(draft)
    with open(path, encoding="ascii") as file:
        return file.read().strip()


def build_server(key: str | None = None) -> MCPServer[DemoState]:
    """A fresh server with fresh state: call once per process (or per test). With `key`, `requestState` is
    sealed with it (a restarted server accepts its predecessor's rounds); else with a key of this process."""
    server = MCPServer(
        "toolnexus-demo",
        version="0.1.0",
        instructions="Demo tools that ask you questions: forms, choices, confirmations and links.",
        lifespan=_lifespan,
        log_level="WARNING",
        request_state_security=None if key is None else RequestStateSecurity(keys=[key]),
    )
    for tool in (deploy, book_table, connect_calendar, sync_calendar, long_task, echo):
        server.tool()(tool)
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bot.demo_server", description="The toolnexus demo MCP server."
    )
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on PORT (path /mcp)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP host to bind (default: %(default)s)")
    parser.add_argument("--state-dir", help="where the requestState key file lives (without DEMO_STATE_KEY)")
    args = parser.parse_args(argv)
    # Configure logging before MCPServer would (at INFO), so stderr only carries real problems.
    logging.basicConfig(level=logging.WARNING)
    server = build_server(state_key(os.environ, args.state_dir))
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host=args.host, port=args.http)


if __name__ == "__main__":
    main()

"""The MCP gateway: agents call a person's tools through `<public_url>/mcp`, and the person answers on the phone.

I/O: an MCP server (the SDK's low-level `Server` over its streamable HTTP transport, both protocol eras) mounted
on the web endpoint. An agent presents an agent token (`Authorization: Bearer tnx_...`, made with `/agents new`);
the SDK's bearer middleware asks `AgentVerifier`, which reads the token from the store on every request, so a
revoked token is refused at once; `bot.web.gateway_guard.Guard` then checks the token's person against the access
rules on every request, caps the token's open sessions, and ends what a token runs once its access goes (its
calls' cards say so; the agent gets an error). The agent then acts as the token's person:

* `tools/list`: the tools of every configured server, named `<server>__<tool>`, with their schemas and hints, and
  two of the bot's own: `ask_person` (a question to the person: a flat form, a choice, or yes/no) and
  `notify_person` (one line to the person's chat);
* `tools/call`: runs on the person's own sessions and sign-ins through the hub, like a `/call` in the chat: the
  `[[approvals]]` rules, `[limits]` and the audit apply; every question the server asks becomes a card in the
  person's private chat, and only the final result goes back to the agent (never a server's question).

In a fleet any instance takes an agent's request, but a call runs on the instance that owns its person (where
their cards, taps, sessions and `[limits]` are): one that does not own them hands the call over
(`bot.web.gateway_handover`) and answers the agent with the result that comes back; each instance also runs the
calls handed to it. Alone the process owns everyone and runs every call.

While a call waits (for the person, approvers or the server), the agent gets a progress notification every
`[gateway] keepalive_s` when it asked for progress, so clients that reset their timeout on progress keep waiting.
An agent that goes away mid-call (it cancels the call, or the connection carrying it drops) ends the call's open
cards as its doing ("your agent stopped waiting"); the server hears `cancel`, then the call is cancelled. A
request's body is bounded (`MAX_BODY`, 413 past it), after the token check.

A call may be made as a task (the 2025-11-25 tasks and the 2026-07-28 tasks extension: `bot.web.gateway_tasks`;
run by `bot.web.gateway_taskrun`): the agent gets the task at once and polls it, from this process or another; the
call runs in the gateway's task group, its result kept in the store. A call waiting for approvers names its task in
the approval request, so an approval granted after a restart runs it. The parts these modules share (the tools'
names, the caller, progress for an agent) are `bot.web.gateway_parts`.

Hosted agents that cannot paste a token sign in with OAuth instead (`bot.web.gateway_oauth`, `[gateway] oauth`):
the access tokens issued there (`tnx_at_...`) pass the same verifier, which reads them from the store, and act as
the person who allowed them, through their grant (a token row like any other: revoked, it stops them at once).
Every token is bound to this resource (`<public_url>/mcp`): one the verifier reports for another is refused, and a
refused request's `WWW-Authenticate` names the protected-resource metadata (with OAuth on) so a client can sign in.

Why not `MCPServer`: its tools are fixed at decoration time; here every person sees a different list, built
per request from the hub. Why not the SDK's `streamable_http_app(auth=...)`: its tools come from decorators as
well; the same public middleware (the SDK's bearer backend, checking the resource) is composed around the transport.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

import anyio
import mcp_types as types
from anyio.abc import TaskStatus
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyHttpUrl
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.config import Config
from bot.core import AgentBook, CallStatus, Origin, Outcome, PromptRegistry, ToolOutcome
from bot.core.agent_calls import AgentCalls
from bot.core.agents import GATEWAY_PATH, AgentToken
from bot.core.ownership import Ownership
from bot.core.permission import Client, Permission
from bot.errors import StoreUnavailable
from bot.servers.elicitation import form_of
from bot.servers.hub import Flight, Hub, ProgressSink, Unavailable
from bot.store.gateway_tasks import GatewayTask, GatewayTaskStore, agent_result
from bot.store.grants import ACCESS_PREFIX, GrantStore
from bot.web.gateway_guard import SESSION_IDLE_S, Caller, Ending, Guard
from bot.web.gateway_handover import HandOver
from bot.web.gateway_parts import (
    ASK_PERSON,
    GONE_KEY,
    NOTIFY_PERSON,
    PERMISSION_PROMPT,
    SEPARATOR,
    AgentProgress,
    Departure,
    gone_event,
    text_result,
    the_caller,
    to_agent,
    token_id,
)
from bot.web.gateway_taskrun import TaskRunner
from bot.web.gateway_tasks import (
    Support,
    TaskingServer,
    TaskMiddleware,
    TasksExtension,
    install,
    task_handlers,
)
from bot.web.hooks import FALLBACK, PermissionDesk
from mapping import MappingError, answer_to_elicit_result, elicitation_to_request

__all__ = [
    "ASK_PERSON",
    "GATEWAY_PATH",
    "MAX_BODY",
    "NOTIFY_PERSON",
    "PERMISSION_PROMPT",
    "SEPARATOR",
    "AgentVerifier",
    "Gateway",
]

logger = logging.getLogger(__name__)

NOTIFY_CLIP: Final = 1000
"""Characters of an agent's `notify_person` line shown in the chat."""
MAX_BODY: Final = 4 << 20
"""Bytes of one request to `/mcp`; a bigger one gets 413 before the transport reads it (the SDK's own
`RequestBodyLimitMiddleware`: by Content-Length, then counted as it arrives). Named here so the bound is the
bot's, not whatever the SDK's default becomes; a tool call's arguments and answers are far smaller."""

MAY_BE_TASK: Final = types.ToolExecution(task_support="optional")
"""A tool that may wait for a person: an agent may call it as a task (`bot.web.gateway_tasks`)."""

_ASK_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "The question, as the person will read it."},
        "schema": {
            "type": "object",
            "description": "A flat JSON Schema form (an object of string, number, integer, boolean and enum "
            "properties), as MCP elicitation takes. Omit it (and choices) for a yes/no question.",
        },
        "choices": {
            "type": "array",
            "items": {"type": "string"},
            "minItems": 1,
            "description": "Ask the person to pick one of these instead of filling a form.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
_ASK_OUTPUT: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["accept", "decline", "cancel"]},
        "content": {"type": "object"},
    },
    "required": ["action"],
}
_NOTIFY_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"message": {"type": "string", "description": "One line for the person's chat."}},
    "required": ["message"],
    "additionalProperties": False,
}
_PERMISSION_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {
        "tool_name": {"type": "string", "description": "The tool the agent wants to use."},
        "input": {"type": "object", "description": "That tool's input."},
        "tool_use_id": {"type": "string"},
    },
    "required": ["tool_name", "input"],
}
_BUILT_IN: Final = (
    types.Tool(
        name=ASK_PERSON,
        title="Ask the person",
        description="Ask the person you act for a question on their phone and wait for the answer: a form "
        "(`schema`), a choice (`choices`), or yes/no (neither: `content.answer` is true or false). Returns "
        "`action` (accept, decline or cancel) and, when accepted, `content` typed as the schema says.",
        input_schema=_ASK_SCHEMA,
        output_schema=_ASK_OUTPUT,
        execution=MAY_BE_TASK,
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name=NOTIFY_PERSON,
        title="Tell the person",
        description="Send the person you act for one line in their chat (no answer is awaited).",
        input_schema=_NOTIFY_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
    types.Tool(
        name=PERMISSION_PROMPT,
        title="Ask the person's leave",
        description="Claude Code's --permission-prompt-tool: asks the person on their phone whether the agent may "
        "use `tool_name` with `input`; returns Claude Code's JSON answer (behavior allow or deny).",
        input_schema=_PERMISSION_SCHEMA,
        execution=MAY_BE_TASK,
        annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
    ),
)
_YES_NO: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"answer": {"type": "boolean", "title": "Answer"}},
    "required": ["answer"],
}
"""A yes/no question (no `schema`, no `choices`): one boolean, so the card shows Yes and No (an empty form would
show only OK)."""


class AgentVerifier:
    """The SDK's `TokenVerifier` over the store's agent tokens and OAuth access tokens: who an `Authorization:
    Bearer` token acts as, and the resource it is for (a pasted token is for this gateway alone)."""

    def __init__(
        self, book: AgentBook, resource: str | None = None, grants: GrantStore | None = None
    ) -> None:
        """`resource`: what a pasted token is for (the gateway's `<public_url>/mcp`); `grants`: the OAuth access
        tokens (None: OAuth is off, only pasted tokens pass)."""
        self.book = book
        self.resource = resource
        self.grants = grants

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            if self.grants is not None and token.startswith(ACCESS_PREFIX):
                found = await self.grants.token(token, "access")
                if found is not None:
                    expires = None if found.expires is None else int(found.expires)
                    return _access(token, found.grant, found.resource, expires)
            agent = await self.book.verify(token)
        except StoreUnavailable:
            logger.warning("agent token not checked: the database is unavailable")
            return None
        return None if agent is None else _access(token, agent, self.resource, None)


def _access(token: str, agent: AgentToken, resource: str | None, expires: int | None) -> AccessToken:
    return AccessToken(
        token=token,
        client_id=f"agent-{agent.id}",
        scopes=[],
        expires_at=expires,
        resource=resource,
        subject=str(agent.user_id),
        claims={"agent_id": agent.id, "agent": agent.name},
    )


def _answer(results: list[types.CallToolResult], ending: Ending) -> types.CallToolResult:
    """What a call gives its agent: the result, or why there is none (its access ended: even if the work had
    just finished, the agent hears why)."""
    if ending.event.is_set():
        return text_result(ending.line, error=True)
    if not results:  # nobody reads it: the agent is gone
        return text_result("the call was cancelled: the agent went away", error=True)
    return results[0]


class _Watched:
    """ASGI: an event in each HTTP request's scope (`GONE_KEY`), set when its client disconnects.

    A handler finds it through the SDK's `ctx.request` (the POST that carried the call): in 2025-11-25 the SDK
    lets a handler run on after its POST's connection dropped, and drops its result; this is how it learns."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gone = anyio.Event()

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            return message

        await self.app({**scope, GONE_KEY: gone}, watched, send)


class Gateway:
    """`/mcp` for agents. Serve `routes()` on the web endpoint and run `run` in the bot's task group."""

    def __init__(
        self,
        config: Config,
        hub: Hub,
        prompts: PromptRegistry,
        agents: AgentBook,
        *,
        allows: Callable[[int], bool],
        desk: PermissionDesk,
        tasks: GatewayTaskStore,
        owners: Ownership,
        calls: AgentCalls,
        version: str = "",
        clock: Callable[[], float] = anyio.current_time,
        grants: GrantStore | None = None,
    ) -> None:
        """`allows`: the access rules a `/call` in the chat obeys (whether a person may use the bot), asked on
        every request; `desk`: decides the agents' permission prompts (`permission_prompt`); `tasks`: the store
        of agents' calls made as tasks; `grants`: with OAuth on, the store of the tokens it issues; `owners`:
        whose calls run here (this process owns the person; alone, everyone's); `calls`: how the others' are
        handed to their owner, and theirs to this process."""
        assert config.web is not None and config.web.public_url is not None  # the config requires it
        self.config = config
        self.hub = hub
        self.prompts = prompts
        self.agents = agents
        self.desk = desk
        self.tasks = tasks
        self.owners = owners
        self.calls = calls
        self._clock = clock
        self.server: Server[Any] = TaskingServer(
            "toolnexus-bot",
            version=version,
            title="toolnexus-bot gateway",
            instructions="Tools of the MCP servers this person uses, named <server>__<tool>. Questions the "
            "servers ask during a call go to the person's phone; the call returns once they answer. "
            "ask_person asks the person something yourself; notify_person tells them a line.",
            on_list_tools=self._list_tools,
        )
        self.server.middleware.append(TaskMiddleware(self._start_task))
        extension = TasksExtension(tasks, token_id, self._start_task, self._task_rule, self._cancel_task)
        install(self.server, extension, task_handlers(tasks, token_id, self._cancel_task), self._call_tool)
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            security_settings=self._security(),
            max_request_body_size=MAX_BODY,
            session_idle_timeout=SESSION_IDLE_S,
        )
        self.resource = config.web.public_url.rstrip("/") + GATEWAY_PATH
        self.oauth = grants is not None
        self.verifier = AgentVerifier(agents, self.resource, grants)
        self.guard = Guard(
            _Watched(StreamableHTTPASGIApp(self.manager)),
            agents,
            hub.limits,
            allows=allows,
            sessions_per_token=config.gateway.sessions_per_token,
        )
        self.handover = HandOver(calls, self.guard, owners, config.gateway.keepalive_s, self._run)
        self.runner = TaskRunner(
            config, hub, agents, tasks, self.guard, owners, work=self._task_work, split=self._split
        )

    def _security(self) -> TransportSecuritySettings:
        """DNS-rebinding protection: only the public host (as the proxy forwards it) and the bound address."""
        assert self.config.web is not None and self.config.web.public_url is not None
        public = urlsplit(self.config.web.public_url)
        port = self.config.web.port
        hosts = [public.netloc, f"{self.config.web.listen}:{port}", f"127.0.0.1:{port}", f"localhost:{port}"]
        origins = [
            f"{public.scheme}://{public.netloc}",
            f"http://127.0.0.1:{port}",
            f"http://localhost:{port}",
        ]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
        )

    def routes(self) -> list[BaseRoute]:
        """`POST/GET/DELETE /mcp`, behind the SDK's bearer middleware (401 without a live agent token, before a
        byte of the body is read), then the guard (403 for a person not allowed; 429 past the token's sessions);
        the transport refuses a body over `MAX_BODY` (413) before reading it."""
        resource = AnyHttpUrl(self.resource)
        metadata = build_resource_metadata_url(resource) if self.oauth else None
        guarded = RequireAuthMiddleware(self.guard, required_scopes=[], resource_metadata_url=metadata)
        backend = BearerAuthBackend(self.verifier, resource_server_url=resource)
        app = AuthenticationMiddleware(AuthContextMiddleware(guarded), backend=backend)
        return [Route(GATEWAY_PATH, endpoint=app)]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The transport's sessions live while this runs (cancel it to stop; open calls end with it), the guard
        watches the busy tokens, calls handed over by other instances for people this one owns run here, and so do
        agents' tasks."""
        async with self.manager.run(), anyio.create_task_group() as tg:
            await tg.start(self.runner.run)
            await tg.start(self.calls.serve, self.handover.take)
            task_status.started()
            await self.guard.run()

    # -- tools/list ------------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        caller = the_caller()
        user_id, agent = caller.user_id, caller.agent
        origin = Origin(user_id, user_id, agent=agent)
        found: dict[str, list[types.Tool]] = {}

        async def tools_of(server: str) -> None:
            try:
                infos = await self.hub.list_tools(server, origin)
            except Unavailable as exc:
                logger.info("gateway: %s left out of an agent's tool list: %s", server, exc)
                return
            found[server] = [
                types.Tool(
                    name=f"{server}{SEPARATOR}{info.name}",
                    title=info.title,
                    description=info.description,
                    input_schema=info.input_schema,
                    output_schema=info.output_schema,
                    annotations=None
                    if info.annotations is None
                    else types.ToolAnnotations.model_validate(info.annotations),
                    execution=MAY_BE_TASK,
                )
                for info in infos
            ]

        names = self.hub.server_names()
        async with anyio.create_task_group() as tg:
            for server in names:
                tg.start_soon(tools_of, server)
        tools = [tool for server in names for tool in found.get(server, [])]
        return types.ListToolsResult(tools=[*_BUILT_IN, *tools])

    # -- tools/call ------------------------------------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Runs here when this process owns the caller's person (alone: always); otherwise handed to their owner,
        where their cards, taps, sessions and `[limits]` are (`_hand_over`)."""
        caller = the_caller()
        arguments = dict(params.arguments or {})
        try:
            await self.agents.used(caller.token_id)
        except StoreUnavailable:
            logger.warning("gateway: a call by an agent was not counted: the database is unavailable")
        if not self.owners.owns(caller.user_id):
            return await self.handover.hand_over(ctx, caller, params.name, arguments)
        gone = gone_event(ctx)
        departures = [] if gone is None else [Departure(event=gone)]
        return await self._run(caller, params.name, arguments, AgentProgress(to_agent(ctx)), departures)

    async def _run(
        self,
        caller: Caller,
        name: str,
        arguments: dict[str, Any],
        progress: AgentProgress,
        departures: Sequence[Departure],
    ) -> types.CallToolResult:
        """The tool `name` called by `caller`'s agent, on this process (which owns its person)."""
        origin = Origin(caller.user_id, caller.user_id, agent=caller.agent)
        if name == NOTIFY_PERSON:
            return await self._notify_person(origin, arguments)
        if name == ASK_PERSON:
            return await self._kept_alive(
                caller, origin, progress, departures, lambda _, __: self._ask_person(origin, arguments)
            )
        if name == PERMISSION_PROMPT:
            return await self._kept_alive(
                caller, origin, progress, departures, lambda _, __: self._permission_prompt(caller, arguments)
            )
        target = self._split(name)
        if target is None:
            return text_result(f"unknown tool: {name}", error=True)
        server, tool = target

        async def call(sink: ProgressSink, flight: Flight) -> types.CallToolResult:
            return agent_result(
                await self.hub.call_tool(server, tool, arguments, origin, sink, flight=flight)
            )

        return await self._kept_alive(caller, origin, progress, departures, call, (server, tool))

    def _split(self, name: str) -> tuple[str, str] | None:
        """(server, tool) of `<server>__<tool>`; a server name may hold `__` itself, so the longest match wins."""
        servers = sorted(self.hub.server_names(), key=len, reverse=True)
        for server in servers:
            prefix = server + SEPARATOR
            if name.startswith(prefix) and len(name) > len(prefix):
                return server, name[len(prefix) :]
        return None

    async def _kept_alive(
        self,
        caller: Caller,
        origin: Origin,
        progress: AgentProgress,
        departures: Sequence[Departure],
        work: Callable[[ProgressSink, Flight], Awaitable[types.CallToolResult]],
        target: tuple[str, str] | None = None,
    ) -> types.CallToolResult:
        """`work` given a sink for the server's progress, with a beat every `keepalive_s` meanwhile: both reach the
        agent (`progress`) as one rising count (the spec wants each notification's `progress` above the last). The
        SDK sends them only when the agent asked for progress (a `progressToken`); otherwise it drops them.

        `work` runs shielded from the request's cancellation, so that when the agent goes away (it cancels: the
        SDK cancels this handler; its connection drops, which in 2025-11-25 the SDK lets the handler outlive; or,
        for a call handed over, the instance holding its request says so: `departures`) the call's open cards end
        first, as the agent's doing (`Hub.abandon`), and only then is `work` cancelled. If the call (of `target`,
        server and tool) had asked the person something before, they are told that its result reaches nobody:
        their answer is not lost without a word.
        """
        with self.guard.call(caller) as ending:
            return await self._guarded(origin, progress, departures, work, target, ending)

    async def _guarded(
        self,
        origin: Origin,
        progress: AgentProgress,
        departures: Sequence[Departure],
        work: Callable[[ProgressSink, Flight], Awaitable[types.CallToolResult]],
        target: tuple[str, str] | None,
        ending: Ending,
    ) -> types.CallToolResult:
        """`_kept_alive`'s body; `ending` is set when the token's access ends: the call then ends as when its agent
        leaves, its cards saying the agent's access was revoked, and the agent gets `ending.line` as an error."""
        flight = Flight()
        results: list[types.CallToolResult] = []
        ran = anyio.Event()
        work_scope = anyio.CancelScope()

        async def run() -> None:
            try:
                with anyio.CancelScope(shield=True), work_scope:
                    results.append(await work(progress.forward, flight))
            finally:
                ran.set()

        leaving: anyio.Event | None = None

        async def leave(why: Outcome = Outcome.AGENT_CANCELLED) -> None:
            """Once, however the agent's going (or its access's end) is noticed (2026-07-28: both ways at once)."""
            nonlocal leaving
            if leaving is not None:
                with anyio.CancelScope(shield=True):
                    await leaving.wait()
                return
            leaving = anyio.Event()
            if not await self.hub.abandon(flight, why, origin, target, ran):
                work_scope.cancel()  # waiting for approvers, or an agent's own question (`ask_person`)
            leaving.set()

        async def leave_on(event: anyio.Event, why: Outcome) -> None:
            await event.wait()
            await leave(why)

        async def leave_when(departure: Departure) -> None:
            await departure.event.wait()
            await leave(departure.why)

        async with anyio.create_task_group() as tg:
            tg.start_soon(
                progress.beat,
                self.config.gateway.keepalive_s,
                lambda: bool(self.prompts.pending(origin=origin)),
            )
            tg.start_soon(run)
            tg.start_soon(leave_on, ending.event, Outcome.AGENT_REVOKED)
            for departure in departures:
                tg.start_soon(leave_when, departure)
            try:
                await ran.wait()
            except anyio.get_cancelled_exc_class():
                await leave()
                raise
            tg.cancel_scope.cancel()
        return _answer(results, ending)

    # -- tasks (`bot.web.gateway_taskrun`) -----------------------------------------------------------------

    async def _task_rule(self, params: types.CallToolRequestParams) -> Support | None:
        return await self.runner.rule(params)

    async def _start_task(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, ttl_ms: int
    ) -> GatewayTask:
        return await self.runner.start(ctx, params, ttl_ms)

    async def _cancel_task(self, task: GatewayTask) -> None:
        await self.runner.cancel(task)

    async def _task_work(
        self, origin: Origin, caller: Caller, name: str, arguments: dict[str, Any], flight: Flight
    ) -> ToolOutcome | types.CallToolResult:
        if not self.owners.owns(caller.user_id):
            return await self.handover.task_call(caller, name, arguments)
        if name == NOTIFY_PERSON:
            return await self._notify_person(origin, arguments)
        if name == ASK_PERSON:
            return await self._ask_person(origin, arguments)
        if name == PERMISSION_PROMPT:
            return await self._permission_prompt(caller, arguments)
        target = self._split(name)
        if target is None:
            return text_result(f"unknown tool: {name}", error=True)
        return await self.hub.call_tool(target[0], target[1], arguments, origin, flight=flight)

    # -- the bot's own tools ---------------------------------------------------------------------------

    async def _ask_person(self, origin: Origin, arguments: dict[str, Any]) -> types.CallToolResult:
        """A question of the agent's own, asked like a server's: validated by `mapping`, shown as a card."""
        message = arguments.get("message")
        schema = arguments.get("schema")
        choices = arguments.get("choices")
        if not isinstance(message, str) or not message.strip():
            return text_result("ask_person needs `message`: the question, as text", error=True)
        if schema is not None and choices is not None:
            return text_result("ask_person takes `schema` or `choices`, not both", error=True)
        if choices is not None:
            if not isinstance(choices, list) or not choices or not all(isinstance(c, str) for c in choices):
                return text_result("`choices` must be a non-empty list of strings", error=True)
            schema = {
                "type": "object",
                "properties": {"choice": {"type": "string", "title": "Choice", "enum": choices}},
                "required": ["choice"],
            }
        wire = {"mode": "form", "message": message, "requestedSchema": schema or _YES_NO}
        try:
            request = elicitation_to_request(wire)
            form = form_of(wire["requestedSchema"])
        except MappingError as exc:
            return text_result(f"ask_person cannot ask this: {exc}", error=True)
        answer = await self.hub.ask_for_agent(request, form, origin)  # [limits] and /metrics as a tool call
        if isinstance(answer, str):
            return text_result(answer, error=True)
        result = answer_to_elicit_result(answer)
        return text_result(json.dumps(result, ensure_ascii=False), structured=result)

    async def _permission_prompt(self, caller: Caller, arguments: dict[str, Any]) -> types.CallToolResult:
        """Claude Code's permission prompt, decided as its hook's are (`PermissionDesk`)."""
        tool, tool_input = arguments.get("tool_name"), arguments.get("input")
        if not isinstance(tool, str) or not tool or not isinstance(tool_input, dict):
            return text_result(
                "permission_prompt needs `tool_name` (text) and `input` (an object)", error=True
            )
        permission = Permission(Client.PROMPT_TOOL, tool, tool_input, fallback=FALLBACK[Client.PROMPT_TOOL])
        verdict = await self.desk.decide(caller, permission)
        if verdict.allow:
            answer: dict[str, Any] = {"behavior": "allow", "updatedInput": tool_input}
        else:
            answer = {"behavior": "deny", "message": verdict.message}
        return text_result(json.dumps(answer, ensure_ascii=False))

    async def _notify_person(self, origin: Origin, arguments: dict[str, Any]) -> types.CallToolResult:
        message = arguments.get("message")
        if not isinstance(message, str) or not message.strip():
            return text_result("notify_person needs `message`: one line of text", error=True)
        line = message.strip()[:NOTIFY_CLIP]
        outcome = await self.hub.notify_for_agent(origin, NOTIFY_PERSON, line)  # [limits] and the audit
        return text_result(outcome.text, error=outcome.status is not CallStatus.OK)

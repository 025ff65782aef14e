"""Tool calls on pooled sessions: the call's own clock, -32042 authorization rounds, /cancel and shutdown.

A 2026-07-28 call's `input_required` rounds are driven by `bot.servers.rounds` (kept in the store, resumable
after a restart); a 2025-era call's questions come through the SDK's callback. A call to a tool that allows or
requires tasks (2025-11-25) is made as a task and polled (`bot.servers.tasks`); a 2026-07-28 server that serves the
tasks extension answers the calls it chooses with a task, which is kept and polled the same way.

Async, does I/O (MCP requests through `bot.servers.pool`). Outcomes are `ToolOutcome` values, never exceptions.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import MCPError, UrlElicitationRequiredError
from mcp.shared.dispatcher import ProgressFnT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from bot.core import (
    CallStatus,
    KeptQuestion,
    KeptTask,
    Origin,
    Outcome,
    Progress,
    Prompt,
    PromptRegistry,
    TaskBook,
    ToolOutcome,
)
from bot.errors import StoreError
from bot.servers.connections import CallClock, Connection, describe_error
from bot.servers.elicitation import Caller, Elicitations
from bot.servers.pool import Pool, Unavailable
from bot.servers.results import failure, outcome_of_result
from bot.servers.rounds import Resumed, Rounds, elicit_result, untagged_result
from bot.servers.tasks import CreatedTask, follow_modern_task, follow_task, makes_task, run_as_task
from mapping import Answer, MappingError, answer_to_elicit_result, elicitation_to_request

logger = logging.getLogger(__name__)

ProgressSink = Callable[[Progress], Awaitable[None]]

MAX_AUTH_ROUNDS: Final = 3
SETTLE_GRACE_S: Final = 5.0
"""How long a call whose server went away waits for its session's cards to be settled."""


@dataclass(eq=False, slots=True)
class Flight:
    """One call as a drain sees it (`Hub.call_tool(flight=...)`): what it waits for now."""

    approval: bool = False
    """Waiting for its approvers: the request is kept in the store and outlives the process."""
    caller: Caller | None = None
    """The call once it runs: the questions it has out (`Caller.asking`)."""
    scope: anyio.CancelScope | None = None
    """The call's own scope once it runs: cancelled, the call ends `CANCELLED` (logged and audited as any call)
    rather than by a cancellation from outside (the gateway, when the agent goes away)."""
    polling: bool = False
    """It polls a task kept in the store (`bot.servers.tasks`): the next process polls it again."""

    @property
    def kept(self) -> bool:
        """All it waits for is kept in the store (approvers, or questions with a row): when the process leaves,
        the call is dropped without a word and the next process takes up what is kept."""
        asking = self.caller.asking if self.caller is not None else set()
        return (
            self.approval
            or (self.polling and not asking)
            or (bool(asking) and all(p.keeper is not None for p in asking))
        )

    @property
    def parked(self) -> bool:
        """All it waits for can still be answered after a restart (approvers, 2026-07-28 questions): a drain
        need not wait for it."""
        asking = self.caller.asking if self.caller is not None else set()
        return (
            self.approval
            or (self.polling and not asking)
            or (bool(asking) and all(p.keeper is not None and p.keeper.resumable for p in asking))
        )


def covers(origin: Origin, other: Origin) -> bool:
    """Whether a /cancel by `origin` reaches what `other` started: the same person in the same chat, by their
    own hand or through one of their agents (whose calls' chat is the person's private chat)."""
    return other.user_id == origin.user_id and other.chat_id == origin.chat_id


@dataclass(slots=True)
class _Call:
    caller: Caller
    server: str
    tool: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    cancelled_by_user: bool = False
    flight: Flight | None = None
    task: KeptTask | None = None
    """Its task, once kept in the store (or the one it resumes)."""
    resumes: bool = False
    """It polls a task kept from before a restart (`task`) rather than sending the call."""

    @property
    def origin(self) -> Origin:
        return self.caller.origin


class Calls:
    """The running tool calls of the process; one instance per hub."""

    def __init__(
        self,
        pool: Pool,
        prompts: PromptRegistry,
        elicitations: Elicitations,
        rounds: Rounds | None = None,
        tasks: TaskBook | None = None,
    ) -> None:
        self.pool = pool
        self.prompts = prompts
        self.elicitations = elicitations
        self.rounds = rounds or Rounds(elicitations)
        """Drives 2026-07-28 calls' `input_required` rounds (and keeps their questions, with a store)."""
        self.tasks = tasks
        """Where a person's calls made as tasks are kept until their result is shown (None: no database)."""
        self._calls: list[_Call] = []
        self._no_calls = anyio.Event()
        self._no_calls.set()

    async def call_tool(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any] | None,
        origin: Origin,
        on_progress: ProgressSink | None = None,
        *,
        restored: list[tuple[Prompt, KeptQuestion]] | None = None,
        kept: list[KeptQuestion] | None = None,
        flight: Flight | None = None,
        meta: Callable[[], types.RequestParamsMeta] | None = None,
        task: KeptTask | None = None,
    ) -> ToolOutcome:
        """Call a tool for `origin`; elicitations on the way reach that person. Never raises for outcomes.

        `meta` gives the request's `_meta` for each sending of the call (an approval receipt: fresh for each
        sending, the same for the further rounds of one sending).

        `flight` is told which questions the call has out (a drain looks). With `kept` (a 2026-07-28 round kept from before a restart, all its questions), the call is not sent
        afresh: the round's open questions (`restored`: their prompts, whose cards are back on the surface) are
        waited for, then the round is resumed on a fresh connection with all its answers and its `requestState`.
        With `task` (a task kept from before a restart), the call is not sent: the task is polled again.
        """
        server = self.pool.servers.get(name)
        if server is None:
            return failure(CallStatus.FAILED, f"unknown server {name!r}")
        call = _Call(
            caller=Caller(origin, tool=tool, arguments=arguments),
            server=name,
            tool=tool,
            flight=flight,
            task=task,
            resumes=task is not None,
        )
        if flight is not None:
            flight.caller = call.caller
            flight.scope = call.scope
            flight.polling = task is not None
        self._calls.append(call)
        if self._no_calls.is_set():
            self._no_calls = anyio.Event()
        try:
            with call.scope:
                resumed = None if kept is None else await self._answers_of(call, kept, restored or [])
                for _ in range(MAX_AUTH_ROUNDS):
                    outcome = await self._call_once(
                        call, arguments, on_progress, resumed, None if meta is None else meta()
                    )
                    resumed = None
                    if not isinstance(outcome, list):
                        return outcome
                    declined = await self._authorize(call, outcome)
                    if declined is not None:
                        return declined
                return failure(CallStatus.FAILED, "the server kept asking for authorization; giving up")
            # The status says "cancelled": a person's cancel needs no text besides it (the hosts would say it twice).
            return failure(CallStatus.CANCELLED, "" if call.cancelled_by_user else "stopped")
        except Unavailable as exc:
            return failure(CallStatus.UNAVAILABLE, exc.reason)
        finally:
            # However the resumed call ended, its kept round is done with; unless the process leaves after a
            # drain before the round went back (`Rounds.drive` forgets it once sent): the next process takes it.
            if kept is not None and not self.prompts.leaves(origin.user_id):
                await self.rounds.forget([q.id for q in kept])
            if call.task is not None and not self.prompts.leaves(origin.user_id):
                await self._forget_task(call.task)
            self._calls.remove(call)
            if not self._calls:
                self._no_calls.set()

    async def _answers_of(
        self, call: _Call, kept: list[KeptQuestion], restored: list[tuple[Prompt, KeptQuestion]]
    ) -> Resumed:
        """A kept round's answers: those given before the restart, and those its restored cards get now."""
        responses: types.InputResponses = {}
        for question in kept:
            if question.answer is not None:
                responses[question.input_key] = elicit_result(question.answer, _url_mode(question))

        async def wait(prompt: Prompt, question: KeptQuestion) -> None:
            prompt.keeper = self.elicitations.deferring(prompt.keeper)
            call.caller.asking.add(prompt)
            try:
                answer = await self.prompts.ask(prompt, restored=True)
                # Approvals of gate "answers" hold a restored card's answer as they hold any other.
                result = await self.elicitations.vetted(
                    prompt, question.tool, answer_to_elicit_result(answer)
                )
            finally:
                call.caller.asking.discard(prompt)
            responses[question.input_key] = elicit_result(result, prompt.request.url is not None)

        async with anyio.create_task_group() as tg:
            for prompt, question in restored:
                tg.start_soon(wait, prompt, question)
        first = kept[0]
        call.caller.answered = bool(responses)  # the round goes back with its answers
        return Resumed(responses, first.request_state, [q.id for q in kept])

    def cancel(self, origin: Origin) -> int:
        """/cancel: answer this person's pending questions in this chat with `cancel`, as the Cancel button
        does, and cancel outright their calls with no question pending; returns how many of both.

        A call whose question was answered goes on: its server hears `cancel` (on 2026-07-28 in the call's
        next round, which cancelling the call would never send) and ends the tool in its own way. In the
        person's private chat this covers their agents' calls and `ask_person` questions too (`covers`): their
        cards are there, and the agent gets the cancelled result.
        """
        answered = {
            prompt
            for prompt in self.prompts.pending(chat_id=origin.chat_id)
            if covers(origin, prompt.origin)
            and self.prompts.answer(prompt, Answer(id=prompt.request.id, ok=False, reason="cancelled"))
        }
        count = len(answered)
        for call in self._calls:
            if covers(origin, call.origin) and not call.caller.asking & answered:
                call.cancelled_by_user = True
                call.scope.cancel()
                count += 1
        return count

    async def stop(self, grace_s: float) -> None:
        """Shutdown: give calls `grace_s` to end once their prompts were answered, then cancel the rest."""
        with anyio.move_on_after(grace_s):
            await self._no_calls.wait()  # calls end promptly once their prompts are answered
        for call in list(self._calls):
            call.scope.cancel()

    async def _call_once(
        self,
        call: _Call,
        arguments: dict[str, Any] | None,
        on_progress: ProgressSink | None,
        resumed: Resumed | None = None,
        meta: types.RequestParamsMeta | None = None,
    ) -> ToolOutcome | list[types.ElicitRequestURLParams]:
        """One sending of the call on its session (each era its own way), then what it came to (`classify`)."""
        server = self.pool.servers[call.server]
        progress = _progress_callback(on_progress)
        async with (
            self.pool.use(server, call.origin) as conn,
            self.elicitations.on_session(conn, call.caller),
        ):
            result: types.CallToolResult | None = None
            error: Exception | None = None
            clock = conn.clock(server.call_timeout_s)
            try:
                with clock.scope:
                    try:
                        if call.resumes:
                            result = await self._resume_task(conn, call, progress)
                        elif conn.protocol in MODERN_PROTOCOL_VERSIONS:
                            result = await self._send_modern(
                                conn, clock, call, arguments, progress, resumed, meta
                            )
                        else:
                            result = await self._send_legacy(conn, call, arguments, progress, meta)
                    except Exception as exc:  # every way a request fails is an outcome: `classify` names it
                        error = exc
            finally:
                conn.release(clock)
        sent = Sent(
            result=result,
            error=error,
            gone=result is None and conn.gone.is_set(),
            timed_out=clock.scope.cancelled_caught,
            answered=call.caller.answered,
        )
        if sent.gone:  # the session ended: its cards settle first, saying so before the result does
            with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_GRACE_S):
                await conn.finished.wait()
                await self.prompts.wait_settled(conn.key)
        return classify(sent, call.server, server.call_timeout_s, conn.error)

    async def _send_modern(
        self,
        conn: Connection,
        clock: CallClock,
        call: _Call,
        arguments: dict[str, Any] | None,
        progress: ProgressFnT,
        resumed: Resumed | None,
        meta: types.RequestParamsMeta | None,
    ) -> types.CallToolResult:
        """2026-07-28: the bot drives the call's `input_required` rounds itself (`Rounds.drive`); the call's clock
        stands still while a round is out to the person (`clock.asking`). A server that makes the call a task
        (the tasks extension) answers a leg with it: the task is kept and followed to its result."""
        client = conn.client
        assert client is not None

        async def send(responses: types.InputResponses | None, state: str | None) -> types.Result:
            clock.asking = False
            try:
                result = await client.session.call_tool(
                    call.tool,
                    arguments,
                    progress_callback=progress,
                    input_responses=responses,
                    request_state=state,
                    meta=meta,
                    allow_input_required=True,
                    allow_claimed=True,
                )
                if isinstance(result, CreatedTask):
                    await self._keep_task(call, arguments, result.task_id, result.ttl_ms)
                    return await follow_modern_task(
                        client.session,
                        result,
                        _status_sink(progress),
                        self._leaving(call),
                        self._ask(conn, call),
                    )
                return result
            except ValidationError as exc:
                # A result without `resultType` is complete (the spec); the SDK refuses it.
                untagged = untagged_result(exc, client.protocol_version)
                if untagged is None:
                    raise
                if not untagged.is_error:  # as the SDK checks a tagged one
                    await client.session.validate_tool_result(call.tool, untagged)
                return untagged
            finally:
                clock.asking = True  # what came back is worked on, even if the session ends

        return await self.rounds.drive(conn, call.origin, call.tool, arguments, send, resumed)

    async def _send_legacy(
        self,
        conn: Connection,
        call: _Call,
        arguments: dict[str, Any] | None,
        progress: ProgressFnT,
        meta: types.RequestParamsMeta | None,
    ) -> types.CallToolResult:
        """2025 eras: one request; the server's questions come through the SDK's callback meanwhile. A tool that
        allows or requires tasks is called as a task (`bot.servers.tasks`): its status messages are its progress."""
        client = conn.client
        assert client is not None
        if await makes_task(client, call.tool, conn.tools):

            async def created(task: types.Task) -> None:
                await self._keep_task(call, arguments, task.task_id, task.ttl)

            return await run_as_task(
                client.session,
                call.tool,
                arguments,
                _status_sink(progress),
                meta,
                created,
                self._leaving(call),
            )
        return await client.call_tool(call.tool, arguments, progress_callback=progress, meta=meta)

    async def _resume_task(
        self, conn: Connection, call: _Call, progress: ProgressFnT
    ) -> types.CallToolResult:
        """A task kept from before a restart, polled again on the era its session speaks."""
        client = conn.client
        assert client is not None and call.task is not None
        return await follow_task(
            client.session,
            call.task.task_id,
            _status_sink(progress),
            self._leaving(call),
            self._ask(conn, call),
        )

    def _leaving(self, call: _Call) -> Callable[[], Awaitable[bool]]:
        # The next process, or the person's new owner in a fleet (this one lost them), polls it: not cancelled.
        async def leaving() -> bool:
            user = call.origin.user_id
            return call.task is not None and (
                self.prompts.leaves(user) or not await self.prompts.fence.acts_for(user)
            )

        return leaving

    def _ask(
        self, conn: Connection, call: _Call
    ) -> Callable[[types.InputRequest], Awaitable[types.InputResponse | types.ErrorData]]:
        """A 2026-07-28 task's input requests go to the person as a round's do. Once the task is kept, so is the
        question, as far as a drain is concerned (`AskedAgain`)."""

        async def ask(request: types.InputRequest) -> types.InputResponse | types.ErrorData:
            return await self.rounds.ask_one(conn, request, None if call.task is None else AskedAgain())

        return ask

    async def _keep_task(
        self, call: _Call, arguments: dict[str, Any] | None, task_id: str, ttl_ms: int | None
    ) -> None:
        """A person's call made as a task is kept until its result is shown (an agent's ends with its request)."""
        if self.tasks is None or call.origin.agent is not None:
            return
        kept = KeptTask(
            id=str(uuid.uuid4()),
            server=call.server,
            task_id=task_id,
            tool=call.tool,
            arguments=arguments,
            origin=call.origin,
            expires=None if ttl_ms is None else time.time() + ttl_ms / 1000,
        )
        try:
            await self.tasks.keep(kept)
        except StoreError:
            logger.exception("could not keep a task: it lives as long as this process")
            return
        call.task = kept
        if call.flight is not None:
            call.flight.polling = True

    async def _forget_task(self, task: KeptTask) -> None:
        assert self.tasks is not None
        try:
            with anyio.CancelScope(shield=True):
                # A process that lost the person to another instance leaves it kept: the new owner polls it.
                if await self.prompts.fence.acts_for(task.origin.user_id):
                    await self.tasks.close(task.id)
        except StoreError:
            logger.exception("could not forget a task whose call ended: the next process polls it again")

    async def _authorize(
        self, call: _Call, elicitations: list[types.ElicitRequestURLParams]
    ) -> ToolOutcome | None:
        """-32042: show each URL elicitation, wait for consent and completion; None means retry the call."""
        scope = self.pool.key(self.pool.servers[call.server], call.origin)
        prompts: list[Prompt] = []
        for params in elicitations:
            wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
            wire["mode"] = "url"
            try:
                request = elicitation_to_request(wire)
            except MappingError as exc:
                return failure(
                    CallStatus.FAILED, f"the server asked for authorization the bot cannot show: {exc}"
                )
            prompt = Prompt(
                request=request,
                origin=call.origin,
                server=call.server,
                elicitation_id=params.elicitation_id,
                awaits_completion=True,
                scope=scope,
            )
            call.caller.asking.add(prompt)
            try:
                answer = await self.prompts.ask(prompt)
            finally:
                call.caller.asking.discard(prompt)
            if not answer.ok:
                return failure(
                    CallStatus.CANCELLED,
                    "authorization declined" if answer.reason == "declined" else "authorization cancelled",
                )
            prompts.append(prompt)
        with anyio.move_on_after(self.prompts.timeout_s) as waited:
            for prompt in prompts:
                await prompt.completed.wait()
        for prompt in prompts:
            self.prompts.complete_by_hand(prompt)  # drops any leftover (timed out) from the awaiting list
            if prompt.outcome is not Outcome.COMPLETED:
                await self.prompts.settle_completed(prompt)
        if waited.cancelled_caught:
            return failure(CallStatus.TIMED_OUT, "authorization was not completed in time")
        return None


class AskedAgain:
    """The `Keeper` of a kept 2026-07-28 task's question. Nothing is written: the question lives in the server's
    task, and the next process's poll asks it again on a new card. But the question counts as kept: a drain
    neither waits for it nor ends its call with a word (the card is left as it stands, as a crash leaves it)."""

    resumable = True

    async def shown(self, prompt: Prompt) -> None:
        return None

    async def placed(self, prompt: Prompt, chat_id: int, message_id: int) -> None:
        return None

    async def progress(self, prompt: Prompt, progress: dict[str, Any]) -> None:
        return None

    async def ended(self, prompt: Prompt, answer: dict[str, Any] | None) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Sent:
    """How one sending of a call ended, as seen once its request is over: what `classify` reads."""

    result: types.CallToolResult | None
    """The server's result, if one came."""
    error: BaseException | None
    """What the request raised instead, if anything."""
    gone: bool
    """No result, and the call's session had ended (the server went away)."""
    timed_out: bool
    """The call's own clock ran out."""
    answered: bool
    """An answer of its person's went to the server (`Caller.answered`)."""


def classify(
    sent: Sent, server: str, timeout_s: float, why_gone: str | None
) -> ToolOutcome | list[types.ElicitRequestURLParams]:
    """What one sending of a call comes to: its outcome, or the URL elicitations a -32042 asks for first. Pure.

    `server` names the server in the lines; `timeout_s` is the call's budget; `why_gone` is why its session
    ended (`Connection.error`), when it did.
    """
    if sent.result is not None:
        return outcome_of_result(sent.result)
    error = sent.error
    if sent.gone or (error is not None and sent.answered and _broken(error)):
        if sent.answered:
            # Whether the answer reached the tool, nobody here can tell: never sent again on its own (the
            # tool might do its work twice), never silence; its person may run the call again.
            return ToolOutcome(
                status=CallStatus.FAILED,
                text=f"the connection to {server} broke after your answer; the server may or may not have it",
                again=True,
            )
        return failure(CallStatus.UNAVAILABLE, f"the server went away ({why_gone or 'connection closed'})")
    if error is None:
        if sent.timed_out:
            return failure(CallStatus.TIMED_OUT, f"no result after {timeout_s:g} s")
        return failure(CallStatus.CANCELLED, "")
    if isinstance(error, MCPError) and error.code == types.URL_ELICITATION_REQUIRED:
        return UrlElicitationRequiredError.from_error(error.error).elicitations
    if isinstance(error, MCPError):
        return failure(CallStatus.FAILED, error.message)
    return failure(CallStatus.FAILED, describe_error(error))


def _broken(error: BaseException) -> bool:
    """Whether a call's request failed because its connection broke (before its session noticed it had ended):
    the SDK's "Connection closed", or a transport error of the HTTP request itself."""
    if isinstance(error, MCPError):
        return error.code == types.CONNECTION_CLOSED
    return isinstance(error, httpx2.TransportError | anyio.BrokenResourceError | anyio.ClosedResourceError)


def _status_sink(progress: ProgressFnT) -> ProgressSink:
    """A task's status messages, as the call's progress."""

    async def on_status(status: Progress) -> None:
        await progress(status.progress, status.total, status.message)

    return on_status


def _progress_callback(on_progress: ProgressSink | None) -> ProgressFnT:
    """The SDK's progress callback for a call: each notification to `on_progress` (a failing sink is logged)."""

    async def progress_callback(progress: float, total: float | None, message: str | None) -> None:
        if on_progress is not None:
            try:
                await on_progress(Progress(progress, total, message))
            except Exception:
                logger.exception("progress sink failed")

    return progress_callback


def _url_mode(question: KeptQuestion) -> bool:
    request = (question.input_requests or {}).get(question.input_key) or {}
    params = request.get("params") if isinstance(request, dict) else None
    return isinstance(params, dict) and params.get("mode") == "url"

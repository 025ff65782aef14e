"""The MCP side of the bridge as the hosts see it: one `Hub` over the session pool, calls and elicitations.

Async, does I/O. Surfaces call `list_servers`, `list_tools`, `call_tool` and `cancel` (the gateway also `abandon`,
for a call its agent left); servers' questions reach the surface only as `mapping.Request`s through the
`PromptRegistry`, and answers come back as `Answer`s.
The work is done in `bot.servers.pool` (sessions), `bot.servers.calls` (tool calls, /cancel) and
`bot.servers.elicitation` (the SDK callback, routing questions to their person); `bot.servers.limits` decides
whether a person's call may start at all.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any, Final, cast

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp import MCPError

from bot.config import ApprovalGate, ApprovalRule, Caller, Config, ServerConfig
from bot.core import (
    CallStatus,
    KeptQuestion,
    KeptTask,
    Observer,
    Origin,
    Outcome,
    Prompt,
    PromptRegistry,
    RoundBook,
    ServerStatus,
    TaskBook,
    ToolInfo,
    ToolOutcome,
)
from bot.core.approvals import ApprovalAsk, ApprovalStatus, Approver, Factor, Verdict, content_hash, unnamed
from bot.core.permission import Permission
from bot.receipts import META_KEY, Approval, issue
from bot.servers.calls import Calls, Flight, ProgressSink, covers
from bot.servers.elicitation import Elicitations
from bot.servers.limits import Limits, Refusal
from bot.servers.pool import Pool, Unavailable
from bot.servers.results import failure
from bot.servers.rounds import Rounds
from mapping import Answer, FormSpec, Request, new_request_id

__all__ = ["AGENT_OUTCOMES", "DECLINED", "Flight", "Hub", "ProgressSink", "Unavailable", "caller_of"]

logger = logging.getLogger(__name__)

DECLINED: Final = "declined"
"""An agent's call outcome beside the `CallStatus` values: the person declined its `ask_person` question."""
AGENT_OUTCOMES: Final = (*(status.value for status in CallStatus), DECLINED)
"""Every outcome `Hub.agent_calls` counts (/metrics shows each, 0 included)."""
STOP_GRACE_S: Final = 2.0
"""At shutdown (`Hub.aclose`): how long calls get to end once their questions were answered `cancel`, and cards to
be settled, before the rest is cancelled."""
EXIT_WAIT_S: Final = 5.0
"""Leaving `async with Hub(...)`: how long the shutdown (`aclose`) may take before the hub's tasks are cancelled."""
LEAVE_GRACE_S: Final = 2.0
"""When an agent goes away from a call with a question open (`Hub.abandon`): how long its server gets to end
the tool once it heard `cancel`, before the call is cancelled."""


class Hub:
    """All MCP sessions of the process. Use as `async with Hub(config, prompts) as hub:`."""

    def __init__(
        self,
        config: Config,
        prompts: PromptRegistry,
        *,
        transport: Callable[[ServerConfig], Any] | None = None,
        clock: Callable[[], float] | None = None,
        observer: Observer | None = None,
        book: RoundBook | None = None,
        tasks: TaskBook | None = None,
        auth: Callable[[ServerConfig, Origin], Any] | None = None,
        signed_in: Callable[[int, str], Awaitable[bool]] | None = None,
        approver: Approver | None = None,
        no_approver_reason: str = "this host cannot ask approvers",
        names: Callable[[int], str] | None = None,
        sign_receipts: Callable[[bytes], bytes] | None = None,
    ) -> None:
        self.config = config
        self.sign_receipts = sign_receipts
        """Signs the receipt an approved call carries to its server (`bot.receipts`): the audit key's Ed25519
        signature. None (no `[storage] secret_key`): approved calls go without one."""
        self._signed_in = signed_in
        """Whether a person holds tokens for an OAuth server (`SignIns.signed_in`): /servers asks it first."""
        self.observer = observer
        """Told of each call's start and outcome before the server or the person is (the audit log)."""
        self.prompts = prompts
        self.limits = Limits(config.limits, clock or time.monotonic)
        """Per-person limits; `limits.refused` counts refusals (read by /metrics)."""
        self.elicitations = Elicitations(prompts, limits=self.limits, book=book, vet=self._vet_answer)
        self.pool = Pool(
            config,
            prompts,
            self.elicitations.on_elicit,
            self.elicitations.on_message,
            transport=transport,
            clock=clock,
            limits=self.limits,
            auth=auth,
        )
        self.calls = Calls(self.pool, prompts, self.elicitations, Rounds(self.elicitations, book), tasks)
        self.servers = self.pool.servers
        self.calls_ended: Counter[CallStatus] = Counter()
        """Tool calls that returned, by how they ended (read by /metrics)."""
        self.agent_calls: Counter[str] = Counter()
        """Agents' calls through the gateway that ended (tool calls, `ask_person` and `notify_person`), by
        outcome (read by /metrics): a `CallStatus` value, or `declined` (the person declined an agent's
        question)."""
        self.approver = approver
        """Gets gated calls approved (`[[approvals]]`); None (the console, no database): they are refused."""
        self.no_approver_reason = no_approver_reason
        """Why a gated call is refused when there is no `approver`."""
        self.names: Callable[[int], str] = names or unnamed
        """A person's display name, for approval cards (the host knows names; the hub knows ids)."""
        self._tg: TaskGroup | None = None
        self._stack = AsyncExitStack()

    # -- lifecycle -------------------------------------------------------------------------------------

    async def __aenter__(self) -> Hub:
        self._tg = await self._stack.enter_async_context(anyio.create_task_group())
        self.pool.start(self._tg)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(EXIT_WAIT_S):
            await self.aclose()
        assert self._tg is not None
        self._tg.cancel_scope.cancel()
        await self._stack.aclose()
        self._tg = None

    async def aclose(self, grace_s: float = STOP_GRACE_S) -> None:
        """Shutdown: every pending prompt is cancelled towards its server, then calls and sessions end."""
        self.elicitations.stopping = True
        self.prompts.abort_all(Outcome.SHUTDOWN)
        self.prompts.abandon_io_after(grace_s)  # cards are settled while the grace lasts, not after
        await self.calls.stop(grace_s)
        self.pool.close_all()
        with anyio.move_on_after(grace_s):
            await self.pool.wait_closed()

    # -- queries ---------------------------------------------------------------------------------------

    def server_names(self) -> list[str]:
        return list(self.servers)

    @property
    def sessions_open(self) -> int:
        """MCP sessions open now."""
        return self.pool.open_count

    async def probe(self, name: str, origin: Origin) -> ServerStatus:
        """Connect (if needed) and count tools; errors are reported in the status, not raised."""
        server = self.servers[name]
        if (
            server.oauth is not None
            and self._signed_in is not None
            and self.pool.get(server, origin) is None
            and not await self._signed_in(origin.user_id, name)
        ):
            # Listing servers must not send a sign-in card per OAuth server: that is for /tools and calls.
            reason = f"sign in first (/tools {name})"
            return ServerStatus(name, server.title, server.transport, False, error=reason)
        try:
            tools = await self.list_tools(name, origin)
        except Unavailable as exc:
            return ServerStatus(name, server.title, server.transport, False, error=exc.reason)
        conn = self.pool.get(server, origin)
        return ServerStatus(
            name,
            server.title,
            server.transport,
            True,
            protocol=conn.protocol if conn else None,
            tool_count=len(tools),
        )

    async def list_tools(self, name: str, origin: Origin) -> list[ToolInfo]:
        """The server's tools (all pages), kept per session until the server says the list changed.

        Raises:
            Unavailable: the server cannot be reached or failed the request.
        """
        server = self.pool.server(name)
        async with self.pool.use(server, origin) as conn:
            if conn.tools is not None:
                return conn.tools
            assert conn.client is not None
            tools: list[types.Tool] = []
            cursor: str | None = None
            try:
                with anyio.fail_after(server.call_timeout_s):
                    while True:
                        page = await conn.client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
            except (MCPError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                raise Unavailable(name, await conn.why_failed(exc)) from exc
            return conn.keep_tools(
                [
                    ToolInfo(
                        server=name,
                        name=t.name,
                        title=t.title,
                        description=t.description,
                        input_schema=dict(t.input_schema),
                        output_schema=None if t.output_schema is None else dict(t.output_schema),
                        annotations=None
                        if t.annotations is None
                        else t.annotations.model_dump(by_alias=True, mode="json", exclude_none=True),
                        task_support=None if t.execution is None else t.execution.task_support,
                    )
                    for t in tools
                ]
            )

    # -- calls -----------------------------------------------------------------------------------------

    async def call_tool(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any] | None,
        origin: Origin,
        on_progress: ProgressSink | None = None,
        *,
        approved: Verdict | None = None,
        kept: list[KeptQuestion] | None = None,
        restored: list[tuple[Prompt, KeptQuestion]] | None = None,
        flight: Flight | None = None,
        task: KeptTask | None = None,
    ) -> ToolOutcome:
        """Call a tool for `origin`; elicitations on the way reach that person. Never raises for outcomes.

        A call an `[[approvals]]` rule gates waits for the `approver`'s verdict first and is not sent unless
        approved (it ends `REFUSED` with the verdict's line); `approved` is a verdict already reached for exactly
        these arguments (a request decided after a restart). `flight` is kept up to date with what the call waits
        for (a drain looks at it). With `kept`, the call is a 2026-07-28 round kept from
        before a restart, resumed (`Calls.call_tool`): it was approved and audited by the process that began it;
        so with `task`, a task made as the call by the process before, polled again.

        A call past this person's limits is not started: it ends `REFUSED` with one line, empty when they were
        told about that limit recently (say nothing then). Logs one INFO line per call: who, server, tool,
        outcome and duration (never arguments or answers).
        """
        started = anyio.current_time()
        meta: Callable[[], types.RequestParamsMeta] | None = None
        rule = self.config.approval_rule(name, tool, caller_of(origin))
        # With nobody to ask (the console), a call whose answers are gated is refused too: never half run.
        if (
            kept is None
            and task is None
            and rule is not None
            and (rule.gate is ApprovalGate.CALL or self._no_approver() is not None)
        ):
            if approved is not None:
                verdict = approved
            else:
                flight = flight or Flight()
                flight.approval = self._no_approver() is None
                try:
                    verdict = await self._approval(rule, name, tool, arguments, origin)
                finally:
                    flight.approval = False
            if not verdict.approved:
                # A task's request ended by its requester (/cancel) ends the task as cancelled, not refused.
                ended = origin.task is not None and verdict.status is ApprovalStatus.CANCELLED
                outcome = failure(CallStatus.CANCELLED if ended else CallStatus.REFUSED, verdict.text)
                self._ended(origin, outcome)
                log_call(origin, name, tool, outcome, anyio.current_time() - started)
                return outcome
            if rule.gate is ApprovalGate.CALL:
                meta = self._receipt_for(verdict, name, tool, arguments, origin)
        if self.observer is not None and kept is None and task is None:
            await self.observer.call_started(origin, name, tool, arguments)
        server = self.servers.get(name)
        refusal = self.limits.start_call(origin.user_id, origin.agent)
        if refusal is None:
            try:
                process = None if server is None else self.pool.refusal(server, origin)
                if process is not None:
                    outcome = refused(process)
                else:
                    outcome = await self.calls.call_tool(
                        name,
                        tool,
                        arguments,
                        origin,
                        on_progress,
                        kept=kept,
                        restored=restored,
                        flight=flight,
                        meta=meta,
                        task=task,
                    )
            finally:
                self.limits.end_call(origin.user_id, origin.agent)
        else:
            # An agent is told every time (it reads results, not a chat a stranger could flood through us).
            outcome = refused(refusal, always=origin.agent is not None)
        self._ended(origin, outcome)
        log_call(origin, name, tool, outcome, anyio.current_time() - started)
        if self.observer is not None:
            with anyio.CancelScope(shield=True):
                await self.observer.call_ended(origin, name, tool, outcome)
        return outcome

    def _ended(self, origin: Origin, outcome: ToolOutcome) -> None:
        self.calls_ended[outcome.status] += 1
        if origin.agent is not None:
            self.agent_calls[outcome.status.value] += 1

    async def ask_for_agent(
        self, request: Request, form: FormSpec | None, origin: Origin, permission: Permission | None = None
    ) -> Answer | str:
        """An agent's own question to its person (the gateway's `ask_person`; an agent's permission prompt with
        `permission`), counted as one of its calls: under the same `[limits]` as its tool calls (past them: the
        refusal's line instead of an answer)."""
        refusal = self.limits.start_call(origin.user_id, origin.agent)
        if refusal is not None:
            self.agent_calls[CallStatus.REFUSED.value] += 1
            return refusal.reason
        outcome = CallStatus.CANCELLED.value  # unless it returns: the agent went away
        try:
            answer = await self.elicitations.ask_for_agent(request, form, origin, permission)
            if isinstance(answer, str):
                outcome = CallStatus.REFUSED.value  # past `open_questions`
            elif answer.ok:
                outcome = CallStatus.OK.value
            elif answer.reason == "declined":
                outcome = DECLINED
            return answer
        finally:
            self.limits.end_call(origin.user_id, origin.agent)
            if origin.agent is not None:
                self.agent_calls[outcome] += 1

    async def approve_for_agent(self, rule: ApprovalRule, permission: Permission, origin: Origin) -> Verdict:
        """An agent's permission prompt an `[[approvals]]` rule covers, put to the rule's approvers as a gated call
        is (quorum, second factor, reminders; stored and audited by the approver): the prompt's agent stands
        for the server, its tool and input for the call's. Counted as one of the agent's calls, under the same
        `[limits]` (past them: a cancelled verdict with the limit's line, nobody asked). Never raises for
        outcomes."""
        refusal = self.limits.start_call(origin.user_id, origin.agent)
        if refusal is not None:
            self.agent_calls[CallStatus.REFUSED.value] += 1
            return Verdict(ApprovalStatus.CANCELLED, refusal.reason)
        outcome = CallStatus.CANCELLED.value  # unless it returns: the agent went away
        try:
            verdict = await self._approval(
                rule, permission.client.value, permission.tool, dict(permission.input), origin
            )
            outcome = (CallStatus.OK if verdict.approved else CallStatus.REFUSED).value
            return verdict
        finally:
            self.limits.end_call(origin.user_id, origin.agent)
            self.agent_calls[outcome] += 1

    async def notify_for_agent(self, origin: Origin, tool: str, line: str) -> ToolOutcome:
        """An agent's line to its person (the gateway's `notify_person`, named `tool`), counted and audited as
        one of its calls: audited as a call of `tool` on the agent (`origin.agent` as the server; the line as
        its argument, kept per `[audit] content`), and under the same `[limits]` as its tool calls (past them:
        refused with the limit's line, nothing sent). Counted in `agent_calls`, not in `calls_ended` (no
        server's tool ran). Never raises for outcomes."""
        server = origin.agent or "agent"
        started = anyio.current_time()
        if self.observer is not None:
            await self.observer.call_started(origin, server, tool, {"message": line})
        refusal = self.limits.start_call(origin.user_id, origin.agent)
        if refusal is not None:
            outcome = refused(refusal, always=True)  # an agent reads its results: it is told every time
        else:
            try:
                await self.prompts.surface.notify(origin, f"🤖 {origin.agent}: {line}")
            finally:
                self.limits.end_call(origin.user_id, origin.agent)
            outcome = ToolOutcome(CallStatus.OK, "sent")
        self.agent_calls[outcome.status.value] += 1
        log_call(origin, server, tool, outcome, anyio.current_time() - started)
        if self.observer is not None:
            with anyio.CancelScope(shield=True):
                await self.observer.call_ended(origin, server, tool, outcome)
        return outcome

    def _receipt_for(
        self, verdict: Verdict, server: str, tool: str, arguments: dict[str, Any] | None, origin: Origin
    ) -> Callable[[], types.RequestParamsMeta] | None:
        """The `_meta` of each sending of an approved call: a receipt signed anew (a fresh nonce) each time,
        or None when there is no key to sign with."""
        sign = self.sign_receipts
        if sign is None or verdict.approval_id is None or not verdict.approvals:
            return None
        approval_id = verdict.approval_id
        approvers = tuple(Approval(b.user_id, b.name, b.at, b.factor.value) for b in verdict.approvals)
        asked_at = verdict.asked_at or approvers[0].at

        def meta() -> types.RequestParamsMeta:
            receipt = issue(
                sign,
                server=server,
                tool=tool,
                hash=content_hash(server, tool, arguments),
                approval=approval_id,
                requester=(origin.user_id, self.names(origin.user_id)),
                approvers=approvers,
                asked_at=asked_at,
                now=dt.datetime.now(dt.UTC),
            )
            # The SDK's `_meta` TypedDict is open (PEP 728 `extra_items`), which mypy does not read yet.
            return cast(types.RequestParamsMeta, {META_KEY: receipt})

        return meta

    async def _approval(
        self, rule: ApprovalRule, server: str, tool: str, arguments: dict[str, Any] | None, origin: Origin
    ) -> Verdict:
        """The approver's verdict on this call, or a refusal when there is nobody to ask."""
        reason = self._no_approver()
        if self.approver is None or reason is not None:
            return Verdict(
                ApprovalStatus.CANCELLED,
                f"{tool} on {server} needs approval (approvals[{rule.index}]) and {reason}; it was not run",
            )
        ask = ApprovalAsk(
            origin=origin,
            requester=self.names(origin.user_id),
            server=server,
            tool=tool,
            content=dict(arguments or {}),
            approvers=rule.approvers,
            quorum=rule.quorum,
            chat=rule.chat,
            self_approval=rule.self_approval,
            timeout_s=rule.timeout_s,
            factor=Factor.TAP if rule.second_factor is None else Factor.TOTP,
            remind_after_s=rule.remind_after_s,
            escalate_after_s=rule.escalate_after_s,
            escalate_to=rule.escalate_to,
        )
        if origin.agent is None or origin.task is not None:
            # A task's request outlives its wait: the task is kept, and whoever carries the approval out runs it.
            return await self.approver.decide(ask)
        return await _until_the_agent_goes(self.approver, ask)

    async def _vet_answer(
        self, prompt: Prompt, tool: str | None, content: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Gate "answers": an accepted answer goes to the server only once approved; else `decline` (None)."""
        rule = (
            None if tool is None else self.config.approval_rule(prompt.server, tool, caller_of(prompt.origin))
        )
        if rule is None or rule.gate is not ApprovalGate.ANSWERS:
            return content
        reason = self._no_approver()
        if self.approver is None or reason is not None:
            logger.info("an answer to %s/%s needs approval and %s: declined", prompt.server, tool, reason)
            return None
        ask = ApprovalAsk(
            origin=prompt.origin,
            requester=self.names(prompt.origin.user_id),
            server=prompt.server,
            tool=tool or "",
            content=content,
            approvers=rule.approvers,
            quorum=rule.quorum,
            chat=rule.chat,
            self_approval=rule.self_approval,
            timeout_s=rule.timeout_s,
            factor=Factor.TAP if rule.second_factor is None else Factor.TOTP,
            remind_after_s=rule.remind_after_s,
            escalate_after_s=rule.escalate_after_s,
            escalate_to=rule.escalate_to,
            question=prompt.request.prompt,
        )
        approver = self.approver
        verdict = await approver.decide(ask)
        while verdict.changing and verdict.approval_id is not None:
            # The requester changes the answer: ask again; the request is bound to the new content.
            again = Prompt(
                request=replace(prompt.request, id=new_request_id()),
                origin=prompt.origin,
                server=prompt.server,
                form=prompt.form,
                scope=prompt.scope,
                why_withdrawn=prompt.why_withdrawn,
            )
            answer = await self.prompts.ask(again)
            if not answer.ok:
                await approver.withdraw(verdict.approval_id)
                return None
            content = dict(answer.data or {})
            verdict = await approver.decide(replace(ask, content=content), verdict.approval_id)
        return content if verdict.approved else None

    def _no_approver(self) -> str | None:
        """Why gated calls cannot be asked about now (no approver, or one that is stopping), or None."""
        if self.approver is None:
            return self.no_approver_reason
        return self.approver.unavailable()

    async def abandon(
        self, flight: Flight, why: Outcome, origin: Origin, target: tuple[str, str] | None, ran: anyio.Event
    ) -> bool:
        """Nobody waits for this call any more: its agent cancelled it or went away (`why` AGENT_CANCELLED), or
        lost its access (AGENT_REVOKED). `flight` is the call of `target` (server, tool; None for an agent's own
        question) for `origin`; `ran` is set once its work is over.

        The call's open questions end as the agent's doing (their cards say so; the server hears `cancel` and
        gets `LEAVE_GRACE_S` to end its tool its own way, until `ran`); then the call is cancelled from within,
        so it ends `CANCELLED` (logged, counted and audited as any call). A question the bot is stopping for is
        already aborted as such; a kept one is left for the next process. A sign-in card the call is waiting on
        (for `origin`, on the target's server) ends so too: its flow runs in the call, and would end with it as
        if the server had withdrawn it. Losing its access, an agent's own question (`ask_person`) ends as well.
        If the call had asked the person something before (and not only the questions just ended), they are
        told that its result reaches nobody (not while the bot stops: that says so itself).

        Returns False when the call is not running on a session (it waits for approvers, or it is the agent's own
        question): the one who waits for it cancels it.
        """
        ended = await self._end_questions(flight, why, origin, None if target is None else target[0], ran)
        if flight.scope is None:
            return False
        flight.scope.cancel()
        caller = flight.caller
        if (
            target is not None
            and caller is not None
            and caller.asked > ended
            and not self.elicitations.stopping
        ):
            went = "lost its access while it waited" if why is Outcome.AGENT_REVOKED else "stopped waiting"
            with self.prompts.shielded_io():
                await self.prompts.surface.notify(
                    origin,
                    f"🤖 Your agent {origin.agent} {went} for {target[1]} on {target[0]}, which "
                    "had asked you something: the call is ended, and its result reaches nobody.",
                )
        return True

    async def _end_questions(
        self, flight: Flight, why: Outcome, origin: Origin, server: str | None, ran: anyio.Event
    ) -> int:
        """`abandon`'s questions: those the call has out, and the sign-in (or, revoked, the agent's own) cards of
        `origin`, end as `why`; returns how many of the call's own ended (a sign-in card is the bot's question,
        not counted), after waiting up to `LEAVE_GRACE_S` for `ran` if there were any."""
        if why is Outcome.AGENT_CANCELLED:
            logger.info("a call of agent %s ends: it cancelled or went away, or the bot stops", origin.agent)
        asking = flight.caller.asking if flight.caller is not None else set()
        ended = [
            prompt
            for prompt in list(asking)
            if not self.prompts.kept(prompt) and self.prompts.abort(prompt, why)
        ]
        for prompt in self.prompts.pending(origin=origin):
            signing_in = prompt.sign_in and prompt.server == server and not self.prompts.kept(prompt)
            own = why is Outcome.AGENT_REVOKED and server is None and prompt.scope == ("agent", origin)
            if signing_in or own:
                self.prompts.abort(prompt, why)
        if ended:
            with anyio.CancelScope(shield=True), anyio.move_on_after(LEAVE_GRACE_S):
                await ran.wait()
        return len(ended)

    def cancel(self, origin: Origin) -> int:
        """/cancel: this person's pending prompts and running calls in this chat, and their calls still waiting
        for approvers (the request ends for everyone); returns how many."""
        waiting = 0 if self.approver is None else self.approver.cancel(lambda other: covers(origin, other))
        return self.calls.cancel(origin) + waiting


def caller_of(origin: Origin) -> Caller:
    """Whose call it is, as `[[approvals]] callers` names it: an agent's through the gateway, or the chat's."""
    return Caller.CHAT if origin.agent is None else Caller.AGENT


def refused(refusal: Refusal, *, always: bool = False) -> ToolOutcome:
    """The outcome of a call a limit did not let start: its line, or nothing to say (unless `always`)."""
    return failure(CallStatus.REFUSED, refusal.reason if refusal.tell or always else "")


def log_call(origin: Origin, server: str, tool: str, outcome: ToolOutcome, seconds: float) -> None:
    """The per-call INFO line. Only names and the status: arguments, answers and results may be private. An
    agent's call names the agent (its person's chat is not where it was made)."""
    where = f"in chat {origin.chat_id}" if origin.agent is None else f"via agent {origin.agent}"
    logger.info(
        "call %s/%s by user %d %s: %s in %.1f s",
        server,
        tool,
        origin.user_id,
        where,
        outcome.status.value,
        seconds,
    )


async def _until_the_agent_goes(approver: Approver, ask: ApprovalAsk) -> Verdict:
    """`approver.decide(ask)` for an agent's call or permission prompt, whose request ends with the agent: when
    this wait is cancelled while the process goes on (the agent cancelled, its connection dropped, its hook timed
    out), the request is ended as its requester's doing (the approvers' cards say so, audited) instead of staying
    open for a call nobody would run. While the process stops, the wait is cancelled as any other and the request
    is left to the next process (which tells the person the agent is gone)."""
    verdicts: list[Verdict] = []
    decided = anyio.Event()
    waiting = anyio.CancelScope(shield=True)

    async def wait() -> None:
        try:
            with waiting:
                verdicts.append(await approver.decide(ask))
        finally:
            decided.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        try:
            await decided.wait()
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                going_on = approver.unavailable() is None
                if not (going_on and approver.cancel(lambda other: other is ask.origin)):
                    waiting.cancel()  # stopping, or not waiting yet: cancelled as any wait
                await decided.wait()
            raise
    return verdicts[0]

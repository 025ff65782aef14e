"""The elicitation path: the SDK's callback for both protocol eras, routed to the person whose call asked.

Async, does I/O through the prompt registry (which shows cards on a surface). A server's `elicitation/create`
(2025 eras) arrives in `on_elicit`, a question of a 2026-07-28 `input_required` round in `ask_input` (the bot
drives those rounds itself: `bot.servers.rounds`); either is mapped onto a `mapping.Request`
(forms parsed once per distinct schema), asked through the `PromptRegistry`, and the `Answer` goes back as an
`ElicitResult`; what cannot be shown becomes a JSON-RPC error and one line to the person.
"""

from __future__ import annotations

import contextvars
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import anyio.lowlevel
import mcp_types as types
from mcp.client import ClientRequestContext, IncomingMessage
from mcp_types import ElicitRequestParams, ElicitResult, ErrorData
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bot.core import Era, Keeper, KeptQuestion, Origin, Outcome, Prompt, PromptRegistry, RoundBook
from bot.core.permission import Permission
from bot.servers.connections import Connection
from bot.servers.keeper import RoundKeeper
from bot.servers.limits import Limits, Refusal
from bot.servers.question_tasks import related_task
from mapping import (
    Answer,
    FormSpec,
    MappingError,
    Request,
    RequestKind,
    answer_to_elicit_result,
    elicitation_to_request,
    parse_schema,
)
from mapping.urls import check_url

logger = logging.getLogger(__name__)

MAX_OPEN_PER_SESSION: Final = 5
"""Questions one person's MCP session may have open at once (a 2026-07-28 round counts whole); more are refused.
A shared session serves everyone, so there the bound is per call: each call's questions count, not the
others'."""
REFUSAL_LINE_EVERY_S: Final = 60.0
"""A session (a call, on a shared session) whose questions are refused for being too many tells its person
so at most this often."""


@dataclass(eq=False, slots=True)
class Caller:
    """A running tool call as the elicitation path sees it: whose it is, and which of its questions are out."""

    origin: Origin
    asking: set[Prompt] = field(default_factory=set[Prompt])
    tool: str = ""
    """The tool called (approval rules of gate "answers" match it; kept with a legacy question, for **Run again**
    after a restart)."""
    arguments: dict[str, Any] | None = None
    open: int = 0
    """Its questions open (or being checked) now: what the cap counts on a shared session."""
    asked: int = 0
    """Its questions shown to the person so far (the gateway tells the person when an agent leaves a call that
    asked them something)."""
    refusal_told: float | None = None
    """When its person was last told that its questions were too many (on a shared session)."""
    answered: bool = False
    """An answer of its person's went back to the server (or is on its way): a connection that breaks from then
    on may have taken it along."""


Vet = Callable[[Prompt, str | None, dict[str, Any]], Awaitable[dict[str, Any] | None]]
"""(question, tool, accepted content) -> the content to send, or None for `decline`."""


class _AfterVet:
    """A `Keeper` that leaves an accepted answer unwritten: `Elicitations.vetted` writes what is finally sent."""

    def __init__(self, inner: Keeper) -> None:
        self.inner = inner

    @property
    def resumable(self) -> bool:
        return self.inner.resumable

    async def shown(self, prompt: Prompt) -> None:
        await self.inner.shown(prompt)

    async def placed(self, prompt: Prompt, chat_id: int, message_id: int) -> None:
        await self.inner.placed(prompt, chat_id, message_id)

    async def progress(self, prompt: Prompt, progress: dict[str, Any]) -> None:
        await self.inner.progress(prompt, progress)

    async def ended(self, prompt: Prompt, answer: dict[str, Any] | None) -> None:
        if answer is None or answer.get("action") != "accept":
            await self.inner.ended(prompt, answer)


_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("toolnexus_caller", default=None)


class Elicitations:
    """Routes each session's questions to a person; one instance per hub."""

    def __init__(
        self,
        prompts: PromptRegistry,
        *,
        max_open: int = MAX_OPEN_PER_SESSION,
        clock: Callable[[], float] | None = None,
        limits: Limits | None = None,
        book: RoundBook | None = None,
        vet: Vet | None = None,
    ) -> None:
        self.prompts = prompts
        self.limits = limits
        self.book = book
        """Where legacy questions are kept, so that a restart can say they were lost (None: not kept)."""
        self._asked: dict[Hashable, anyio.Event] = {}
        """Per serialized session: set when the call holding it asks its person a question."""
        self.max_open = max_open
        self._now = clock or anyio.current_time
        self._serial: dict[Hashable, anyio.Lock] = {}
        self._current: dict[Hashable, Caller] = {}
        self._running: dict[Hashable, list[Caller]] = {}
        self._refusal_told: dict[Hashable, float] = {}
        self.stopping = False
        """Set at shutdown: questions still arriving are refused without a card."""
        self.vet = vet
        """Sees each accepted form answer before the server does: the content to send, or None to send
        `decline` instead (approvals of gate "answers"; the hub's)."""

    @asynccontextmanager
    async def on_session(self, conn: Connection, caller: Caller) -> AsyncIterator[None]:
        """While a call runs on `conn`: questions the session asks are routed to `caller` (and counted as its).

        A 2026-07-28 question arrives in the caller's own task (a context variable names it); a 2025 one
        arrives in the session's dispatcher, so the calls running on the session are kept per session, and a
        shared legacy session runs one call at a time (it could not tell whose call a question belongs to). A
        call that has to wait while another person's question is open is told so, once: that question holds
        everyone up to its own prompt timeout.
        """
        running = self._running.setdefault(conn.key, [])
        running.append(caller)
        token = _caller.set(caller)
        try:
            if not conn.server.shared or conn.protocol in MODERN_PROTOCOL_VERSIONS:
                yield
                return
            lock = self._serial.setdefault(conn.key, anyio.Lock(fast_acquire=True))
            await self._acquire(lock, conn, caller.origin)
            try:
                self._current[conn.key] = caller
                yield
            finally:
                self._current.pop(conn.key, None)
                lock.release()
        finally:
            _caller.reset(token)
            running.remove(caller)
            if not running:
                del self._running[conn.key]
                self._refusal_told.pop(conn.key, None)

    async def _acquire(self, lock: anyio.Lock, conn: Connection, origin: Origin) -> None:
        if not lock.locked():
            await lock.acquire()
            return
        acquired = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._tell_when_asked, conn, origin)
                await lock.acquire()
                acquired = True
                tg.cancel_scope.cancel()
        except BaseException:
            if acquired:
                lock.release()
            raise

    async def _tell_when_asked(self, conn: Connection, origin: Origin) -> None:
        if not conn.open_prompts:
            await self._asked.setdefault(conn.key, anyio.Event()).wait()
        with self.prompts.shielded_io():
            await self.prompts.surface.notify(
                origin, f"⏳ waiting for another person's question on {conn.server.name}"
            )

    async def on_elicit(
        self, conn: Connection, ctx: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        """The SDK's elicitation callback for one session: both protocol eras arrive here."""
        try:
            return await self._elicit(conn, params, task=related_task(ctx.meta))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            # The outermost MCP callback: a bug here must become a JSON-RPC error, never a hung server request.
            logger.exception("elicitation failed on %s", conn.server.name)
            return ErrorData(code=types.INTERNAL_ERROR, message="the client failed to handle the elicitation")

    async def ask_input(
        self, conn: Connection, params: ElicitRequestParams, keeper: Keeper | None
    ) -> ElicitResult | ErrorData:
        """A question of a 2026-07-28 round the bot drives itself (`bot.servers.rounds`), kept by `keeper`."""
        try:
            return await self._elicit(conn, params, keeper)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            # The outermost path of a round's question, as `on_elicit` is for the SDK's callback.
            logger.exception("elicitation failed on %s", conn.server.name)
            return ErrorData(code=types.INTERNAL_ERROR, message="the client failed to handle the elicitation")

    async def on_message(self, conn: Connection, message: IncomingMessage) -> None:
        """Notifications: a URL flow completed, the tool list changed; transport errors are only logged."""
        if isinstance(message, types.ElicitCompleteNotification):
            prompt = self.prompts.complete(conn.key, message.params.elicitation_id)
            if prompt is not None:
                await self.prompts.settle_completed(prompt)
        elif isinstance(message, types.ToolListChangedNotification):
            conn.forget_tools()
        elif isinstance(message, Exception):
            logger.debug("transport message from %s: %r", conn.server.name, message)

    async def _elicit(
        self,
        conn: Connection,
        params: ElicitRequestParams,
        keeper: Keeper | None = None,
        *,
        task: str | None = None,
    ) -> ElicitResult | ErrorData:
        askers = self._askers(conn)
        # The cap counts one person's questions: a whole unshared session, or on a shared session (everyone's)
        # the call that asked, which a question there always belongs to alone.
        counted = askers[0] if conn.server.shared and askers else None
        # Counted from the first moment: a 2026-07-28 round's questions arrive together (the SDK starts one
        # task per question), and each must see the others before any is shown.
        conn.prompt_opened(+1)
        if counted is not None:
            counted.open += 1
        try:
            if conn.protocol in MODERN_PROTOCOL_VERSIONS:
                await (
                    anyio.lowlevel.checkpoint()
                )  # the round's other tasks, already started, count themselves
            return await self._ask(conn, params, keeper, askers, counted, task)
        finally:
            conn.prompt_opened(-1)
            if counted is not None:
                counted.open -= 1

    async def _ask(
        self,
        conn: Connection,
        params: ElicitRequestParams,
        keeper: Keeper | None,
        askers: list[Caller],
        counted: Caller | None,
        task: str | None = None,
    ) -> ElicitResult | ErrorData:
        """Admit the question (`admit`), then show it to its person and send back their (vetted) answer; a
        question the server sent as `task` shows the server `input_required` while its card waits."""
        origin = askers[0].origin if askers else self._owner(conn)
        wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
        limited = None
        if origin is not None and not self.stopping and self.limits is not None:
            limited = self.limits.question(origin.user_id, self.prompts.open_for(origin.user_id))
        admission = admit(
            wire,
            owned=origin is not None,
            stopping=self.stopping,
            limited=limited,
            open_now=counted.open if counted is not None else conn.open_prompts,
            max_open=self.max_open,
            per_call=counted is not None,
        )
        if isinstance(admission, Refused):
            if origin is not None and admission.line is not None:
                if admission.too_many:
                    await self._refuse_too_many(conn, origin, admission.about, admission.line, counted)
                else:
                    await self._report(origin, conn.server.name, admission.about, admission.line)
            return admission.reply
        assert origin is not None  # a question of nobody's is refused
        request = admission.request
        if keeper is None and self.book is not None and len(askers) == 1:
            keeper = self._legacy_keeper(conn, askers[0], wire)
        prompt = Prompt(
            request=request,
            origin=origin,
            server=conn.server.name,
            form=admission.form,
            elicitation_id=wire.get("elicitationId"),
            scope=conn.key,
            why_withdrawn=lambda: _why_withdrawn(conn),
            keeper=self.deferring(keeper),
        )
        for caller in askers:
            caller.asking.add(prompt)
            caller.asked += 1
        asked = self._asked.pop(conn.key, None)
        if asked is not None:
            asked.set()  # calls waiting for this shared legacy session learn why
        if conn.gone.is_set():  # asked just before the server went: shown, and settled so at once
            self.prompts.abort(prompt, Outcome.SERVER_GONE)
        conn.question_tasks.mark(task, "input_required", "waiting for the person's answer")
        answer = await self._ask_for(prompt, askers)
        conn.question_tasks.mark(task, "working")
        result = answer_to_elicit_result(answer)
        if request.kind is RequestKind.AUTHORIZATION and result["action"] == "accept":
            result = {"action": "accept"}  # URL mode: consent only, no content on the wire
        return ElicitResult.model_validate(
            await self.vetted(prompt, askers[0].tool if askers else None, result)
        )

    async def _ask_for(self, prompt: Prompt, askers: list[Caller]) -> Answer:
        """Show `prompt` for the calls that asked it and wait for its answer; an answer by its person's hand is
        on its way to the server from now on (`Caller.answered`)."""
        try:
            answer = await self.prompts.ask(prompt)
        finally:
            for caller in askers:
                caller.asking.discard(prompt)
        if prompt.outcome in _THE_PERSONS:
            for caller in askers:
                caller.answered = True
        return answer

    async def ask_for_agent(
        self, request: Request, form: FormSpec | None, origin: Origin, permission: Permission | None = None
    ) -> Answer | str:
        """An agent's own question to its person (the gateway's `ask_person`): a card like a server's, under the
        person's `open_questions` limit (past it: the refusal's line instead of an answer). It is not kept across
        a restart: the agent's call ends with the process. Cancelled under it, the agent stopped waiting (the
        bot stopping aborts it as such first)."""
        if self.limits is not None:
            open_now = self.prompts.open_for(origin.user_id)
            refusal = self.limits.question(origin.user_id, open_now)
            if refusal is not None:
                return refusal.reason
        prompt = Prompt(
            request=request,
            origin=origin,
            server=origin.agent or "agent",
            form=form,
            scope=("agent", origin),
            why_withdrawn=lambda: Outcome.AGENT_CANCELLED,
            permission=permission,
        )
        return await self.prompts.ask(prompt)

    def deferring(self, keeper: Keeper | None) -> Keeper | None:
        """With a `vet`, a question's keeper writes an accepted answer only once `vetted` let it through: a
        restart while approvers decide finds the question unanswered, never an answer nobody approved."""
        if keeper is None or self.vet is None or isinstance(keeper, _AfterVet):
            return keeper
        return _AfterVet(keeper)

    async def vetted(self, prompt: Prompt, tool: str | None, result: dict[str, Any]) -> dict[str, Any]:
        """The wire `ElicitResult` to send for `prompt`'s answer: an accepted form answer as `vet` lets it through
        (`decline` when it does not); then written to the prompt's keeper if it was deferred."""
        if self.vet is not None and result["action"] == "accept" and prompt.request.kind is RequestKind.INPUT:
            content = await self.vet(prompt, tool, dict(result.get("content") or {}))
            result = {"action": "decline"} if content is None else {"action": "accept", "content": content}
        if isinstance(prompt.keeper, _AfterVet) and prompt.outcome is not Outcome.LOST_IN_RESTART:
            # (a question left for the next process keeps its row: `PromptRegistry.leave`)
            await prompt.keeper.inner.ended(prompt, result)
        return result

    def _legacy_keeper(self, conn: Connection, caller: Caller, wire: dict[str, Any]) -> Keeper | None:
        """A 2025-era question is kept while it is open: it dies with its connection, and after a restart its
        card says so and offers to run the call again."""
        if self.book is None or conn.protocol in MODERN_PROTOCOL_VERSIONS:
            return None
        question = KeptQuestion(
            id="",
            round_id=str(uuid.uuid4()),
            input_key="",
            era=Era.LEGACY,
            server=conn.server.name,
            tool=caller.tool,
            arguments=caller.arguments,
            origin=caller.origin,
            token="",
            deadline=0.0,
            input_requests={"": {"method": "elicitation/create", "params": wire}},
        )
        return RoundKeeper(self.book, question)

    async def _refuse_too_many(
        self, conn: Connection, origin: Origin, message: str, line: str, counted: Caller | None
    ) -> None:
        """`line` to the person, at most every `REFUSAL_LINE_EVERY_S` per session, or per call on a shared
        session (a flood stays one line)."""
        now = self._now()
        told = counted.refusal_told if counted is not None else self._refusal_told.get(conn.key)
        if told is not None and now - told < REFUSAL_LINE_EVERY_S:
            return
        # Noted before the await: the round's other questions are refused meanwhile.
        if counted is not None:
            counted.refusal_told = now
        else:
            self._refusal_told[conn.key] = now
        await self._report(origin, conn.server.name, message, line)

    async def _report(self, origin: Origin, server: str, message: str, reason: str) -> None:
        with self.prompts.shielded_io():
            try:
                await self.prompts.surface.report_unsupported(origin, server, message, reason)
            except Exception:
                logger.exception("could not report an unsupported elicitation")

    def _askers(self, conn: Connection) -> list[Caller]:
        """The calls a question on `conn` belongs to: exactly one, except on a 2025 session of one person
        with several calls running (it cannot say which asked), where it counts as each one's."""
        if conn.protocol in MODERN_PROTOCOL_VERSIONS:
            caller = _caller.get()
            return [caller] if caller is not None else []
        current = self._current.get(conn.key)
        if current is not None:
            return [current]
        return list(self._running.get(conn.key, ())) if not conn.server.shared else []

    @staticmethod
    def _owner(conn: Connection) -> Origin | None:
        """The person a session is for (None for a shared session)."""
        if conn.server.shared:
            return None
        return conn.key[1]  # type: ignore[index,no-any-return]


@dataclass(frozen=True, slots=True)
class Admitted:
    """A question the bot will show: its request and, for a form, its parsed fields."""

    request: Request
    form: FormSpec | None


@dataclass(frozen=True, slots=True)
class Refused:
    """A question the bot will not show: what its server gets instead, and what its person is told."""

    reply: ElicitResult | ErrorData
    """The answer to the server's request."""
    about: str
    """The question's text, as the server sent it (quoted to the person)."""
    line: str | None = None
    """Why, for the person (`Surface.report_unsupported`); None: they are not told."""
    too_many: bool = False
    """Refused for being one too many at once: the line goes at most every `REFUSAL_LINE_EVERY_S`."""


def admit(
    wire: dict[str, Any],
    *,
    owned: bool,
    stopping: bool,
    limited: Refusal | None,
    open_now: int,
    max_open: int,
    per_call: bool,
) -> Admitted | Refused:
    """Whether a server's question (`wire`: its `elicitation/create` params) is shown, and if not, what its
    server and its person hear. Pure (but for the request's fresh id).

    In order: a question of no person's call (`owned` False) and one arriving while the bot stops are errors;
    past the person's `[limits] open_questions` (`limited`, asked only of an owned question while running) its
    server hears `cancel`; past `max_open` open at once (`open_now`, counted per call when `per_call`, else per
    session) an error; a schema or link the bot cannot show is an error, an unsafe link a `decline`.
    """
    message = wire.get("message")
    about = message if isinstance(message, str) else ""
    if not owned:
        return Refused(
            ErrorData(code=types.INVALID_REQUEST, message="elicitation outside of any tool call"), about
        )
    if stopping:
        return Refused(ErrorData(code=types.INVALID_REQUEST, message="the client is shutting down"), about)
    if limited is not None:
        return Refused(ElicitResult(action="cancel"), about, limited.reason if limited.tell else None)
    if open_now > max_open:
        error = ErrorData(
            code=types.INVALID_REQUEST,
            message=f"too many questions at once: at most {max_open} may be open per "
            + ("call" if per_call else "session"),
        )
        line = f"it asked more than {max_open} questions at once; the extra ones were refused"
        return Refused(error, about, line, too_many=True)
    try:
        request = elicitation_to_request(wire)
        form = (
            form_of(request.data["schema"] if request.data else None)
            if request.kind is RequestKind.INPUT
            else None
        )
    except MappingError as exc:
        return Refused(
            ErrorData(code=types.INVALID_PARAMS, message=f"unsupported elicitation: {exc}"), about, str(exc)
        )
    if request.url is not None:
        checked = check_url(request.url)
        if not checked.openable:
            # Never a button, never a silent accept: the person is told, the server hears "decline".
            reason = "; ".join(checked.warnings) or "not a web address"
            return Refused(ElicitResult(action="decline"), about, f"the link was refused: {reason}")
    return Admitted(request, form)


_THE_PERSONS: Final = frozenset({Outcome.ANSWERED, Outcome.DECLINED, Outcome.CANCELLED})
"""How a prompt ends by its person's hand: their answer goes to the server."""

_FORM_KEY_MAX: Final = 16_384
"""Schemas whose JSON is longer are parsed every time (a hostile server must not fill the cache)."""
_FORMS_KEPT: Final = 256
"""Distinct parsed forms remembered (the least recently used is forgotten)."""


def form_of(schema: Any) -> FormSpec:
    """`parse_schema`, remembered per distinct schema (a `FormSpec` is immutable).

    Servers ask the same forms again and again, and parsing checks each against the JSON Schema meta-schema.
    """
    try:
        key = json.dumps(schema)  # key order kept: it is the order of the fields
    except (TypeError, ValueError, RecursionError):
        return parse_schema(schema)
    return _parsed(key) if len(key) <= _FORM_KEY_MAX else parse_schema(schema)


@functools.lru_cache(maxsize=_FORMS_KEPT)
def _parsed(key: str) -> FormSpec:
    return parse_schema(json.loads(key))


def _why_withdrawn(conn: Connection) -> Outcome:
    """Why the SDK cancelled an elicitation callback: its session ended, or the server withdrew the request."""
    if conn.gone.is_set():
        return Outcome.SHUTDOWN if conn.closing else Outcome.SERVER_GONE
    return Outcome.SERVER_CANCELLED

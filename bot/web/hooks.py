"""Agents' own permission prompts on the phone: `POST <public_url>/hooks/<client>` for Claude Code's and Codex's
hooks, and the decision behind it (`PermissionDesk`) that the gateway's permission-prompt tool shares. Does I/O
(HTTP answers; cards through the hub; the audit log).

A hook request carries the agent token in `Authorization: Bearer tnx_...` (read from the store on every request,
as `/mcp` reads it: a revoked token is refused at once) and its person must still be allowed to use the bot. The
person gets a card with what the agent wants to do and answers with one tap: Allow, Deny, Allow for this session
(when the agent names its session), Allow for an hour, Always for exactly this: the ones the `[[approvals]]` rules
covering the prompt let be remembered (`spans_offered`). A prompt covered by a rule the person's own tap does not
meet (`deciding_rule`) goes to the approvers of the strictest such rule instead, as a gated call does (quorum,
second factor; never remembered, never answered from memory). A remembered decision (`bot.core.remembered.Memory`,
in the database) answers at once instead, and the answer names its maker as every process knows them ("allowed by
the rule Alice made at 14:02"). Every ask and every answer is audited, once (`permission_asked`;
`permission_decided`: by the person, the approvers, or which remembered decision: its use is this row, not one of
the store's). If the agent stops waiting (its hook's own timeout: the HTTP request is dropped), the card says so
and names the fallback the agent applies then.

The payloads relied on (recorded from each agent's documentation; checked against Claude Code 2.1.332 and Codex
0.171.0, driven by tests/hooks):

* Claude Code's hooks reference (https://code.claude.com/docs/en/hooks; an `"type": "http"` hook POSTs the
  event's JSON with the `headers` it is given, `$VAR` filled only for the names in `allowedEnvVars`). Both events
  send `session_id`, `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`, `tool_name`, `tool_input`
  (`PreToolUse` also `tool_use_id`; `PermissionRequest` also `permission_suggestions`). 2.1.332 sent, for a Bash
  command: `{"session_id": "6547c675-…", "cwd": "/tmp/…/work", "permission_mode": "default",
  "hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"command": "touch …",
  "description": "…"}, "permission_suggestions": [...], ...}`. The answers:
  `PermissionRequest`: `{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision":
  {"behavior": "allow"}}}` or `{"behavior": "deny", "message": "..."}` (the message reaches the model);
  `PreToolUse`: `{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow" | "deny",
  "permissionDecisionReason": "..."}}`. A hook that fails or times out decides nothing: Claude Code goes on as if
  it were not there (its own prompt in a terminal; in `claude -p` the tool is denied). `PermissionRequest` fires
  in `--print` mode since 2.1.268 (its changelog; issue anthropics/claude-code#88328).
* Codex's hooks (https://developers.openai.com/codex/hooks; openai/codex PR #17563 and its
  `codex-rs/hooks/schema/generated/permission-request.command.{input,output}.schema.json`): Codex has command
  hooks only, so `/agents new` prints one that pipes the event into `curl`. `PermissionRequest` input:
  `session_id`, `turn_id`, `transcript_path`, `cwd`, `hook_event_name`, `model`, `permission_mode`,
  `tool_name` ("Bash" for shell, exec and network approvals), `tool_input` (`command`, `description`); output:
  the same `hookSpecificOutput.decision` as Claude Code's (`behavior` allow/deny, `message`). `PreToolUse` output:
  `permissionDecision` as Claude Code's, of which Codex honours "deny"; so an allowed `PreToolUse` is answered
  with no decision (Codex goes on as it would). A hook that fails, times out or prints nothing decides nothing:
  Codex's own approval applies. 0.171.0 sent, for `exec_command` asking to leave its sandbox: `{"session_id":
  "01a250f7-…", "turn_id": "…", "cwd": "…", "hook_event_name": "PermissionRequest", "model": "gpt-5",
  "permission_mode": "default", "tool_name": "Bash", "tool_input": {"command": "touch …", "description":
  "<its justification>"}, "transcript_path": "…"}`, and handed a deny's `message` to its model.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.config import ApprovalRule, AuditContent
from bot.config.approvals import deciding_rule
from bot.core import AgentBook, Origin
from bot.core.permission import ANSWERED_BY, CHOICE_TITLES, Choice, Client, Permission
from bot.core.remembered import Ask, Decision, Memory, Span, canonical_input, spans_offered
from bot.errors import StoreUnavailable
from bot.servers.elicitation import form_of
from bot.servers.hub import Hub
from bot.store.audit import AuditEvent, AuditLog
from bot.web.bounded_json import loads
from bot.web.gateway_guard import Caller
from mapping import MappingError, elicitation_to_request

__all__ = [
    "HOOKS_PATH",
    "MAX_HOOK_BODY",
    "Hooks",
    "NameBook",
    "PermissionDesk",
    "Verdict",
    "hook_answer",
    "permission_of",
]

logger = logging.getLogger(__name__)

HOOKS_PATH: Final = "/hooks"
"""`<public_url>/hooks/claude-code` and `<public_url>/hooks/codex`."""
MAX_HOOK_BODY: Final = 1 << 20
"""Bytes of one hook request (a tool's input: a command, an edit); more is refused with 413."""
EVENTS: Final = frozenset({"PermissionRequest", "PreToolUse"})
FALLBACK: Final = {
    Client.CLAUDE_CODE: "Claude Code stopped waiting (its hook's timeout): a hook that gets no answer decides "
    "nothing, so Claude Code asks in its terminal, and a headless run (claude -p) denies the tool.",
    Client.CODEX: "Codex stopped waiting (its hook's timeout): a hook that gets no answer decides nothing, so "
    "Codex's own approval applies.",
    Client.PROMPT_TOOL: "Claude Code stopped waiting for its permission-prompt tool: the tool is not run.",
}
_DECISION: Final = "decision"
_SPAN_SAID: Final = {
    Choice.SESSION: " for this session",
    Choice.HOUR: " for an hour",
    Choice.ALWAYS: " always, for exactly this",
}
_UNANSWERED: Final = {
    "timeout": "nobody answered on the phone in time",
    "cancelled": "the person cancelled the card",
    "shutdown": "the bot is stopping",
}
AUDIT_INPUT_CHARS: Final = 4000
"""Characters of a tool's input an audit row keeps whole; past them, its start, length and SHA-256."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer to an agent's permission prompt."""

    allow: bool
    message: str
    """For the agent (and its model): who decided, and how."""


def permission_of(client: Client, payload: Mapping[str, Any]) -> tuple[str, Permission] | None:
    """(hook event, permission) from a hook's JSON, or None when it is not a tool's permission prompt."""
    event = payload.get("hook_event_name")
    tool = payload.get("tool_name")
    tool_input = payload.get("tool_input", {})
    if event not in EVENTS or not isinstance(tool, str) or not tool or not isinstance(tool_input, dict):
        return None
    session, cwd = payload.get("session_id", ""), payload.get("cwd", "")
    return str(event), Permission(
        client=client,
        tool=tool,
        input=tool_input,
        cwd=cwd if isinstance(cwd, str) else "",
        session=session if isinstance(session, str) else "",
        fallback=FALLBACK[client],
    )


def hook_answer(client: Client, event: str, verdict: Verdict) -> dict[str, Any]:
    """The hook's JSON answer, in the agent's own format (the module's docstring shows both)."""
    if event == "PermissionRequest":
        decision: dict[str, Any] = {"behavior": "allow" if verdict.allow else "deny"}
        if not verdict.allow:
            decision["message"] = verdict.message
        return {"hookSpecificOutput": {"hookEventName": event, "decision": decision}}
    if client is Client.CODEX and verdict.allow:
        return {}  # Codex honours a PreToolUse "deny" only: no decision lets it go on as it would
    return {
        "hookSpecificOutput": {
            "hookEventName": event,
            "permissionDecision": "allow" if verdict.allow else "deny",
            "permissionDecisionReason": verdict.message,
        }
    }


def _summary(permission: Permission) -> str:
    """The prompt's text for the audit's `question_shown` (the card draws it richly)."""
    command = permission.input.get("command")
    what = command if isinstance(command, str) else permission.tool
    return f"{permission.tool}: {what}" if what != permission.tool else what


class NameBook(Protocol):
    """Where people's display names are kept for every process (the store's `people`), so that "allowed by the
    rule Alice made" names its maker in a process that never saw her tap, and after a restart."""

    async def remember(self, user_id: int, name: str) -> None: ...

    async def names(self, user_ids: Collection[int]) -> dict[int, str]: ...


class PermissionDesk:
    """Decides an agent's permission prompt: a remembered decision, else the person's tap on a card, or (an
    `[[approvals]]` rule covers the prompt) its approvers' verdict."""

    def __init__(
        self,
        hub: Hub,
        memory: Memory,
        audit: AuditLog | None,
        content: AuditContent = AuditContent.FULL,
        *,
        names: NameBook | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.hub = hub
        self.memory = memory
        self.audit = audit
        self.content = content
        """How much of a tool's input the audit keeps (`[audit] content`)."""
        self.names = names
        """Where the makers of remembered decisions are named (None: only as the hub knows them)."""
        self._clock = clock

    async def decide(self, caller: Caller, permission: Permission) -> Verdict:
        """The verdict on `permission`, asked by `caller`'s token. Cancelled (the agent stopped waiting), the
        card ends so and the audit says nobody decided. Never raises for outcomes.

        The `[[approvals]]` rules covering the prompt (`hooks`) say who answers: the person's own card when their
        tap meets every one of them, else the approvers of the strictest of the others (`deciding_rule`), as a
        gated call's, never from memory; and how long the person's answer may be remembered (`spans_offered`;
        the store's memory judges a kept decision's span by them again at every recall)."""
        ask = Ask.of(caller.user_id, caller.token_id, permission.session, permission.tool, permission.input)
        rules = self.hub.config.hook_rules(permission.tool, permission.input)
        rule = deciding_rule(rules, caller.user_id)
        remembered = None if rule is not None else await self._recall(ask)
        if remembered is not None:
            return await self._remembered(caller, permission, remembered)
        await self._record(AuditEvent.PERMISSION_ASKED, caller, permission, self._asked(permission))
        try:
            if rule is None:
                verdict, detail = await self._ask(caller, permission, ask, spans_offered(rules))
            else:
                verdict, detail = await self._approvers(caller, permission, rule)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                detail = {"allow": None, "by": "nobody", "why": "the agent stopped waiting"}
                await self._record(AuditEvent.PERMISSION_DECIDED, caller, permission, detail)
            raise
        await self._record(AuditEvent.PERMISSION_DECIDED, caller, permission, detail)
        return verdict

    async def _recall(self, ask: Ask) -> Decision | None:
        """The remembered decision that answers `ask` (a database that cannot be read: none, the prompt is
        asked)."""
        try:
            return await self.memory.recall(ask, self._clock())
        except StoreUnavailable:
            logger.warning("hooks: remembered decisions not read: the database is unavailable; asking")
            return None

    async def _remembered(self, caller: Caller, permission: Permission, decision: Decision) -> Verdict:
        """The answer a remembered decision gives, audited once, as this prompt's `permission_decided` (which
        decision, who made it and when; the input as `[audit] content` keeps it)."""
        name = await self._name_of(decision.maker)
        made = decision.made_at.astimezone(dt.UTC).strftime("%H:%M")
        said = "allowed" if decision.allow else "denied"
        line = f"{said} by the rule {name} made at {made} UTC ({decision.span.value})"
        detail = {
            **self._asked(permission),
            "allow": decision.allow,
            "by": "remembered",
            "decision_id": decision.id,
            "span": decision.span.value,
            "made_by": decision.maker,
            "made_at": decision.made_at.isoformat(),
            "until": None if decision.until is None else decision.until.isoformat(),
            "line": line,
        }
        await self._record(AuditEvent.PERMISSION_DECIDED, caller, permission, detail)
        return Verdict(decision.allow, f"toolnexus-bot: {line}")

    async def _name_of(self, user_id: int) -> str:
        """`user_id`'s name as kept for every process, else as this process knows it."""
        if self.names is not None:
            try:
                kept = (await self.names.names([user_id])).get(user_id)
            except StoreUnavailable:
                logger.warning("hooks: a decision's maker not named: the database is unavailable")
                kept = None
            if kept:
                return kept
        return self.hub.names(user_id)

    async def _approvers(
        self, caller: Caller, permission: Permission, rule: ApprovalRule
    ) -> tuple[Verdict, dict[str, Any]]:
        """The rule's approvers decide, as on a gated call (their cards, votes and audit rows are the approval
        service's); never remembered."""
        origin = Origin(caller.user_id, caller.user_id, agent=caller.agent)
        verdict = await self.hub.approve_for_agent(rule, permission, origin)
        detail: dict[str, Any] = {
            "allow": verdict.approved,
            "by": "approvers",
            "rule": rule.index,
            "approval": verdict.approval_id,
            "why": verdict.text,
        }
        said = verdict.text if verdict.approved else f"denied: {verdict.text}"
        return Verdict(verdict.approved, f"toolnexus-bot: {said} (approvals[{rule.index}])"), detail

    async def _ask(
        self, caller: Caller, permission: Permission, ask: Ask, offered: tuple[Span, ...]
    ) -> tuple[Verdict, dict[str, Any]]:
        choices = permission.choices(offered)
        schema = {
            "type": "object",
            "properties": {
                _DECISION: {
                    "type": "string",
                    "title": "Decision",
                    "oneOf": [{"const": c.value, "title": CHOICE_TITLES[c]} for c in choices],
                }
            },
            "required": [_DECISION],
        }
        wire = {"mode": "form", "message": _summary(permission), "requestedSchema": schema}
        try:
            request = elicitation_to_request(wire)
            form = form_of(schema)
        except MappingError as exc:  # the schema is the bot's own: a bug, said to the agent as a refusal
            logger.exception("a permission prompt's card could not be built")
            return Verdict(False, f"toolnexus-bot: the card could not be built: {exc}"), {"allow": False}
        origin = Origin(caller.user_id, caller.user_id, agent=caller.agent)
        answer = await self.hub.ask_for_agent(request, form, origin, permission)
        if isinstance(answer, str):  # past [limits]
            line = f"toolnexus-bot: not asked: {answer}"
            return Verdict(False, line), {"allow": False, "by": "nobody", "why": answer}
        if not answer.ok:  # no tap: it expired, or was ended (/cancel, the bot stopping, undeliverable)
            why = _UNANSWERED.get(answer.reason or "", f"the card ended ({answer.reason})")
            return Verdict(False, f"toolnexus-bot: denied: {why}"), {
                "allow": False,
                "by": "nobody",
                "why": why,
            }
        content = answer.data or {}
        choice = Choice(str(content[_DECISION]))
        name = str(content.get(ANSWERED_BY) or self.hub.names(caller.user_id))
        detail: dict[str, Any] = {
            "allow": choice.allows,
            "by": "person",
            "name": name,
            "choice": choice.value,
        }
        kept = None if choice.span is Span.ONCE else await self._keep(ask, choice, caller.user_id, name)
        if kept is not None:
            detail.update({"decision_id": kept.id} if isinstance(kept, Decision) else {"not_kept": kept})
        if choice.allows:
            span = f" (once: {kept})" if isinstance(kept, str) else _SPAN_SAID.get(choice, "")
            return Verdict(True, f"toolnexus-bot: allowed by {name} on the phone{span}"), detail
        return Verdict(False, f"toolnexus-bot: {name} denied this on the phone"), detail

    async def _keep(self, ask: Ask, choice: Choice, maker: int, name: str) -> Decision | str:
        """Remember the person's answer for its span, and their name for every process; what kept it from being
        remembered instead (the answer itself still holds, once)."""
        try:
            kept = await self.memory.keep(ask, choice.allows, choice.span, self._clock())
        except ValueError as exc:  # the rules no longer offer it (another process's config), or no session
            logger.warning("hooks: an answer was not remembered: %s", exc)
            return "the approval rules do not let it be remembered"
        except StoreUnavailable:
            logger.warning("hooks: an answer was not remembered: the database is unavailable")
            return "the database is unavailable, so it is not remembered"
        if self.names is not None:
            try:
                await self.names.remember(maker, name)
            except StoreUnavailable:
                logger.warning("hooks: the name of a decision's maker not kept: the database is unavailable")
        return kept

    def _asked(self, permission: Permission) -> dict[str, Any]:
        """The ask as the audit keeps it: the tool's input as `[audit] content` says (like a call's arguments;
        a big input as its first `AUDIT_INPUT_CHARS`, its length and its SHA-256)."""
        detail: dict[str, Any] = {
            "client": permission.client.value,
            "cwd": permission.cwd,
            "session": permission.session,
        }
        if self.content is AuditContent.KEYS:
            detail["input_keys"] = sorted(permission.input)
        elif self.content is AuditContent.FULL:
            text = canonical_input(permission.input)
            if len(text) <= AUDIT_INPUT_CHARS:
                detail["input"] = dict(permission.input)
            else:
                detail["input_text"] = text[:AUDIT_INPUT_CHARS]
                detail["input_chars"] = len(text)
                detail["input_sha256"] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        return detail

    async def _record(
        self, event: AuditEvent, caller: Caller, permission: Permission, detail: Mapping[str, Any]
    ) -> None:
        if self.audit is None:
            return
        await self.audit.record(
            event,
            user_id=caller.user_id,
            chat_id=caller.user_id,
            server=caller.agent,
            tool=permission.tool,
            detail={"agent_token": caller.token_id, **detail},
        )


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Hooks:
    """`POST /hooks/{client}`: serve `routes()` on the web endpoint."""

    def __init__(self, desk: PermissionDesk, book: AgentBook, *, allows: Callable[[int], bool]) -> None:
        self.desk = desk
        self.book = book
        self.allows = allows
        """The access rules `/call` obeys: whether this person may use the bot."""

    def routes(self) -> list[BaseRoute]:
        return [Route(HOOKS_PATH + "/{client}", self.handle, methods=["POST"])]

    async def handle(self, request: Request) -> Response:
        try:
            client = Client(request.path_params["client"])
        except ValueError:
            client = None
        if client is None or client is Client.PROMPT_TOOL:
            return JSONResponse({"error": "no such hook: use /hooks/claude-code or /hooks/codex"}, 404)
        caller = await self._caller(request)
        if isinstance(caller, Response):
            return caller
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_HOOK_BODY):
            return JSONResponse({"error": "the hook's body is too large"}, 413)
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_HOOK_BODY:
                return JSONResponse({"error": "the hook's body is too large"}, 413)
        try:
            payload = loads(bytes(body))
        except ValueError:
            return JSONResponse({"error": "the hook's body is not JSON"}, 400)
        asked = permission_of(client, payload) if isinstance(payload, dict) else None
        if asked is None:
            return JSONResponse({})  # not a tool's permission prompt: no decision, the agent goes on
        event, permission = asked
        try:
            await self.book.used(caller.token_id)
        except StoreUnavailable:
            logger.warning(
                "hooks: a permission prompt by an agent was not counted: the database is unavailable"
            )
        verdicts: list[Verdict] = []
        async with anyio.create_task_group() as tg:

            async def gone() -> None:
                while (await request.receive())["type"] != "http.disconnect":
                    pass
                logger.info("hooks: agent %s stopped waiting for its person's answer", caller.agent)
                tg.cancel_scope.cancel()

            async def decide() -> None:
                verdicts.append(await self.desk.decide(caller, permission))
                tg.cancel_scope.cancel()

            tg.start_soon(gone)
            tg.start_soon(decide)
        if not verdicts:  # the agent went away: nobody reads an answer
            return Response(status_code=499)
        verdict = verdicts[0]
        if verdict.allow and not await self._still_live(request):
            verdict = Verdict(False, "toolnexus-bot: this agent token was revoked while its person decided")
        return JSONResponse(hook_answer(client, event, verdict))

    async def _still_live(self, request: Request) -> bool:
        """Whether the request's token still works once the person decided (a card may wait for minutes; an
        allow must not reach an agent whose token was revoked or expired meanwhile)."""
        token = _bearer(request)
        try:
            return token is not None and await self.book.verify(token) is not None
        except StoreUnavailable:
            logger.warning("hooks: agent token not checked again: the database is unavailable")
            return False

    async def _caller(self, request: Request) -> Caller | Response:
        """Who asks, from its agent token: 401 without a live one, 403 for a person not allowed."""
        token = _bearer(request)
        try:
            agent = None if token is None else await self.book.verify(token)
        except StoreUnavailable:
            logger.warning("hooks: agent token not checked: the database is unavailable")
            return JSONResponse({"error": "the bot's database is unavailable"}, 503)
        if agent is None:
            return JSONResponse(
                {
                    "error": "a live agent token is needed (Authorization: Bearer tnx_..., made with /agents new)"
                },
                401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        if not self.allows(agent.user_id):
            return JSONResponse({"error": f"user {agent.user_id} may not use this bot"}, 403)
        return Caller(agent.id, agent.user_id, agent.name)

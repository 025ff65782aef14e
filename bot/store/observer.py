"""The audit log as the hub's and the prompt registry's observer: one row per event. Does I/O.

Each event is committed before the registry or the hub goes on (to show a card, return an answer to the
server, or show a result). A failed write is logged and the flow goes on: a database outage must not turn
into lost answers. Answers and arguments are kept per `[audit] content`; a question's message as its card
shows it (`shown_text`: at most `MESSAGE_CLIP` characters, a longer one with its length and SHA-256). Rows of an agent's call (through the
gateway) name the agent in `detail.agent`; `user_id` is the person it acts as.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from typing import Any, Final

from bot.config import AuditContent
from bot.core import MESSAGE_CLIP, Origin, Outcome, Prompt, ToolOutcome, clip
from bot.store.audit import AuditEvent, AuditLog, canonical_json
from mapping import Answer, answer_to_elicit_result

__all__ = ["AuditObserver", "agent_of", "shown_text"]


_EVENT_OF_OUTCOME: Final = {
    Outcome.ANSWERED: AuditEvent.ANSWERED,
    Outcome.DECLINED: AuditEvent.ANSWERED,
    Outcome.CANCELLED: AuditEvent.ANSWERED,
    Outcome.EXPIRED: AuditEvent.EXPIRED,
    Outcome.EXPIRED_WHILE_DOWN: AuditEvent.EXPIRED,
    Outcome.LOST_IN_RESTART: AuditEvent.WITHDRAWN,
    Outcome.SIGN_IN_AGAIN: AuditEvent.WITHDRAWN,
    Outcome.SHUTDOWN: AuditEvent.CANCELLED,
    Outcome.UNDELIVERABLE: AuditEvent.CANCELLED,
    Outcome.SERVER_CANCELLED: AuditEvent.WITHDRAWN,
    Outcome.SERVER_GONE: AuditEvent.WITHDRAWN,
}
RESULT_CHARS: Final = 1000
"""How much of a call's result text a `full` log keeps."""


def agent_of(origin: Origin) -> dict[str, Any]:
    """`{"agent": name}` for a row of an agent's call through the gateway (the person is `user_id`), else
    nothing: rows of chat calls stay as they were."""
    return {} if origin.agent is None else {"agent": origin.agent}


def shown_text(key: str, text: str, limit: int) -> dict[str, Any]:
    """`{key: text}` as a person was shown it: at most `limit` characters (`clip`). A longer text is kept so
    clipped, beside its whole length (`<key>_chars`) and SHA-256 (`<key>_sha256`, of its UTF-8): what was
    shown is on record, and the whole can still be matched, without a row the size of whatever was sent."""
    shown = clip(text, limit)
    if shown == text:
        return {key: text}
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {key: shown, f"{key}_chars": len(text), f"{key}_sha256": digest}


def _kept(values: dict[str, Any] | None, content: AuditContent) -> dict[str, Any]:
    if content is AuditContent.FULL:
        return {"content": values}
    if content is AuditContent.KEYS:
        return {"keys": None if values is None else sorted(values)}
    return {}


class AuditObserver:
    """Writes the audit rows for one hub and its prompt registry."""

    def __init__(self, log: AuditLog, content: AuditContent) -> None:
        self.log = log
        self.content = content
        self._tools: defaultdict[tuple[Origin, str], list[str]] = defaultdict(list)
        """Running calls' tools by (person, server): a question names the tool when only one is running."""

    async def _append(self, event: AuditEvent, **values: Any) -> None:
        await self.log.record(event, **values)

    async def call_started(
        self, origin: Origin, server: str, tool: str, arguments: dict[str, Any] | None
    ) -> None:
        self._tools[(origin, server)].append(tool)
        await self._append(
            AuditEvent.CALL_STARTED,
            user_id=origin.user_id,
            chat_id=origin.chat_id,
            server=server,
            tool=tool,
            detail={"arguments": _kept(arguments, self.content), **agent_of(origin)},
        )

    async def call_ended(self, origin: Origin, server: str, tool: str, outcome: ToolOutcome) -> None:
        running = self._tools[(origin, server)]
        if tool in running:  # a call resumed after a restart started in the process before
            running.remove(tool)
        if not running:
            del self._tools[(origin, server)]
        detail: dict[str, Any] = {"status": outcome.status.value, **agent_of(origin)}
        if self.content is AuditContent.FULL:
            detail["text"] = outcome.text[:RESULT_CHARS]
        await self._append(
            AuditEvent.CALL_ENDED,
            user_id=origin.user_id,
            chat_id=origin.chat_id,
            server=server,
            tool=tool,
            detail=detail,
        )

    def _tool(self, prompt: Prompt) -> str | None:
        running = self._tools.get((prompt.origin, prompt.server), [])
        return running[0] if len(set(running)) == 1 else None

    async def prompt_shown(self, prompt: Prompt) -> None:
        request = prompt.request
        schema = (request.data or {}).get("schema")
        detail: dict[str, Any] = {
            "kind": request.kind,
            **shown_text("message", request.prompt, MESSAGE_CLIP),
            "schema_sha256": None if schema is None else _schema_hash(schema),
            **agent_of(prompt.origin),
        }
        if request.url is not None:
            detail["url"] = request.url
        await self._append(
            AuditEvent.QUESTION_SHOWN,
            user_id=prompt.origin.user_id,
            chat_id=prompt.origin.chat_id,
            server=prompt.server,
            tool=self._tool(prompt),
            request_id=request.id,
            detail=detail,
        )

    async def prompt_ended(self, prompt: Prompt, outcome: Outcome, answer: Answer | None) -> None:
        event = _EVENT_OF_OUTCOME.get(outcome, AuditEvent.CANCELLED)
        detail: dict[str, Any] = {"outcome": outcome.value, **agent_of(prompt.origin)}
        if answer is not None:
            result = answer_to_elicit_result(answer)
            detail["action"] = result["action"]
            if result["action"] == "accept" and prompt.request.url is None:
                detail.update(_kept(dict(result.get("content") or {}), self.content))
        await self._append(
            event,
            user_id=prompt.origin.user_id,
            chat_id=prompt.origin.chat_id,
            server=prompt.server,
            tool=self._tool(prompt),
            request_id=prompt.request.id,
            detail=detail,
        )


def _schema_hash(schema: Any) -> str:
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()

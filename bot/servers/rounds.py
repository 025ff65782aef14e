"""2026-07-28 `input_required` rounds driven by the bot itself, each question kept so that it outlives the process.

Async, does I/O (MCP requests on a borrowed session; the `RoundBook` writes). The SDK's own loop (`Client.call_tool`)
would cap a call at ten rounds, retry state-only legs on a short back-off, and keep every round in memory only;
here each round's questions are kept (`Keeper`: saved before the card is sent, their card, form progress and
answer recorded as they happen) and the retry carries `inputResponses` and `requestState`, so after a restart a
kept round is resumed on a fresh connection (`Resumed`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import mcp_types as types
from mcp import MCPError
from mcp_types.methods import parse_server_result
from pydantic import ValidationError

from bot.core import Era, Keeper, KeptQuestion, Origin, RoundBook
from bot.servers.connections import Connection
from bot.servers.elicitation import Elicitations
from bot.servers.keeper import RoundKeeper

__all__ = ["Resumed", "Rounds", "elicit_result", "untagged_result"]

logger = logging.getLogger(__name__)

STATE_ONLY_WAIT_S: Final = 0.25
"""Between legs that carry only `requestState` (the server is working): a steady pace, no cap on legs."""

Send = Callable[[types.InputResponses | None, str | None], Awaitable[types.Result]]
"""One `tools/call` leg with these responses and this state."""


@dataclass(slots=True)
class Resumed:
    """A kept round taken up after a restart: the answers to send, its state, and its rows to close after."""

    responses: types.InputResponses
    request_state: str | None
    question_ids: list[str] = field(default_factory=list[str])


def elicit_result(answer: dict[str, Any], url_mode: bool) -> types.ElicitResult:
    """The wire `ElicitResult` for a kept answer (URL mode: consent only, no content)."""
    if url_mode and answer.get("action") == "accept":
        return types.ElicitResult(action="accept")
    return types.ElicitResult.model_validate(answer)


def untagged_result(error: ValidationError, version: str) -> types.CallToolResult | None:
    """The complete `tools/call` result a server sent without `resultType`, which the SDK refused; else None.

    The spec: a result with no `resultType` is complete. mcp 2.3.0 checks a 2026-07-28 result against a wire
    schema that requires the tag and raises before anything is returned, so the call would fail with "2
    validation errors for union[CallToolResult,InputRequiredResult]". Its error carries the raw result (the
    input of each missing-`resultType` error), which is checked again here, tagged "complete", by the SDK's own
    public wire parser: anything else wrong with it still fails. None when the error is about anything else.
    """
    for detail in error.errors():
        raw = detail.get("input")
        if (
            detail["type"] == "missing"
            and detail["loc"][-1:] == ("resultType",)
            and len(detail["loc"]) <= 2  # the result's own field (under the union's arm), not a nested one
            and isinstance(raw, dict)
            and "resultType" not in raw
        ):
            result = parse_server_result("tools/call", version, {**raw, "resultType": "complete"})
            return result if isinstance(result, types.CallToolResult) else None
    return None


class Rounds:
    """Drives the rounds of the process's 2026-07-28 calls; one instance per hub."""

    def __init__(self, elicitations: Elicitations, book: RoundBook | None = None) -> None:
        self.elicitations = elicitations
        self.book = book
        """Where questions are kept (None: no database; rounds are driven in memory only)."""

    async def drive(
        self,
        conn: Connection,
        origin: Origin,
        tool: str,
        arguments: dict[str, Any] | None,
        send: Send,
        resumed: Resumed | None = None,
    ) -> types.CallToolResult:
        """Send the call (or a resumed round), answer every `input_required` round through the person, and
        return the final result.

        Raises:
            MCPError: the server failed a leg, or a question could not be asked (its `ErrorData`).
        """
        if resumed is None:
            result = await send(None, None)
        else:
            try:
                result = await send(resumed.responses, resumed.request_state)
            finally:
                await self.forget(resumed.question_ids)
        while isinstance(result, types.InputRequiredResult):
            if not result.input_requests:
                await anyio.sleep(STATE_ONLY_WAIT_S)
                result = await send(None, result.request_state)
                continue
            keepers: list[RoundKeeper] = []
            sent = False
            prompts = self.elicitations.prompts
            try:
                responses = await self._ask_all(conn, origin, tool, arguments, result, keepers)
                if not await prompts.fence.acts_for(origin.user_id):
                    raise MCPError(types.INTERNAL_ERROR, "the person is another instance's now")
                sent = True
                result = await send(responses, result.request_state)
            finally:
                # A round still being asked when the process leaves after a drain stays kept for the next one,
                # as it does for the instance that took its person over; once sent it is done with (never sent
                # twice).
                if (sent and prompts.fence.owns(origin.user_id)) or not prompts.leaves(origin.user_id):
                    await self.forget([k.question.id for k in keepers if k.question.id])
        if not isinstance(result, types.CallToolResult):
            raise MCPError(types.INTERNAL_ERROR, "the server answered the call with something else")
        return result

    async def forget(self, ids: list[str]) -> None:
        """Close kept questions whose round is over (shielded; a failure is logged)."""
        if self.book is None or not ids:
            return
        with anyio.CancelScope(shield=True):
            try:
                await self.book.close(*ids)
            except Exception:
                logger.exception("could not close the kept questions of a round")

    async def ask_one(
        self, conn: Connection, request: types.InputRequest, keeper: Keeper | None = None
    ) -> types.ElicitResult | types.ErrorData:
        """One input request put to the call's person (a card), or why this client does not answer it: a round's
        question, or a 2026-07-28 task's (`bot.servers.tasks`)."""
        if not isinstance(request, types.ElicitRequest):
            return types.ErrorData(
                code=types.INVALID_REQUEST, message=f"this client does not answer {request.method}"
            )
        return await self.elicitations.ask_input(conn, request.params, keeper)

    async def _ask_all(
        self,
        conn: Connection,
        origin: Origin,
        tool: str,
        arguments: dict[str, Any] | None,
        result: types.InputRequiredResult,
        keepers: list[RoundKeeper],
    ) -> types.InputResponses:
        """Ask the round's questions at once; the first refusal (`ErrorData`) ends the round."""
        requests = result.input_requests or {}
        wire = {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request in requests.items()
        }
        round_id = str(uuid.uuid4())
        responses: types.InputResponses = {}
        refused: types.ErrorData | None = None

        async def one(tg: anyio.abc.TaskGroup, key: str, request: types.InputRequest) -> None:
            nonlocal refused
            keeper = None
            if isinstance(request, types.ElicitRequest) and self.book is not None:
                keeper = RoundKeeper(
                    self.book,
                    KeptQuestion(
                        id="",
                        round_id=round_id,
                        input_key=key,
                        era=Era.MODERN,
                        server=conn.server.name,
                        tool=tool,
                        arguments=arguments,
                        origin=origin,
                        token="",
                        deadline=0.0,
                        input_requests=wire,
                        request_state=result.request_state,
                    ),
                )
                keepers.append(keeper)
            answer = await self.ask_one(conn, request, keeper)
            if isinstance(answer, types.ErrorData):
                refused = answer
                tg.cancel_scope.cancel()
            else:
                responses[key] = answer

        async with anyio.create_task_group() as tg:
            for key, request in requests.items():
                tg.start_soon(one, tg, key, request)
        if refused is not None:
            raise MCPError.from_error_data(refused)
        return responses

"""The Mini App's routes under `/app/`: the page, its form, checks of single values, the answer. Does I/O.

GET  /app/<token>          the page (static HTML; no prompt data: that comes only with valid launch data)
GET  /app/_/<file>         its script and style sheet
POST /app/<token>/form     the form to render
POST /app/<token>/check    why one value does not fit its field (the chat flow's words), or null
POST /app/<token>/answer   accept (with every value), decline or cancel

`<token>` is the prompt's opaque handle (`Prompt.token`, as in callback data), never the server's id. Every
POST carries the page's `initData`; it is checked first (401 when forged, stale or missing, so a stranger
learns nothing about tokens), then the person (403 unless it is the prompt's), then the prompt (410 once it
has ended). An accepted answer goes through `answer` (the surface's own path, which settles the card in the
chat as usual); a second answer from the same launch gets 409. Nothing changes on any 4xx.

What the Mini App shares with the bot's other processes (`bot.core.fleet.MiniAppShare`: in memory for a process
alone, in rows in a fleet) takes every answer the same way. A launch is marked used (once, fleet-wide) before its
answer goes. In a fleet the load balancer sends the page's requests to any instance, and only one holds the
prompt; another finds it among the kept questions by its token (the form, who may answer, the deadline: enough for
/form, /check and the checks of /answer) and sends the answer through the share's relay: the holder claims it,
answers the prompt, and says whether it was taken; the page hears that as if it had landed on the holder. When
no instance claims it within `relay_wait_s` (its holder is gone, a takeover under way) the answer is taken back
and the page gets 503: nothing was answered, and the person may submit again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from importlib.resources import files
from typing import Any, Final

import anyio
from anyio.abc import TaskStatus
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.config import MiniAppConfig
from bot.core import KeptQuestion, Prompt, PromptRegistry
from bot.core.relay import MiniAppAnswer, MiniAppShare
from bot.store.errors import StoreUnavailable
from bot.web.bounded_json import TooDeep, loads
from bot.web.miniapp.forms import page_form, read_answers, read_value, wants_page
from bot.web.miniapp.initdata import Launch, Refused, check_init_data
from mapping import (
    DECLINED,
    Answer,
    FieldError,
    MappingError,
    RequestKind,
    elicitation_to_request,
    parse_schema,
)

__all__ = ["APP_PATH", "MAX_BODY", "RELAY_WAIT_S", "MiniApp"]

logger = logging.getLogger(__name__)

APP_PATH: Final = "/app"
MAX_BODY: Final = 256 * 1024
"""Bytes of a page's request: a form's values, a few kilobytes."""
USED_KEPT_S: Final = 120
"""A used launch is remembered this long past its last valid moment (`max_age_s` after it was signed), so that
it stays refused while any clock could still take it for valid (more than `initdata.CLOCK_SKEW_S`)."""
RELAY_WAIT_S: Final = 10.0
"""How long a page's answer for a prompt held by another instance waits for that instance to take it."""
_ENDED: Final = "this form is no longer open: it was answered, cancelled or expired"
_STATIC: Final = {"page.js": "text/javascript", "page.css": "text/css"}
_HEADERS: Final = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the page's URL holds the prompt's token
}
CSP: Final = (
    "default-src 'none'; script-src 'self' https://telegram.org; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'"
)
"""Nothing from other hosts but Telegram's script; no inline script or style, so server text cannot run."""

AnswerPrompt = Callable[[Prompt, Answer], bool]
"""How an answer reaches the prompt (the Telegram surface's `answer_from_page`); False when it had ended."""


def _asset(name: str) -> bytes:
    return files("bot.web.miniapp").joinpath("static", name).read_bytes()


class MiniApp:
    """The Mini App of one bot: its URLs (`url_for`) and its routes (`routes`)."""

    def __init__(
        self,
        prompts: PromptRegistry,
        answer: AnswerPrompt,
        bot_token: str,
        config: MiniAppConfig,
        public_url: str,
        *,
        share: MiniAppShare,
        clock: Callable[[], float] = time.time,
        relay_wait_s: float = RELAY_WAIT_S,
    ) -> None:
        self._prompts = prompts
        self._answer = answer
        self._token = bot_token
        self._config = config
        self._base = public_url.rstrip("/") + APP_PATH
        self._clock = clock
        self._assets = {name: _asset(name) for name in _STATIC}
        self._page = _asset("page.html")
        self._share = share
        self._relay_wait_s = relay_wait_s

    def services(self) -> list[Callable[..., Any]]:
        """What runs beside the routes (`bot.web.server.Service`): taking the answers relayed to this process's
        prompts (in a fleet, sent by the others)."""
        return [self.run]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Take each answer relayed whose prompt this process holds."""
        await self._share.relay.serve(self._take, task_status=task_status)

    async def _take(self, key: str) -> None:
        """The answer `key`, when its prompt is held here: claimed (once, fleet-wide), given to the prompt,
        and whether it was taken settled for the process that took the page's request."""
        relay = self._share.relay
        try:
            sent = await relay.peek(key)
            prompt = None if sent is None else self._prompts.get(sent.token)
            if sent is None or prompt is None or prompt.origin.user_id != sent.user_id:
                return  # not this process's (or already claimed)
            sent = await relay.claim(key)
            if sent is None:
                return
            if sent.ok:
                answer = Answer(prompt.request.id, ok=True, data=sent.content)
            else:
                answer = Answer(prompt.request.id, ok=False, reason=sent.reason)
            await relay.settle(key, self._answer(prompt, answer))
        except StoreUnavailable as exc:
            logger.warning("mini app: could not take an answer sent by another instance: %s", exc)

    def url_for(self, prompt: Prompt) -> str | None:
        """The page of `prompt` when it is a long form in a private chat (`wants_page`), else None."""
        return f"{self._base}/{prompt.token}" if wants_page(prompt, self._config) else None

    def routes(self) -> list[BaseRoute]:
        return [
            Route(APP_PATH + "/_/{name}", self._static, methods=["GET"]),
            Route(APP_PATH + "/{token}", self._page_for, methods=["GET"]),
            Route(APP_PATH + "/{token}/form", self._form, methods=["POST"]),
            Route(APP_PATH + "/{token}/check", self._check, methods=["POST"]),
            Route(APP_PATH + "/{token}/answer", self._answer_route, methods=["POST"]),
        ]

    # -- GET ---------------------------------------------------------------------------------------------

    async def _page_for(self, request: Request) -> Response:
        headers = {**_HEADERS, "Content-Security-Policy": CSP}
        return Response(self._page, media_type="text/html; charset=utf-8", headers=headers)

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in self._assets:
            return _refuse(404, "no such file")
        return Response(self._assets[name], media_type=f"{_STATIC[name]}; charset=utf-8", headers=_HEADERS)

    # -- POST --------------------------------------------------------------------------------------------

    async def _form(self, request: Request) -> Response:
        found = await self._open(request)
        if isinstance(found, Response):
            return found
        prompt, _, _ = found
        return _json(page_form(prompt))

    async def _check(self, request: Request) -> Response:
        found = await self._open(request)
        if isinstance(found, Response):
            return found
        prompt, _, body = found
        assert prompt.form is not None
        name = body.get("name")
        fields = {f.name: f for f in prompt.form.fields}
        if not isinstance(name, str) or name not in fields:
            return _refuse(400, "there is no such field")
        value = read_value(fields[name], body.get("value"))
        return _json({"reason": value.reason if isinstance(value, FieldError) else None})

    async def _answer_route(self, request: Request) -> Response:
        found = await self._open(request)
        if isinstance(found, Response):
            return found
        prompt, launch, body = found
        action = body.get("action")
        if action == "accept":
            assert prompt.form is not None
            read = read_answers(prompt.form, body.get("values"))
            if not read.ok:
                return _json({"error": read.error, "errors": read.errors}, status=422)
            answer = Answer(prompt.request.id, ok=True, data=read.content)
        elif action in ("decline", "cancel"):
            reason = DECLINED if action == "decline" else "cancelled"
            answer = Answer(prompt.request.id, ok=False, reason=reason)
        else:
            return _refuse(400, "action must be accept, decline or cancel")
        return await self._give(prompt, launch, answer, action)

    async def _give(self, prompt: Prompt, launch: Launch, answer: Answer, action: str) -> Response:
        """The answer with the launch used once (fleet-wide in a fleet); straight to the prompt when it is held
        here, else through the share's relay to the process that holds it."""
        share = self._share
        try:
            if not await share.launches.use(
                launch.hash, launch.auth_date + self._config.max_age_s + USED_KEPT_S
            ):
                return _used()
            if self._prompts.get(prompt.token) is prompt:
                taken: bool | None = self._answer(prompt, answer)
            else:
                key = str(uuid.uuid4())
                data = answer.data if answer.ok else None
                await share.relay.send(
                    key, MiniAppAnswer(prompt.token, launch.user_id, answer.ok, data, answer.reason)
                )
                taken = await share.relay.outcome(key, self._relay_wait_s, take_back=True)
            if not taken:
                await share.launches.release(launch.hash)
        except StoreUnavailable as exc:
            logger.warning("mini app: an answer could not be passed on: %s", exc)
            return _refuse(503, "the bot cannot take this answer right now; try again in a moment")
        if taken is None:
            return _refuse(503, "the bot could not reach this form just now; nothing was sent: try again")
        if not taken:
            return _refuse(410, _ENDED)
        return _json({"ok": True, "action": action})

    async def _open(self, request: Request) -> tuple[Prompt, Launch, dict[str, Any]] | Response:
        """The request's body, launch data, and pending prompt, or the 4xx that refuses it."""
        body = await _body(request)
        if isinstance(body, Response):
            return body
        launch = check_init_data(
            body.get("initData"), self._token, now=self._clock(), max_age_s=self._config.max_age_s
        )
        if isinstance(launch, Refused):
            return _refuse(401, launch.reason)
        token = request.path_params["token"]
        prompt = self._prompts.get(token)
        if prompt is None:
            try:
                prompt = _kept_prompt(await self._share.kept(token), self._clock())
            except StoreUnavailable as exc:
                logger.warning("mini app: could not look for a form held by another instance: %s", exc)
                return _refuse(503, "the bot cannot open this form right now; try again in a moment")
        if prompt is not None and launch.user_id != prompt.origin.user_id:
            logger.info("mini app: user %s tried another person's form", launch.user_id)
            return _refuse(403, "this form is for the person who started the call")
        if prompt is None or not wants_page(prompt, self._config):
            return _refuse(410, _ENDED)
        return prompt, launch, body


def _kept_prompt(question: KeptQuestion | None, now: float) -> Prompt | None:
    """A question kept by the instance that holds it, as a prompt to render and check a page against (never to
    answer: only its holder does); None when there is none, it has been answered or expired, or it is no form."""
    if question is None or question.answer is not None or question.deadline <= now:
        return None
    wire = (question.input_requests or {}).get(question.input_key)
    params = wire.get("params") if isinstance(wire, dict) else None
    if not isinstance(params, dict):
        return None
    try:
        request = dataclasses.replace(elicitation_to_request(params), id=question.id)
        if request.kind is not RequestKind.INPUT:
            return None
        form = parse_schema((request.data or {}).get("schema"))
    except MappingError:
        return None
    return Prompt(
        request=request, origin=question.origin, server=question.server, form=form, token=question.token
    )


def _used() -> Response:
    return _refuse(409, "this form was already answered from this window; open it again from the chat")


async def _body(request: Request) -> dict[str, Any] | Response:
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
        return _refuse(413 if length.isdigit() else 400, "the request is too large")
    data = bytearray()
    try:
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_BODY:
                return _refuse(413, "the request is too large")
    except ClientDisconnect:
        return Response(status_code=400)
    try:
        body = loads(data)
    except TooDeep as exc:
        logger.warning("mini app: refused a body of %d bytes: %s", len(data), exc)
        return _refuse(400, "the request nests too deeply")
    except ValueError:
        return _refuse(400, "the request is not JSON")
    if not isinstance(body, dict):
        return _refuse(400, "the request is not a JSON object")
    return body


def _json(body: Any, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status, headers=_HEADERS)


def _refuse(status: int, reason: str) -> Response:
    return _json({"error": reason}, status)

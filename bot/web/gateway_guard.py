"""The gateway's door, per agent token: whose requests pass, how many sessions a token holds, and ending what a
token runs here once its access goes. Does I/O (ASGI; the store, through `AgentBook`).

Every request to `/mcp` that the bearer middleware let in (a live token) passes `Guard` next:

* its person is checked against the access rules a `/call` in the chat obeys (`allows`), on every request, so a
  person removed from `allowed_users` since the token was made is refused: 403 with one line for the agent,
  logged once per token (not once per request); what the token runs here ends with it;
* a request that opens a 2025-11-25 session (no `Mcp-Session-Id`; a handshake-era protocol header or none: what
  the SDK's session manager takes for one) counts as a call in `[limits]` (its person's and the agent's own),
  and is refused with 429 while the token holds `[gateway] sessions_per_token` open sessions, so one token
  cannot fill the SDK's cap on sessions (`max_sessions`) that every person's legacy agent shares;
* the sessions a token opened are followed: one is open from its opening answer (its `Mcp-Session-Id`) until its
  client's DELETE, a 404 for it (the SDK ended it), or `SESSION_IDLE_S` without a request in flight (the SDK's
  idle timeout, which the gateway sets to the same; the guard then closes it too).

While a token has calls running or sessions open here, `run` looks every `WATCH_S` whether it still works
(`AgentBook.ended`, read from the database: a revocation in the chat, by another instance, or by the operator's
`toolnexus-bot agents revoke` in another process; an expiry) and whether its person is still allowed. When not,
its calls end first (`Ending`: their cards say the agent's access was revoked; the agent gets an error result),
then its sessions are closed as their client would close them (a DELETE with the session's id and the
credential that opened it, through the same transport). The 2026-07-28 era has no sessions: only calls end.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

import anyio
from anyio.abc import TaskGroup
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import DEFAULT_SESSION_IDLE_TIMEOUT
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bot.core.agents import GATEWAY_PATH, AgentBook, TokenEnd
from bot.errors import StoreUnavailable
from bot.servers.limits import Limits

__all__ = ["SESSION_IDLE_S", "WATCH_S", "Caller", "Ending", "Guard"]

logger = logging.getLogger(__name__)

WATCH_S: Final = 1.0
"""How often the tokens with calls running or sessions open here are read again: a revocation anywhere (the
command line's too) ends their calls within about this long."""
SESSION_IDLE_S: Final = float(DEFAULT_SESSION_IDLE_TIMEOUT)
"""A 2025-11-25 session with no request in flight for this long is closed (the SDK's idle timeout, stated here
so the guard's count of a token's sessions and the SDK's end agree)."""
END_WAIT_S: Final = 10.0
"""When a token's access ends: how long its calls get to end (their cards settled, the agent's error result on
its way) before its sessions are closed under them."""
_ENDED_LINE: Final = {
    TokenEnd.REVOKED: "this agent token was revoked",
    TokenEnd.EXPIRED: "this agent token expired",
    TokenEnd.DELETED: "this agent token was revoked",
}
_NOT_ALLOWED: Final = "the person this agent token acts for may no longer use this bot"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a request to `/mcp` comes from, as `AgentVerifier` put it in the access token."""

    token_id: int
    user_id: int
    agent: str
    """The token's name."""

    @classmethod
    def of(cls, access: AccessToken) -> Caller:
        assert access.subject is not None and access.claims is not None  # `AgentVerifier` sets both
        return cls(int(access.claims["agent_id"]), int(access.subject), str(access.claims["agent"]))


@dataclass(eq=False, slots=True)
class Ending:
    """How a running call hears that its token's access ended: `event` is set, `line` says why (for the agent)."""

    event: anyio.Event = field(default_factory=anyio.Event)
    line: str = ""

    def end(self, line: str) -> None:
        if not self.event.is_set():
            self.line = line
            self.event.set()


@dataclass(eq=False, slots=True)
class _Session:
    """A 2025-11-25 session a token opened here."""

    user: AuthenticatedUser
    """The credential that opened it (the SDK serves a session only to the same one)."""
    host: bytes
    idle_since: float
    busy: int = 0
    """Its requests in flight (an open GET stream is one)."""
    posts: int = 0
    """Of those, POSTs: a call's answer may still be on its way on one."""


@dataclass(eq=False, slots=True)
class _Token:
    """What one token has running here."""

    caller: Caller
    calls: set[Ending] = field(default_factory=set)
    sessions: dict[str, _Session] = field(default_factory=dict)
    opening: int = 0
    """Sessions admitted and not answered yet (they count toward the cap)."""
    ending: bool = False
    changed: anyio.Event = field(default_factory=anyio.Event)
    """Set when a call of it ends or a POST of its sessions is answered (replaced by whoever waits next)."""

    @property
    def active(self) -> bool:
        return bool(self.calls or self.sessions or self.opening)

    def poke(self) -> None:
        self.changed.set()


def _error(status: int, line: str) -> Response:
    """A JSON-RPC error without a request id (the SDK's client hands its message to the agent) at `status`."""
    body = JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=INVALID_REQUEST, message=line))
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True), status, media_type="application/json"
    )


class Guard:
    """ASGI in front of the gateway's transport (`app`), behind the bearer middleware; `run` it while it serves."""

    def __init__(
        self,
        app: ASGIApp,
        book: AgentBook,
        limits: Limits,
        *,
        allows: Callable[[int], bool],
        sessions_per_token: int,
        clock: Callable[[], float] = anyio.current_time,
        idle_s: float = SESSION_IDLE_S,
    ) -> None:
        self.app = app
        self.book = book
        self.limits = limits
        self.allows = allows
        """The access rules `/call` obeys: whether this person may use the bot."""
        self.sessions_per_token = sessions_per_token
        """0: no cap."""
        self.idle_s = idle_s
        self._clock = clock
        self._tokens: dict[int, _Token] = {}
        self._refused: set[int] = set()
        """Tokens whose person's refusal was logged (once each)."""
        self._capped: set[int] = set()
        """Tokens whose refusal at the session cap was logged (again once they fell below it)."""
        self._ends: dict[int, str] = {}
        """Tokens to end at the next look, and why."""
        self._wake = anyio.Event()
        self._unread = False

    # -- requests --------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = scope.get("user")
        assert isinstance(user, AuthenticatedUser)  # the bearer middleware let it in
        caller = Caller.of(user.access_token)
        if not self.allows(caller.user_id):
            await self._refuse(caller)(scope, receive, send)
            return
        headers = Headers(scope=scope)
        session_id = headers.get(MCP_SESSION_ID_HEADER)
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER)
        if (
            session_id is None
            and scope["method"] == "POST"
            and (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS)
        ):
            await self._open(caller, user, scope, receive, send)
            return
        entry = self._tokens.get(caller.token_id)
        session = None if entry is None or session_id is None else entry.sessions.get(session_id)
        if entry is None or session_id is None or session is None:
            await self.app(scope, receive, send)
            return
        await self._in_session(entry, session_id, session, scope, receive, send)

    def _refuse(self, caller: Caller) -> Response:
        """A person not allowed: 403, logged once per token; what the token runs here ends at the next look."""
        if caller.token_id not in self._refused:
            self._refused.add(caller.token_id)
            logger.warning(
                "gateway: agent %s of user %s refused (403): that person may not use the bot (not in "
                "[telegram] allowed_users); its calls and sessions here end",
                caller.agent,
                caller.user_id,
            )
        entry = self._tokens.get(caller.token_id)
        if entry is not None and not entry.ending:
            self._ends[caller.token_id] = _NOT_ALLOWED
            self._wake.set()
        return _error(
            403,
            f"toolnexus-bot: user {caller.user_id}, whom this agent token acts for, may not use this bot (not "
            "in its allowed_users); ask the bot's operator",
        )

    def _entry(self, caller: Caller) -> _Token:
        entry = self._tokens.get(caller.token_id)
        if entry is None:
            entry = self._tokens[caller.token_id] = _Token(caller)
        return entry

    def _forget_if_idle(self, entry: _Token) -> None:
        if not entry.active and self._tokens.get(entry.caller.token_id) is entry:
            del self._tokens[entry.caller.token_id]

    async def _open(
        self, caller: Caller, user: AuthenticatedUser, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request that opens a 2025-11-25 session: under the token's cap and `[limits]`, or refused (429)."""
        entry = self._entry(caller)
        held = len(entry.sessions) + entry.opening
        cap = self.sessions_per_token
        if cap and held >= cap:
            self._forget_if_idle(entry)
            if caller.token_id not in self._capped:
                self._capped.add(caller.token_id)
                logger.warning(
                    "gateway: agent %s of user %s holds %d sessions, its cap: no more until one ends",
                    caller.agent,
                    caller.user_id,
                    held,
                )
            line = (
                f"toolnexus-bot: agent token {caller.agent} already has {held} sessions open, the most "
                "[gateway] sessions_per_token allows: end one (a client ends its session when it closes) or "
                f"wait until one has been idle for {self.idle_s / 60:g} minutes"
            )
            await _error(429, line)(scope, receive, send)
            return
        refusal = self.limits.start_call(caller.user_id, caller.agent)
        if refusal is not None:
            self._forget_if_idle(entry)
            await _error(429, f"toolnexus-bot: {refusal.reason}")(scope, receive, send)
            return
        self.limits.end_call(caller.user_id, caller.agent)  # a session's start counts; it does not run on
        host = Headers(scope=scope).get("host", "").encode("latin-1")
        opened: list[_Session] = []

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                session_id = Headers(raw=message.get("headers", [])).get(MCP_SESSION_ID_HEADER)
                if session_id is not None and not opened:
                    session = _Session(user, host, self._clock(), busy=1, posts=1)
                    entry.sessions[session_id] = session
                    entry.opening -= 1
                    opened.append(session)
            await send(message)

        entry.opening += 1
        try:
            await self.app(scope, receive, watched)
        finally:
            if opened:
                session = opened[0]
                session.busy -= 1
                session.posts -= 1
                session.idle_since = self._clock()
            else:
                entry.opening -= 1
            entry.poke()
            self._forget_if_idle(entry)

    async def _in_session(
        self, entry: _Token, session_id: str, session: _Session, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """A request in a session the token opened here: followed, so its end (DELETE, 404) is known."""
        method = scope["method"]
        status: int | None = None

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        session.busy += 1
        session.posts += method == "POST"
        try:
            await self.app(scope, receive, watched)
        finally:
            session.busy -= 1
            session.posts -= method == "POST"
            session.idle_since = self._clock()
            if status == 404 or (method == "DELETE" and status is not None and status < 400):
                self._drop(entry, session_id)
            entry.poke()
            self._forget_if_idle(entry)

    def _drop(self, entry: _Token, session_id: str) -> None:
        entry.sessions.pop(session_id, None)
        self._capped.discard(entry.caller.token_id)

    # -- calls -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def call(self, caller: Caller) -> Iterator[Ending]:
        """A call of `caller`'s runs meanwhile: its `Ending` is set if the token's access ends."""
        entry = self._entry(caller)
        ending = Ending()
        if entry.ending:
            ending.end(self._ends.get(caller.token_id, _ENDED_LINE[TokenEnd.REVOKED]))
        entry.calls.add(ending)
        try:
            yield ending
        finally:
            entry.calls.discard(ending)
            entry.poke()
            self._forget_if_idle(entry)

    # -- the watch -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Look at the busy tokens every `WATCH_S` (or at once when a refusal asks) until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                with anyio.move_on_after(WATCH_S):
                    await self._wake.wait()
                self._wake = anyio.Event()
                ends = dict(self._ends)
                self._ends.clear()
                for token_id, line in (await self._look()).items():
                    ends.setdefault(token_id, line)
                for token_id, line in ends.items():
                    entry = self._tokens.get(token_id)
                    if entry is not None and not entry.ending:
                        entry.ending = True
                        tg.start_soon(self._end, entry, line)
                self._close_idle(tg)

    async def _look(self) -> dict[int, str]:
        """The busy tokens whose access ended, and why (one read of the database for all of them)."""
        busy = {
            token_id: entry for token_id, entry in self._tokens.items() if entry.active and not entry.ending
        }
        if not busy:
            return {}
        ends = {
            token_id: _NOT_ALLOWED
            for token_id, entry in busy.items()
            if not self.allows(entry.caller.user_id)
        }
        try:
            ended = await self.book.ended(list(busy))
        except StoreUnavailable:
            if not self._unread:
                logger.warning("gateway: agents' tokens not read again: the database is unavailable")
            self._unread = True
            return ends
        self._unread = False
        for token_id, why in ended.items():
            ends.setdefault(token_id, _ENDED_LINE[why])
        return ends

    async def _end(self, entry: _Token, why: str) -> None:
        """The token's access ended: its calls end (and are given `END_WAIT_S` to answer), then its sessions
        are closed."""
        caller = entry.caller
        logger.info(
            "gateway: agent %s of user %s: %s; its %d call(s) and %d session(s) here end",
            caller.agent,
            caller.user_id,
            why,
            len(entry.calls),
            len(entry.sessions),
        )
        line = f"toolnexus-bot: {why}; the call is ended"
        for ending in list(entry.calls):
            ending.end(line)
        with anyio.move_on_after(END_WAIT_S):
            while entry.calls or any(session.posts for session in entry.sessions.values()):
                entry.changed = anyio.Event()
                await entry.changed.wait()
        for session_id, session in list(entry.sessions.items()):
            await self._close(entry, session_id, session)
        self._forget_if_idle(entry)

    def _close_idle(self, tg: TaskGroup) -> None:
        """Close the sessions idle for `idle_s` (the SDK's own timeout ends them too: whichever comes first)."""
        now = self._clock()
        for entry in list(self._tokens.values()):
            for session_id, session in list(entry.sessions.items()):
                if not session.busy and now - session.idle_since >= self.idle_s:
                    self._drop(entry, session_id)
                    tg.start_soon(self._close, entry, session_id, session)
            self._forget_if_idle(entry)

    async def _close(self, entry: _Token, session_id: str, session: _Session) -> None:
        """End a session as its client would: DELETE with its id and the credential that opened it (a session
        the SDK ended already answers 404; either way it is gone)."""
        self._drop(entry, session_id)
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "DELETE",
            "scheme": "http",
            "path": GATEWAY_PATH,
            "raw_path": GATEWAY_PATH.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", session.host), (MCP_SESSION_ID_HEADER.encode(), session_id.encode())],
            "client": None,
            "server": None,
            "user": session.user,
        }
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            pass

        with anyio.CancelScope(shield=True):
            await self.app(scope, receive, send)

"""`/oauth/callback` on the web endpoint: where a browser comes back after signing in. Does I/O.

The page says only whether it worked and links back to the bot in Telegram; the code and state go to
`SignIns.deliver`, which matches the state (single use, bound to the person's pending sign-in, expiring
with the card) and checks `iss`. The page answers once the code has been exchanged for tokens, so "Signed in"
means signed in; a refused code says what failed.

With an https public URL, `/oauth/client-metadata.json` is the bot's Client ID Metadata Document: its URL is
the client id the bot gives authorization servers that accept such documents.

The browser's return goes through the sign-ins' share (`bot.core.fleet.SignInShare`: in memory for a process
alone, in rows in a fleet), the same way on one process as in a fleet. In a fleet the browser may come back to any
instance, and only the one whose SDK flow waits on the state can finish it (it holds the PKCE verifier). The
callback hands the browser's return over (`send`: once; in rows, sealed, so the code never travels in a
notification), and `SignInFleet` on the waiting process claims it, lets the flow exchange the code, and settles
how that went; the page waits for that (bounded) and says the same wherever it landed.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable

import anyio
from anyio.abc import TaskStatus
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.core.relay import SignInOutcome, SignInShare, state_key
from bot.servers.oauth import CALLBACK_PATH, CLIENT_METADATA_PATH, SignIns, client_metadata_document
from bot.servers.oauth.pending import EXCHANGE_WAIT_S, Delivery
from bot.store.errors import StoreUnavailable

__all__ = ["SignInFleet", "callback_routes"]

logger = logging.getLogger(__name__)

UNKNOWN = "This sign-in link is unknown, was already used, or has expired."

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>{title}</title></head>
<body style="font-family: sans-serif; max-width: 30em; margin: 3em auto; padding: 0 1em">
<h1>{title}</h1><p>{text}</p><p><a href="{link}">Go back to Telegram</a></p></body></html>
"""


class SignInFleet:
    """The browser's return to a sign-in, wherever it lands (in a fleet: any instance), carried to the process
    that waits, through the share `signins` records its waiting sign-ins in (`SignIns.relay`)."""

    def __init__(self, signins: SignIns) -> None:
        self.signins = signins
        self.pending: SignInShare = signins.relay

    async def deliver(self, params: dict[str, str]) -> Delivery:
        """The callback's outcome: the sign-in finished (by this process or the one whose flow waits), or why not."""
        key = state_key(params.get("state", ""))
        try:
            sent = await self.pending.send(key, params)
            if not sent and self.signins.holds(params.get("state", "")):
                # Its row could not be written when it began (`SignIns` logged it): this instance alone has it.
                return await self.signins.deliver(params).exchanged()
            if not sent:
                return Delivery(False, UNKNOWN)
            if self.signins.holds(params.get("state", "")):
                await self._take(key)  # no need to wait for the announcement: the flow is here
            outcome = await self.pending.outcome(key, EXCHANGE_WAIT_S + 5)
        except StoreUnavailable as exc:
            logger.warning("sign-in: the browser's return could not be passed on: %s", exc)
            return Delivery(
                False, "The bot cannot reach its database just now; open the link again in a moment."
            )
        if outcome is None:
            return Delivery(False, "Signing in is taking long; Telegram will tell you how it went.")
        return Delivery(outcome.ok, outcome.reason)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Take each return announced for a flow waiting here (in a fleet, after the bus (re)connects, every
        return still untaken: one may have been announced while it was away)."""
        await self.pending.serve(self._take, task_status=task_status)

    async def _take(self, key: str) -> None:
        """The return `key` when its flow waits here: taken (once), delivered, exchanged, its outcome written."""
        if not any(state_key(state) == key for state in self.signins.waiting_states()):
            return
        try:
            params = await self.pending.claim(key)
            if params is None:
                return  # taken already (by the callback's own shortcut, or a second wake-up)
            delivery = await self.signins.deliver(params).exchanged()
            await self.pending.settle(key, SignInOutcome(delivery.ok, delivery.reason))
        except StoreUnavailable as exc:
            logger.warning("sign-in: could not take a browser's return: %s", exc)


def callback_routes(fleet: SignInFleet, bot_username: Callable[[], str | None]) -> list[BaseRoute]:
    """The callback route (and the client metadata document); `bot_username()` makes the page's t.me link. The
    browser's return reaches the sign-in through `fleet`, on whichever process waits for it."""
    signins = fleet.signins

    async def callback(request: Request) -> Response:
        username = bot_username()
        link = f"https://t.me/{username}" if username else "https://t.me/"
        params = {k: v for k, v in request.query_params.items()}
        delivery = await fleet.deliver(params)
        if delivery.ok:
            title, text, status = "Signed in", "You can go back to Telegram.", 200
        else:
            title, text, status = "Not signed in", delivery.reason, 400
        page = _PAGE.format(title=html.escape(title), text=html.escape(text), link=html.escape(link))
        # The address carries a one-time code: no caching, no referrer.
        headers = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
        return HTMLResponse(page, status_code=status, headers=headers)

    routes: list[BaseRoute] = [Route(CALLBACK_PATH, callback, methods=["GET"])]
    document = client_metadata_document(signins.config) if signins.metadata_url is not None else None
    if document is not None:

        async def client_metadata(request: Request) -> Response:
            return JSONResponse(document, headers={"Cache-Control": "public, max-age=300"})

        routes.append(Route(CLIENT_METADATA_PATH, client_metadata, methods=["GET"]))
    return routes

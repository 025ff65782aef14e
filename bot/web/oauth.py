"""`/oauth/callback` on the web endpoint: where a browser comes back after signing in. Does I/O.

The page says only whether it worked and links back to the bot in Telegram; the code and state go to
`SignIns.deliver`, which matches the state (single use, bound to the person's pending sign-in, expiring
with the card) and checks `iss`. The page answers once the code has been exchanged for tokens, so "Signed in"
means signed in; a refused code says what failed.

With an https public URL, `/oauth/client-metadata.json` is the bot's Client ID Metadata Document: its URL is
the client id the bot gives authorization servers that accept such documents.
"""

from __future__ import annotations

import html
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.servers.oauth import CALLBACK_PATH, CLIENT_METADATA_PATH, SignIns, client_metadata_document

__all__ = ["callback_routes"]

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="no-referrer"><title>{title}</title></head>
<body style="font-family: sans-serif; max-width: 30em; margin: 3em auto; padding: 0 1em">
<h1>{title}</h1><p>{text}</p><p><a href="{link}">Go back to Telegram</a></p></body></html>
"""


def callback_routes(signins: SignIns, bot_username: Callable[[], str | None]) -> list[BaseRoute]:
    """The callback route (and the client metadata document); `bot_username()` makes the page's t.me link."""

    async def callback(request: Request) -> Response:
        username = bot_username()
        link = f"https://t.me/{username}" if username else "https://t.me/"
        params = {k: v for k, v in request.query_params.items()}
        delivery = await signins.deliver(params).exchanged()
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

"""The seed's two functions: MCP `elicitation/create` params <-> `Request`, `Answer` -> elicit result. Pure.

Both sides are wire-shaped dicts (camelCase keys), exactly as in the seed's examples; the MCP edge in
`bot/` converts SDK models to and from these dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mapping.errors import InvalidParams
from mapping.ids import new_request_id
from mapping.model import DECLINED, Answer, Request, RequestKind


def elicitation_to_request(params: Mapping[str, Any]) -> Request:
    """Map `elicitation/create` params onto a `Request`.

    `mode == "url"` gives an authorization request carrying `params["url"]`; anything else (including
    no `mode`, as 2025-06-18 servers send) is a form, whose `requestedSchema` travels in `data`.

    Raises:
        InvalidParams: `message` is not a string, or a URL-mode request has no string `url`.
    """
    message = params.get("message")
    if not isinstance(message, str):
        raise InvalidParams("message", "must be a string")
    if params.get("mode") == "url":
        url = params.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidParams("url", "URL-mode elicitation needs a non-empty string url")
        return Request(id=new_request_id(), kind=RequestKind.AUTHORIZATION, prompt=message, url=url)
    schema = params.get("requestedSchema")
    return Request(
        id=new_request_id(),
        kind=RequestKind.INPUT,
        prompt=message,
        data={"schema": schema} if schema is not None else None,
    )


def answer_to_elicit_result(answer: Answer) -> dict[str, Any]:
    """Map an `Answer` onto the MCP elicit result: accept (with content), decline, or cancel."""
    if answer.ok:
        return {"action": "accept", "content": answer.data or {}}
    if answer.reason == DECLINED:
        return {"action": "decline"}
    return {"action": "cancel"}

"""The seed's §10 shapes: `Request` (what a surface shows) and `Answer` (what a person said). Pure."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final


class RequestKind(enum.StrEnum):
    """What a `Request` asks for."""

    INPUT = "input"
    """Fill in a form (or just confirm, when there is no schema)."""
    AUTHORIZATION = "authorization"
    """Open a URL (OAuth and similar) after giving consent."""


DECLINED: Final = "declined"
"""The one `Answer.reason` that maps to the wire `decline`; every other failed answer is a `cancel`."""


@dataclass(frozen=True, slots=True)
class Request:
    """A suspension of a tool call, waiting for a person."""

    id: str
    """Fresh per process: `elc-<ts36>-<seq>`."""
    kind: RequestKind
    """`"input"` or `"authorization"`."""
    prompt: str
    """The server's message, verbatim (surfaces escape it)."""
    url: str | None = None
    """The URL to open; authorization requests only."""
    data: dict[str, Any] | None = None
    """`{"schema": requestedSchema}` for input requests that carry a schema, else `None`."""

    def __post_init__(self) -> None:
        if self.kind not in RequestKind.__members__.values():
            raise ValueError(f"kind must be one of {[k.value for k in RequestKind]}, not {self.kind!r}")
        if self.kind is RequestKind.AUTHORIZATION and not self.url:
            raise ValueError("an authorization request needs a url")


@dataclass(frozen=True, slots=True)
class Answer:
    """A person's reply to a `Request` with the same id."""

    id: str
    """The `Request.id` this answers."""
    ok: bool
    """True when the person accepted (submitted the form, or consented to open the URL)."""
    data: dict[str, Any] | None = None
    """The submitted content, for accepted input requests."""
    reason: str | None = None
    """Why `ok` is False: `"declined"`, or anything else (`"cancelled"`, `"timeout"`, ...)."""

"""Turn MCP tool results and errors into the plain `ToolOutcome` a surface shows. Pure (SDK models in, data out)."""

from __future__ import annotations

import json
from typing import Any, Final

import mcp_types as types

from bot.core import CallStatus, ToolOutcome


def _block_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}]"
    if isinstance(block, types.ResourceLink):
        return f"[resource: {block.name} {block.uri}]"
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        text = getattr(resource, "text", None)
        return text if isinstance(text, str) else f"[resource: {resource.uri}]"
    return f"[{getattr(block, 'type', 'content')}]"


READ_LIMIT: Final = 20_000
"""Characters of a result read into its text; more than any surface shows (Telegram: four messages)."""


def outcome_of_result(result: types.CallToolResult, limit: int = READ_LIMIT) -> ToolOutcome:
    """A finished call: its content blocks as text; structured content kept as data.

    At most `limit` characters are read into the text (a hostile server may return megabytes): conversion
    stops there, and `omitted` says how many characters were left out (None when not counted).
    """
    blocks: list[str] = []
    size, omitted = 0, 0
    for block in result.content:
        if size >= limit:
            omitted += _length(block)
            continue
        text = _block_text(block)
        if size + len(text) > limit:
            omitted += size + len(text) - limit
            text = text[: limit - size]
        blocks.append(text)
        size += len(text) + 2
    text = "\n\n".join(b for b in blocks if b)
    structured = result.structured_content
    left_out: int | None = omitted
    if not text and structured is not None:
        text, whole = _json_prefix(structured, limit)
        left_out = None if not whole else 0
    return ToolOutcome(
        status=CallStatus.TOOL_ERROR if result.is_error else CallStatus.OK,
        text=text,
        structured=structured,
        blocks=tuple(blocks),
        omitted=left_out,
        source=result,
    )


def _length(block: Any) -> int:
    """How long a block's text would be, without building it (text blocks are what get long)."""
    if isinstance(block, types.TextContent):
        return len(block.text)
    resource = getattr(block, "resource", None)
    text = getattr(resource, "text", None)
    return len(text) if isinstance(text, str) else len(_block_text(block))


def _json_prefix(data: Any, limit: int) -> tuple[str, bool]:
    """Indented JSON of `data`, encoded piece by piece and stopped past `limit`; whether it is whole."""
    parts: list[str] = []
    size = 0
    try:
        for piece in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(data):
            parts.append(piece)
            size += len(piece)
            if size > limit:
                return "".join(parts)[:limit], False
    except (TypeError, ValueError, RecursionError):
        return "[structured content that cannot be shown as JSON]", True
    return "".join(parts), True


def failure(status: CallStatus, text: str) -> ToolOutcome:
    return ToolOutcome(status=status, text=text)

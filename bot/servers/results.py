"""Turn MCP tool results and errors into the plain `ToolOutcome` a surface shows. Pure (SDK models in, data out)."""

from __future__ import annotations

import json
from typing import Any

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


def outcome_of_result(result: types.CallToolResult) -> ToolOutcome:
    """A finished call: its content blocks as text; structured content kept as data."""
    blocks = tuple(_block_text(b) for b in result.content)
    structured = result.structured_content
    text = "\n\n".join(b for b in blocks if b)
    if not text and structured is not None:
        text = json.dumps(structured, indent=2, ensure_ascii=False)
    return ToolOutcome(
        status=CallStatus.TOOL_ERROR if result.is_error else CallStatus.OK,
        text=text,
        structured=structured,
        blocks=blocks,
    )


def failure(status: CallStatus, text: str) -> ToolOutcome:
    return ToolOutcome(status=status, text=text)

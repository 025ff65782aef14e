"""The MCP conformance suite's reference tools, as a test MCP server behind the bot's gateway.

I/O: an MCP server (the SDK's low-level `Server`: the tool schemas are given exactly, `$defs` and all);
`build_server()` for in-process use. The suite's server scenarios call these fixed names (`test_simple_text`,
...) and check what comes back; through the gateway they are `<server>__<name>` (tests/conformance/bearer.mjs
maps the names). `with_meta` is ours: a result whose `_meta` carries a protocol key and one of its own.

The tasks extension's scenarios (SEP-2663) want `greet` (sync), and three tools declaring `execution.taskSupport`:
`slow_compute` (sleeps `seconds`, optional), `failing_job` (a tool error after about a second, required: the
scenario calling it without the extension wants -32021) and `protocol_error_job` (a JSON-RPC error, optional). The
server itself runs them as plain calls (it declares no tasks): the gateway in front decides what is a task.
"""

from __future__ import annotations

import base64
from typing import Any, Final, Literal

import anyio.lowlevel
import mcp_types as types
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server

__all__ = ["OWN_META", "SERVER_NAME", "TOOLS", "build_server"]

SERVER_NAME: Final = "conformance-reference"
OWN_META: Final = {"example.com/trace": "t-1"}
"""A `_meta` key of `with_meta`'s own (the gateway must keep it)."""
_PNG: Final = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc0"
        "00000301010018dd8db00000000049454e44ae426082"
    )
).decode()
"""A 1x1 red pixel."""
_WAV: Final = base64.b64encode(
    b"RIFF"
    + (36 + 2).to_bytes(4, "little")
    + b"WAVEfmt "
    + (16).to_bytes(4, "little")
    + bytes.fromhex("01000100401f0000803e000002001000")
    + b"data"
    + (2).to_bytes(4, "little")
    + b"\0\0"
).decode()
"""One silent 16-bit sample at 8 kHz."""
_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}
_SCHEMA_2020_12: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
"""The 0.2 suite's (SEP-1613 and SEP-2106 keywords); the 0.1 suite checks a part of it."""
_HEADERS: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"],
}
"""A parameter mirrored into an `Mcp-Param-Region` header (SEP-2243)."""
_ELICIT_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "test_elicitation": {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    },
    "test_elicitation_sep1034_defaults": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    },
    "test_elicitation_sep1330_enums": {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "legacyEnum": {"type": "string", "enum": ["opt1", "opt2"], "enumNames": ["One", "Two"]},
        },
    },
}
TOOLS: Final = (
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_tool_with_logging",
    "test_error_handling",
    "test_tool_with_progress",
    "test_sampling",
    *_ELICIT_SCHEMAS,
    "json_schema_2020_12_tool",
    "test_custom_headers",
    "with_meta",
    "greet",
    "slow_compute",
    "failing_job",
    "protocol_error_job",
)
_TASK_SUPPORT: Final[dict[str, Literal["optional", "required"]]] = {
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "optional",
}
"""The tasks extension's fixtures and their `execution.taskSupport`."""
_TASK_SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "greet": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    "slow_compute": {
        "type": "object",
        "properties": {"seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}},
        "required": ["seconds"],
    },
}


def _tool(name: str) -> types.Tool:
    schema = {
        "json_schema_2020_12_tool": _SCHEMA_2020_12,
        "test_custom_headers": _HEADERS,
        **_TASK_SCHEMAS,
    }.get(name, _NO_ARGS)
    if name in ("test_sampling", "test_elicitation"):
        key = "prompt" if name == "test_sampling" else "message"
        schema = {"type": "object", "properties": {key: {"type": "string"}}, "required": [key]}
    support = _TASK_SUPPORT.get(name)
    execution = None if support is None else types.ToolExecution(task_support=support)
    return types.Tool(
        name=name, description=f"The conformance suite's {name}", input_schema=schema, execution=execution
    )


def _text(text: str) -> types.TextContent:
    return types.TextContent(text=text)


def _resource() -> types.EmbeddedResource:
    contents = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.EmbeddedResource(resource=contents)


def _fixed(name: str) -> types.CallToolResult | None:
    """The result of a tool that needs no session, or None."""
    image = types.ImageContent(data=_PNG, mime_type="image/png")
    content: dict[str, list[types.ContentBlock]] = {
        "test_simple_text": [_text("This is a simple text response for testing.")],
        "test_image_content": [image],
        "test_audio_content": [types.AudioContent(data=_WAV, mime_type="audio/wav")],
        "test_embedded_resource": [_resource()],
        "test_multiple_content_types": [_text("Multiple content types test:"), image, _resource()],
    }
    if name in content:
        return types.CallToolResult(content=content[name])
    if name == "test_error_handling":
        text = "This tool intentionally returns an error for testing"
        return types.CallToolResult(content=[_text(text)], is_error=True)
    if name == "with_meta":
        meta = {**OWN_META, "io.modelcontextprotocol/serverInfo": {"name": SERVER_NAME, "version": "1"}}
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": "with meta"}], "_meta": meta}
        )
    return None


async def _with_session(
    ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
) -> types.CallToolResult:
    """The tools that talk back to the client (the bot) during the call."""
    if name == "test_tool_with_logging":
        for line in ("Tool execution started", "Tool processing data", "Tool execution completed"):
            await ctx.session.send_log_message("info", line, related_request_id=ctx.request_id)
        return types.CallToolResult(content=[_text("Tool with logging executed successfully")])
    if name == "test_tool_with_progress":
        for done in (0, 50, 100):
            await ctx.session.report_progress(done, 100)
            await anyio.lowlevel.checkpoint()
        return types.CallToolResult(content=[_text("Progress tool completed")])
    if name == "test_sampling":
        prompt = types.SamplingMessage(role="user", content=_text(str(arguments.get("prompt", ""))))
        sampled = await ctx.session.create_message(messages=[prompt], max_tokens=100)
        return types.CallToolResult(content=[_text(f"LLM response: {sampled.content}")])
    if name in _ELICIT_SCHEMAS:
        message = str(arguments.get("message", f"{name}: please answer"))
        answer = await ctx.session.elicit_form(message, _ELICIT_SCHEMAS[name], ctx.request_id)
        return types.CallToolResult(content=[_text(f"User response: {answer.action} {answer.content}")])
    if name == "test_custom_headers":
        return types.CallToolResult(content=[_text(f"region: {arguments.get('region')}")])
    if name == "json_schema_2020_12_tool":
        return types.CallToolResult(content=[_text(f"received {sorted(arguments)}")])
    if name == "greet":
        return types.CallToolResult(content=[_text(f"Hello, {arguments.get('name')}!")])
    if name == "slow_compute":
        seconds = float(arguments.get("seconds") or 0)
        await anyio.sleep(seconds)
        return types.CallToolResult(
            content=[_text(f"computed {arguments.get('label', '')} in {seconds:g} s")]
        )
    if name == "failing_job":
        await anyio.sleep(1)
        return types.CallToolResult(content=[_text("the job failed")], is_error=True)
    if name == "protocol_error_job":
        raise MCPError(code=types.INTERNAL_ERROR, message="protocol_error_job: the job broke down")
    return types.CallToolResult(content=[_text(f"unknown tool: {name}")], is_error=True)


def build_server() -> Server[Any]:
    """A fresh server."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(name) for name in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        fixed = _fixed(params.name)
        return fixed if fixed is not None else await _with_session(ctx, params.name, params.arguments or {})

    return Server(SERVER_NAME, version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)

"""Chat commands: /start /help /servers /tools /call /cancel. Long work runs as tasks, never in the update loop."""

from __future__ import annotations

from typing import Any

from telegram import BotCommand, Update
from telegram.ext import BaseHandler, CommandHandler

from bot.config import Config
from bot.core import Origin, ToolInfo
from bot.core.call_args import CallArgsError, CallCommand, not_found_text, parse_arguments, split_call
from bot.servers.hub import Unavailable
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.handlers import agents, second_factor
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.deps import Context, Deps
from bot.telegram.render import (
    NAME_CLIP,
    TEXT_CLIP,
    Keyboard,
    Screen,
    button_label,
    callback_button,
    esc,
    fit,
)

COMMANDS = [
    BotCommand("tools", "List tools as buttons (optionally of one server)"),
    BotCommand("call", "Call a tool: /call <server> <tool> [json | key=value …]"),
    BotCommand("servers", "The MCP servers and their state"),
    BotCommand("cancel", "Cancel your pending questions and calls here"),
    BotCommand("help", "How this bot works"),
]

HELP = (
    "I connect to MCP servers and run their tools for you. When a tool needs to ask you something, "
    "I show the question here: tap a button, or reply to the card with text.\n\n"
    "/tools [server] — tools as buttons; tap one to run it\n"
    "/call &lt;server&gt; &lt;tool&gt; [json | key=value …] — run a tool with arguments "
    "(<code>/call &lt;tool&gt; …</code> when its name is unique)\n"
    "/servers — servers, connected or not, and their tools\n"
    "/cancel — cancel your pending questions and calls in this chat"
)


def menu(more: list[BotCommand]) -> list[BotCommand]:
    """The command menu: `COMMANDS` with a feature's own commands (`more`) before /help."""
    return [*COMMANDS[:-1], *more, COMMANDS[-1]]


def origin_of(update: Update) -> Origin:
    assert update.effective_chat is not None and update.effective_user is not None
    return Origin(chat_id=update.effective_chat.id, user_id=update.effective_user.id)


def help_text(config: Config) -> str:
    """/help: `HELP` with the lines of the features that are on (/agents with the gateway, /2fa with a rule asking
    for a code)."""
    return "\n".join([HELP, *agents.help_lines(config), *second_factor.help_lines(config)])


async def start_tool(
    context: Context,
    update: Update,
    server: str,
    tool: str,
    args: dict[str, Any],
    chat_id: int,
) -> None:
    """Look the tool up for this person and run it in the background."""
    assert update.effective_user is not None
    deps = context.deps
    origin = Origin(chat_id=chat_id, user_id=update.effective_user.id)
    try:
        tools = await deps.hub.list_tools(server, origin)
    except Unavailable as exc:
        await deps.surface.send(chat_id, Screen(_unavailable(server, exc)))
        return
    info = next((t for t in tools if t.name == tool), None)
    if info is None:
        await deps.surface.send(
            chat_id, Screen(f"No tool <b>{esc(tool, NAME_CLIP)}</b> on {esc(server, NAME_CLIP)}. Try /tools.")
        )
        return
    context.application.create_task(deps.runner.run(info, args, origin), update=update)


async def help_(update: Update, context: Context) -> None:
    """/start and /help."""
    await _reply(context, update, help_text(context.deps.config))


async def servers(update: Update, context: Context) -> None:
    """/servers: each server, connected or not, with its tool count."""
    hub = context.deps.hub
    origin = origin_of(update)
    lines = ["<b>Servers</b>"]
    for name in hub.server_names():
        status = await hub.probe(name, origin)
        title = f" ({esc(status.title, NAME_CLIP)})" if status.title else ""
        if status.connected:
            lines.append(
                f"🟢 <b>{esc(name)}</b>{title}: {status.tool_count} tools, protocol {esc(status.protocol or '?')}"
            )
        else:
            lines.append(
                f"🔴 <b>{esc(name)}</b>{title}: unavailable — {esc(status.error or 'unknown error', TEXT_CLIP)}"
            )
    await _reply(context, update, "\n".join(lines))


async def tools(update: Update, context: Context) -> None:
    """/tools [server]: one button per tool."""
    hub = context.deps.hub
    origin = origin_of(update)
    wanted = context.args[0] if context.args else None
    names = hub.server_names()
    if wanted is not None and wanted not in names:
        await _reply(
            context, update, f"No server named <b>{esc(wanted, NAME_CLIP)}</b>. /servers lists them."
        )
        return
    for name in [wanted] if wanted else names:
        try:
            listed = await hub.list_tools(name, origin)
        except Unavailable as exc:
            await _reply(context, update, _unavailable(name, exc))
            continue
        await _reply(context, update, *await _tool_list(context.deps, name, listed, origin))


async def call(update: Update, context: Context) -> None:
    """/call <server> <tool> [args] or /call <tool> [args]."""
    assert update.message is not None and update.message.text is not None
    hub = context.deps.hub
    origin = origin_of(update)
    _, _, text = update.message.text.partition(" ")
    try:
        cmd = split_call(text, hub.server_names())
    except CallArgsError as exc:
        await _reply(context, update, esc(str(exc)))
        return
    server = cmd.server if cmd.server is not None else await _only_server(context, update, cmd, origin)
    if server is None:
        return
    try:
        schema = next(
            (t.input_schema for t in await hub.list_tools(server, origin) if t.name == cmd.tool),
            None,
        )
    except Unavailable as exc:
        await _reply(context, update, _unavailable(server, exc))
        return
    try:
        args = parse_arguments(cmd.raw_args, schema)
    except CallArgsError as exc:
        await _reply(context, update, esc(str(exc)))
        return
    await start_tool(context, update, server, cmd.tool, args, origin.chat_id)


async def cancel(update: Update, context: Context) -> None:
    """/cancel: this person's pending prompts and calls in this chat."""
    count = context.deps.hub.cancel(origin_of(update))
    await _reply(
        context,
        update,
        f"Cancelled {count} pending question(s) and call(s)." if count else "Nothing to cancel here.",
    )


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """The commands, for everyone allowed."""
    return [
        CommandHandler(["start", "help"], allowed_only(help_)),
        CommandHandler("servers", allowed_only(servers)),
        CommandHandler("tools", allowed_only(tools)),
        CommandHandler("call", allowed_only(call)),
        CommandHandler("cancel", allowed_only(cancel)),
    ]


async def _reply(context: Context, update: Update, text: str, keyboard: Keyboard | None = None) -> None:
    assert update.effective_chat is not None
    await context.deps.surface.send(update.effective_chat.id, Screen(text, keyboard))


def _unavailable(server: str, exc: Unavailable) -> str:
    return f"⚠️ <b>{esc(server, NAME_CLIP)}</b> is unavailable: {esc(exc.reason, TEXT_CLIP)}"


async def _only_server(context: Context, update: Update, cmd: CallCommand, origin: Origin) -> str | None:
    """`/call <tool>`: the one server with that tool, or None (and the person told there is none, or several)."""
    hub = context.deps.hub
    found: list[ToolInfo] = []
    for name in hub.server_names():
        try:
            found += [t for t in await hub.list_tools(name, origin) if t.name == cmd.tool]
        except Unavailable:
            continue
    if len(found) == 1:
        return found[0].server
    where = ", ".join(t.server for t in found)
    await _reply(
        context,
        update,
        f"<b>{esc(cmd.tool, NAME_CLIP)}</b> is on several servers ({esc(where)}); name one: /call &lt;server&gt; {esc(cmd.tool, NAME_CLIP)}"
        if found
        else f"{esc(not_found_text(cmd, hub.server_names()), 600)} /tools lists the tools.",
    )
    return None


async def _tool_list(
    deps: Deps, server: str, tools: list[ToolInfo], origin: Origin
) -> tuple[str, Keyboard | None]:
    if not tools:
        return f"<b>{esc(server, NAME_CLIP)}</b> has no tools.", None
    lines = [f"<b>{esc(server, NAME_CLIP)}</b> — tap a tool to run it:"]
    rows = []
    token = await deps.tool_buttons.add(server, [tool.name for tool in tools[:90]], origin)
    for index, tool in enumerate(tools[:90]):
        summary = (tool.description or "").strip().splitlines()[0] if (tool.description or "").strip() else ""
        lines.append(
            f"• <b>{esc(tool.title or tool.name, NAME_CLIP)}</b>"
            + (f" — {esc(summary, 120)}" if summary else "")
        )
        data = Button(Kind.TOOL, token, 0, Action.CALL, index).pack()
        rows.append([callback_button(button_label(tool.title or tool.name), data)])
    if len(tools) > 90:
        lines.append(f"… and {len(tools) - 90} more; use /call for those.")
    return fit(lines), rows

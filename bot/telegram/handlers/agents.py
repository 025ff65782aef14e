"""/agents: a person's agent tokens for the MCP gateway (`[gateway]`): make one, list them, revoke one; and the
answers to their agents' permission prompts that are remembered, each with a **Forget** button. Does I/O
(database, Telegram).

A token's text exists once, in the message `/agents new` sends (the store keeps its hash): the bot cannot show
it again, and never logs it (`bot.logs` removes any `tnx_...` from every record). Tokens are for the people the
config names: under `allow_everyone` a stranger may use the bot, but may not take an API key for it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Collection, Sequence
from typing import Final

from telegram import BotCommand, Update
from telegram.ext import BaseHandler, CallbackQueryHandler, CommandHandler

from bot.config import Config
from bot.core import AgentBook
from bot.core.agents import AGENT_NAME, GATEWAY_PATH, AgentToken
from bot.core.hook_settings import TOKEN_VAR, claude_code_settings, codex_hooks, prompt_tool_flag
from bot.core.remembered import Decision, Memory
from bot.errors import StoreUnavailable
from bot.telegram import callback_data
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.handlers.access import allowed_only
from bot.telegram.handlers.deps import Context
from bot.telegram.remembered import decision_lines, shown_input, silenced
from bot.telegram.render import Keyboard, Screen, button_label, callback_button, esc, fit

__all__ = [
    "GATEWAY_OFF",
    "NOT_YOURS",
    "ONLY_CONFIGURED",
    "PRIVATE_ONLY",
    "agents",
    "handlers",
    "help_lines",
    "is_forget",
    "is_revoke",
    "menu",
    "on_forget",
    "on_revoke",
    "render_list",
    "render_new",
]

MAX_LISTED: Final = 50
"""Tokens the list shows with a button (a keyboard holds 100 buttons)."""
COMMAND: Final = BotCommand("agents", "Tokens for your agents: /agents new <name>, /agents revoke <name>")
HELP_LINE: Final = (
    "/agents — tokens for your agents (Claude Code, an IDE, a CI job) to call these tools as you: "
    "<code>/agents new &lt;name&gt;</code> makes one, <code>/agents revoke &lt;name&gt;</code> ends one"
)
GATEWAY_OFF: Final = "Agent tokens are off: this bot's MCP gateway for agents is not enabled."
PRIVATE_ONLY: Final = "Agent tokens are made and listed in a private chat: message me /agents there."
ONLY_CONFIGURED: Final = "Agent tokens are only for the people this bot is configured for."
NOT_YOURS: Final = "This button belongs to the person whose tokens these are."
UNAVAILABLE: Final = "The database is unavailable just now; try again in a moment."
USAGE: Final = (
    "<code>/agents</code> lists your agent tokens; <code>/agents new &lt;name&gt;</code> makes one; "
    "<code>/agents revoke &lt;name&gt;</code> ends one."
)
BAD_NAME: Final = (
    "An agent's name is 1-32 of A-Z a-z 0-9 _ . - and starts with a letter or digit "
    "(it goes into shell commands): <code>{name}</code> is not one. Try <code>/agents new ci-bot</code>."
)
_TIME: Final = "%Y-%m-%d %H:%M UTC"


def menu(config: Config) -> list[BotCommand]:
    """The command menu's entry for /agents: only with the gateway on."""
    return [COMMAND] if config.gateway.enabled else []


def help_lines(config: Config) -> list[str]:
    """/help's line for /agents: only with the gateway on."""
    return [HELP_LINE] if config.gateway.enabled else []


def gateway_url(config: Config) -> str:
    """`<public_url>/mcp`, what agents connect to."""
    assert (
        config.web is not None and config.web.public_url is not None
    )  # the config requires it with [gateway]
    return config.web.public_url.rstrip("/") + GATEWAY_PATH


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime(_TIME)


def _lifetime(token: AgentToken) -> str:
    return "until revoked" if token.expires is None else f"until {_when(token.expires)}"


def render_new(token: AgentToken, text: str, url: str, public_url: str) -> Screen:
    """The one message that shows a new token: the token, and the lines that register it (the gateway, and the
    hooks that bring the agent's permission prompts here), each one tap to copy."""
    name = token.name
    claude = f'claude mcp add --transport http {name} {url} --header "Authorization: Bearer {text}"'
    block = {
        "mcpServers": {name: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {text}"}}}
    }
    lines = [
        f"🔑 <b>Agent token for {esc(name)}</b>, valid {_lifetime(token)}:",
        f"<code>{esc(text)}</code>",
        "",
        "Claude Code:",
        f"<pre>{esc(claude)}</pre>",
        "Other clients (their <code>mcpServers</code> JSON):",
        f'<pre><code class="language-json">{esc(json.dumps(block))}</code></pre>',
        "",
        f"🛡 Its permission prompts on your phone: <code>export {TOKEN_VAR}={esc(text)}</code>, then Claude Code's "
        "<code>.claude/settings.json</code>:",
        f"<code>{esc(json.dumps(claude_code_settings(public_url)))}</code>",
        f"(or, headless: <code>claude -p ... {esc(prompt_tool_flag(name))}</code>); Codex's "
        "<code>~/.codex/config.toml</code>:",
        f'<pre><code class="language-toml">{esc(codex_hooks(public_url))}</code></pre>',
        "",
        "The agent acts as you: it calls these tools, and every question they ask comes here.",
        "⚠️ This is the only time the token is shown: I keep only its hash. Keep it secret; "
        f"delete this message once it is copied if you like. <code>/agents revoke {esc(name)}</code> "
        "(or <b>Revoke</b> under /agents) stops it at once.",
    ]
    return Screen("\n".join(lines))


def render_list(
    tokens: list[AgentToken],
    user_id: int,
    note: str = "",
    decisions: Sequence[Decision] = (),
    unused: Collection[int] = (),
) -> Screen:
    """The person's live tokens, each with a **Revoke** button bound to them, then their agents' remembered
    answers, each with a **Forget** button (`unused`: those the rules no longer let answer); `note` (HTML) heads
    it."""
    head = [note, ""] if note else []
    if not tokens:
        return Screen(
            "\n".join([*head, "You have no agent tokens. <code>/agents new &lt;name&gt;</code> makes one."])
        )
    lines = [*head, "🔑 <b>Your agent tokens</b>"]
    rows: Keyboard = []
    for token in tokens[:MAX_LISTED]:
        used = "never used" if token.last_used is None else f"last used {_when(token.last_used)}"
        calls = "1 call" if token.calls == 1 else f"{token.calls} calls"
        expiry = "" if token.expires is None else f" · expires {_when(token.expires)}"
        lines.append(f"• <b>{esc(token.name)}</b> — made {_when(token.created)} · {used} · {calls}{expiry}")
        data = Button(Kind.AGENT, str(token.id), 0, Action.REVOKE, user_id).pack()
        rows.append([callback_button(button_label(f"Revoke {token.name}"), data)])
    if len(tokens) > MAX_LISTED:
        lines.append(
            f"… and {len(tokens) - MAX_LISTED} more: <code>/agents revoke &lt;name&gt;</code> ends one."
        )
    remembered, forget = decision_lines(
        decisions, {token.id: token.name for token in tokens}, user_id, unused
    )
    return Screen(fit(lines + remembered), rows + forget)


def is_revoke(data: object) -> bool:
    """For `CallbackQueryHandler(pattern=...)`: a **Revoke** tap of the /agents list."""
    return _tap(data, Action.REVOKE)


def is_forget(data: object) -> bool:
    """For `CallbackQueryHandler(pattern=...)`: a **Forget** tap of the /agents list."""
    return _tap(data, Action.FORGET)


def _tap(data: object, action: Action) -> bool:
    button = callback_data.unpack(data) if isinstance(data, str) else None
    return button is not None and button.kind is Kind.AGENT and button.action is action


async def _listing(
    config: Config, book: AgentBook, memory: Memory | None, user_id: int, note: str = ""
) -> Screen:
    """The person's /agents list as it stands now: tokens, and their agents' remembered answers.

    Raises:
        StoreUnavailable: the database is unavailable.
    """
    decisions = () if memory is None else await memory.of(user_id, dt.datetime.now(dt.UTC))
    return render_list(await book.of(user_id), user_id, note, decisions, silenced(config, decisions))


def _revoked(name: str) -> str:
    return f"Revoked <b>{esc(name)}</b>: the gateway refuses it from now on."


async def agents(update: Update, context: Context) -> None:
    """/agents [list] | new <name> | revoke <name>."""
    deps = context.deps
    chat, user = update.effective_chat, update.effective_user
    assert chat is not None and user is not None
    book = deps.agents
    configured = deps.config.telegram.allowed_users  # not `access.allows` (allow_everyone: anyone)
    if not deps.config.gateway.enabled or book is None:
        screen = Screen(GATEWAY_OFF)
    elif user.id not in configured:
        screen = Screen(ONLY_CONFIGURED)
    elif chat.type != chat.PRIVATE:
        screen = Screen(PRIVATE_ONLY)
    else:
        args = context.args or []
        verb, name = (args[0].lower() if args else "list"), " ".join(args[1:])
        try:
            screen = await _answer(deps.config, book, deps.memory, user.id, verb, name)
        except StoreUnavailable:
            screen = Screen(UNAVAILABLE)
    await deps.surface.send(chat.id, screen)


async def _answer(
    config: Config, book: AgentBook, memory: Memory | None, user_id: int, verb: str, name: str
) -> Screen:
    """What `/agents <verb> <name>` answers in a private chat, gateway on, to someone the config names.

    Raises:
        StoreUnavailable: the database is unavailable.
    """
    if verb == "list" and not name:
        return await _listing(config, book, memory, user_id)
    if verb == "new":
        return Screen(await _new(config, book, user_id, name))
    if verb == "revoke" and name:
        revoked = await book.revoke(user_id, name)
        note = _revoked(name) if revoked else f"You have no live agent token named <b>{esc(name, 64)}</b>."
        return await _listing(config, book, memory, user_id, note)
    return Screen(USAGE)


async def _new(config: Config, book: AgentBook, user_id: int, name: str) -> str:
    """The message `/agents new <name>` answers with: the token once, or why there is none.

    Raises:
        StoreUnavailable: the database is unavailable.
    """
    if AGENT_NAME.fullmatch(name) is None:
        return BAD_NAME.format(name=esc(name, 64)) if name else USAGE
    if any(token.name == name for token in await book.of(user_id)):
        return (
            f"You already have an agent token named <b>{esc(name)}</b>: revoke it first "
            f"(<code>/agents revoke {esc(name)}</code>), or pick another name."
        )
    try:
        token, text = await book.create(user_id, name, config.gateway.token_days)
    except ValueError as exc:  # the same name made a moment ago, in another update
        return esc(str(exc))
    assert (
        config.web is not None and config.web.public_url is not None
    )  # the config requires it with [gateway]
    return render_new(token, text, gateway_url(config), config.web.public_url).text


async def on_revoke(update: Update, context: Context) -> None:
    """**Revoke** under the list: the tapper's own token only; the list is drawn again, saying so."""
    deps = context.deps
    query = update.callback_query
    assert query is not None
    button = callback_data.unpack(query.data)
    user = query.from_user
    book = deps.agents
    if button is None or button.arg != user.id:  # a forged tap, or one on someone else's list
        await query.answer(NOT_YOURS, show_alert=True)
        return
    if user.id not in deps.config.telegram.allowed_users:
        await query.answer(ONLY_CONFIGURED, show_alert=True)
        return
    if not deps.config.gateway.enabled or book is None:
        await query.answer(GATEWAY_OFF, show_alert=True)
        return
    try:
        mine = await book.of(user.id)
        token = next((t for t in mine if str(t.id) == button.token), None)
        revoked = token is not None and await book.revoke(user.id, token.name)
        note = (
            _revoked(token.name)
            if revoked and token is not None
            else "That token was already revoked or expired."
        )
        screen = await _listing(deps.config, book, deps.memory, user.id, note)
    except StoreUnavailable:
        await query.answer(UNAVAILABLE, show_alert=True)
        return
    await _redraw(context, update, screen)
    await query.answer(
        f"Revoked {token.name}." if revoked and token is not None else "Already revoked.",
        show_alert=not revoked,
    )


async def on_forget(update: Update, context: Context) -> None:
    """**Forget** under the list: the tapper's own remembered answer only; the list is drawn again, saying so."""
    deps = context.deps
    query = update.callback_query
    assert query is not None
    button = callback_data.unpack(query.data)
    user = query.from_user
    book, memory = deps.agents, deps.memory
    if (
        button is None or button.arg != user.id or not button.token.isdigit()
    ):  # forged, or someone else's list
        await query.answer(NOT_YOURS, show_alert=True)
        return
    if user.id not in deps.config.telegram.allowed_users:
        await query.answer(ONLY_CONFIGURED, show_alert=True)
        return
    if not deps.config.gateway.enabled or book is None or memory is None:
        await query.answer(GATEWAY_OFF, show_alert=True)
        return
    try:
        now = dt.datetime.now(dt.UTC)
        made = next((d for d in await memory.of(user.id, now) if d.id == int(button.token)), None)
        forgotten = made is not None and await memory.forget(user.id, made.id)
        note = (
            f"Forgot: {'allow' if made.allow else 'deny'} {esc(made.tool)} "
            f"<code>{esc(shown_input(made.tool, made.input))}</code>. Your agent is asked again next time."
            if forgotten and made is not None
            else "That answer was already forgotten, or its time was up."
        )
        screen = await _listing(deps.config, book, memory, user.id, note)
    except StoreUnavailable:
        await query.answer(UNAVAILABLE, show_alert=True)
        return
    await _redraw(context, update, screen)
    await query.answer("Forgotten." if forgotten else "Already forgotten.", show_alert=not forgotten)


async def _redraw(context: Context, update: Update, screen: Screen) -> None:
    """The /agents list drawn again where it was tapped (or sent anew when that message is out of reach)."""
    query = update.callback_query
    assert query is not None
    message = query.message
    if message is not None:
        await context.deps.surface.edit(message.chat.id, message.message_id, screen)
    else:
        await context.deps.surface.send(query.from_user.id, screen)


def handlers() -> list[BaseHandler[Update, Context, None]]:
    """/agents, and its **Revoke** and **Forget** taps (these must come before the catch-all tap handler of their
    group).

    Registered whatever the config: with the gateway off (or without a database, `context.deps.agents` None: then
    the gateway is off too, as the config requires it) they say so."""
    return [
        CallbackQueryHandler(allowed_only(on_revoke), pattern=is_revoke),
        CallbackQueryHandler(allowed_only(on_forget), pattern=is_forget),
        CommandHandler("agents", allowed_only(agents)),
    ]

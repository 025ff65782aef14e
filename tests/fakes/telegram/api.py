"""The Bot API methods the fake implements, with Telegram's validation and error descriptions.

Each method takes decoded params and returns the JSON `result`, or raises `ApiReject`. In-memory only;
getUpdates is the one method that waits (a long poll on the world's change event).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .faults import FloodLimiter
from .formatting import message_text
from .markup import has_web_app, parse_markup
from .model import JSON, ApiReject, CallbackAnswer, Keyboard, Msg, PollTerminated, Version, bad_request
from .state import DEFAULT_SCOPE, World

Method = Callable[[JSON], Awaitable[Any]]

NOT_MODIFIED: Final = (
    "message is not modified: specified new message content and reply markup are exactly the same"
    " as a current content and reply markup of the message"
)
QUERY_TOO_OLD: Final = "query is too old and response timeout expired or query ID is invalid"
MAX_ANSWER_TEXT: Final = 200
_DEFAULT_UPDATES: Final = frozenset({"message", "edited_message", "callback_query"})
_CHAT_ACTIONS: Final = frozenset({
    "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
    "upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note",
})  # fmt: skip
_COMMAND_NAME = re.compile(r"[a-z0-9_]{1,32}")


class BotApi:
    """Method name (case-insensitive, as Telegram) → implementation over a `World`."""

    def __init__(self, world: World, limiter: FloodLimiter | None) -> None:
        self._world = world
        self._limiter = limiter
        self._poll_generation = 0
        self._allowed_updates: frozenset[str] = _DEFAULT_UPDATES
        self._methods: dict[str, Method] = {
            name.replace("_", ""): getattr(self, name) for name in dir(self) if _is_method_name(name)
        }

    def lookup(self, method: str) -> Method | None:
        return self._methods.get(method.lower())

    # --- updates and webhooks -------------------------------------------------------------------------

    async def get_updates(self, p: JSON) -> list[JSON]:
        world = self._world
        if world.webhook["url"]:
            raise ApiReject(409, "Conflict: can't use getUpdates method while webhook is active; "
                            "use deleteWebhook to delete the webhook first")  # fmt: skip
        if p.get("allowed_updates") is not None:  # Telegram remembers the last list it was given
            self._allowed_updates = frozenset(p["allowed_updates"]) or _DEFAULT_UPDATES
        offset = int(p.get("offset") or 0)
        limit = min(max(int(p.get("limit") or 100), 1), 100)
        # A newer getUpdates ends an older long poll with 409 Conflict, as Telegram does (a second bot on the
        # token; PTB abandons its own poll on stop, then calls again).
        self._poll_generation += 1
        generation = self._poll_generation
        world.notify()

        def ready() -> list[JSON] | None:
            if generation != self._poll_generation:
                raise PollTerminated
            if offset:  # confirms (drops) every update before `offset`
                world.pending_updates = [u for u in world.pending_updates if u["update_id"] >= offset]
            # Telegram never delivers update kinds outside allowed_updates: drop them.
            world.pending_updates = [u for u in world.pending_updates if _kind(u) in self._allowed_updates]
            if world.pending_updates or world.closing:
                return world.pending_updates[:limit]
            return None

        timeout = float(p.get("timeout") or 0)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while (updates := ready()) is None:
                    await world.next_change()
                return updates
        return []

    async def set_webhook(self, p: JSON) -> bool:
        url = str(p.get("url") or "")
        if url and not url.startswith("https://"):
            raise bad_request("bad webhook: An HTTPS URL must be provided for webhook")
        if p.get("drop_pending_updates"):
            self._world.pending_updates.clear()
        self._world.webhook = {"url": url, **{k: v for k, v in p.items() if k != "url"}}
        return True

    async def delete_webhook(self, p: JSON) -> bool:
        if p.get("drop_pending_updates"):
            self._world.pending_updates.clear()
        self._world.webhook = {"url": ""}
        return True

    async def get_webhook_info(self, p: JSON) -> JSON:
        hook = self._world.webhook
        info = {
            "url": hook["url"],
            "has_custom_certificate": False,
            "pending_update_count": len(self._world.pending_updates),
        }
        if hook["url"]:
            info["max_connections"] = hook.get("max_connections", 40)
        return info

    # --- bot identity ---------------------------------------------------------------------------------

    async def get_me(self, p: JSON) -> JSON:
        flags = (
            "can_read_all_group_messages",
            "supports_inline_queries",
            "can_connect_to_business",
            "has_main_web_app",
        )
        return {**self._world.bot_dict(), "can_join_groups": True, **dict.fromkeys(flags, False)}

    async def log_out(self, p: JSON) -> bool:
        return True

    async def close(self, p: JSON) -> bool:
        return True

    async def set_my_commands(self, p: JSON) -> bool:
        commands = p.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise bad_request("can't parse commands JSON object")
        pairs = []
        for c in commands:
            if not isinstance(c, dict) or not _COMMAND_NAME.fullmatch(str(c.get("command", "")).lower()):
                raise bad_request("BOT_COMMAND_INVALID")
            if not 1 <= len(str(c.get("description", "")).strip()) <= 256:
                raise bad_request("BOT_COMMAND_DESCRIPTION_INVALID")
            pairs.append((str(c["command"]).lower(), str(c["description"])))
        self._world.command_sets[_scope_key(p)] = pairs
        return True

    async def get_my_commands(self, p: JSON) -> list[JSON]:
        pairs = self._world.command_sets.get(_scope_key(p), [])
        return [{"command": c, "description": d} for c, d in pairs]

    async def delete_my_commands(self, p: JSON) -> bool:
        self._world.command_sets.pop(_scope_key(p), None)
        return True

    # --- messages -------------------------------------------------------------------------------------

    async def send_message(self, p: JSON) -> JSON:
        chat_id = self._sendable_chat(p)
        text, source, entities = message_text(p.get("text"), p.get("parse_mode"))
        keyboard, raw_markup = parse_markup(p.get("reply_markup"))
        _web_app_allowed(chat_id, keyboard)
        reply_to = self._reply_target(chat_id, p)
        self._flood_check(chat_id)
        version = Version(text, source, entities, keyboard, raw_markup)
        msg = self._world.add_message(chat_id, self._world.bot_id, version, reply_to)
        return self._world.message_dict(msg)

    async def send_photo(self, p: JSON) -> JSON:
        chat_id = self._sendable_chat(p)
        photo = p.get("photo")
        if isinstance(photo, str) and photo.startswith("attach://"):
            photo = p.get(photo.removeprefix("attach://"))
        if not isinstance(photo, bytes) or not photo:
            raise bad_request("there is no photo in the request")
        caption = p.get("caption")
        text, source, entities = message_text(caption, p.get("parse_mode")) if caption else ("", "", ())
        self._flood_check(chat_id)
        version = Version(text, source, entities, *parse_markup(p.get("reply_markup")))
        msg = self._world.add_message(chat_id, self._world.bot_id, version, self._reply_target(chat_id, p))
        msg.photo = photo
        return self._world.message_dict(msg)

    async def edit_message_text(self, p: JSON) -> JSON:
        msg = self._editable(p)
        text, source, entities = message_text(p.get("text"), p.get("parse_mode"))
        keyboard, raw_markup = parse_markup(p.get("reply_markup"), inline_only=True)
        _web_app_allowed(msg.chat_id, keyboard)
        return self._apply_edit(msg, Version(text, source, entities, keyboard, raw_markup), flood=True)

    async def edit_message_reply_markup(self, p: JSON) -> JSON:
        msg = self._editable(p)
        keyboard, raw_markup = parse_markup(p.get("reply_markup"), inline_only=True)
        _web_app_allowed(msg.chat_id, keyboard)
        now = msg.current
        return self._apply_edit(
            msg, Version(now.text, now.html, now.entities, keyboard, raw_markup), flood=False
        )

    async def delete_message(self, p: JSON) -> bool:
        chat_id = self._known_chat(p)
        msg = self._world.find_message(chat_id, _as_int(p.get("message_id")))
        if msg is None or msg.deleted:
            raise bad_request("message to delete not found")
        msg.deleted = True
        self._world.touch(msg)
        return True

    async def send_chat_action(self, p: JSON) -> bool:
        self._sendable_chat(p)
        if p.get("action") not in _CHAT_ACTIONS:
            raise bad_request("wrong parameter action in request")
        return True

    async def answer_callback_query(self, p: JSON) -> bool:
        query = self._world.pending_query(p.get("callback_query_id"))
        if query is None:
            raise bad_request(QUERY_TOO_OLD)
        text = p.get("text")
        if text is not None and len(str(text)) > MAX_ANSWER_TEXT:
            raise bad_request("MESSAGE_TOO_LONG")
        query.answered = True
        if not query.answer.done():
            query.answer.set_result(CallbackAnswer(str(text or ""), bool(p.get("show_alert")), p.get("url")))
        return True

    # --- helpers --------------------------------------------------------------------------------------

    def _known_chat(self, p: JSON) -> int:
        chat_id = _as_int(p.get("chat_id"))
        if chat_id in (None, ""):
            raise bad_request("chat_id is empty")
        if not self._world.has_chat(chat_id):
            raise bad_request("chat not found")
        return int(chat_id)  # a known chat's id: an int already

    def _sendable_chat(self, p: JSON) -> int:
        chat_id = self._known_chat(p)
        user = self._world.user_by_id(chat_id)
        if user is not None and user.blocked_bot:
            raise ApiReject(403, "Forbidden: bot was blocked by the user")
        if user is not None and not user.has_started_bot:
            raise ApiReject(403, "Forbidden: bot can't initiate conversation with a user")
        return chat_id

    def _reply_target(self, chat_id: int, p: JSON) -> Msg | None:
        params = p.get("reply_parameters") or {}
        if not isinstance(params, dict):
            raise bad_request("can't parse reply parameters JSON object")
        message_id = _as_int(params.get("message_id", p.get("reply_to_message_id")))
        if message_id is None:
            return None
        target = self._world.find_message(_as_int(params.get("chat_id", chat_id)), message_id)
        if target is None or target.deleted:
            if params.get("allow_sending_without_reply") or p.get("allow_sending_without_reply"):
                return None
            raise bad_request("message to be replied not found")
        return target

    def _editable(self, p: JSON) -> Msg:
        if p.get("inline_message_id") is not None:
            raise bad_request("the fake Telegram server does not model inline messages")
        chat_id = self._known_chat(p)
        if p.get("message_id") is None:
            raise bad_request("message identifier is not specified")
        msg = self._world.find_message(chat_id, _as_int(p.get("message_id")))
        if msg is None or msg.deleted:
            raise bad_request("message to edit not found")
        if not msg.from_bot:
            raise bad_request("message can't be edited")
        return msg

    def _apply_edit(self, msg: Msg, new: Version, *, flood: bool) -> JSON:
        if new.same_content(msg.current):
            raise bad_request(NOT_MODIFIED)
        if flood:
            self._flood_check(msg.chat_id)
        msg.versions.append(new)
        msg.edit_dates.append(int(time.time()))
        self._world.touch(msg)
        return self._world.message_dict(msg)

    def _flood_check(self, chat_id: int) -> None:
        retry_after = self._limiter.check(chat_id) if self._limiter else None
        if retry_after is not None:
            raise ApiReject(429, f"Too Many Requests: retry after {retry_after}", retry_after)


def _web_app_allowed(chat_id: int, keyboard: Keyboard) -> None:
    """Telegram refuses web_app buttons outside private chats (whose ids are the users' own, positive)."""
    if chat_id < 0 and has_web_app(keyboard):
        raise bad_request("BUTTON_TYPE_INVALID")


def _is_method_name(name: str) -> bool:
    return not name.startswith("_") and name != "lookup"


def _as_int(value: Any) -> Any:
    """Telegram accepts ids as JSON numbers or digit strings."""
    if isinstance(value, str) and value.removeprefix("-").isdigit():
        return int(value)
    return value


def _kind(update: JSON) -> str:
    return next(k for k in update if k != "update_id")


def _scope_key(p: JSON) -> tuple[str, str]:
    scope = p.get("scope") or {"type": DEFAULT_SCOPE}
    key = scope.get("type", DEFAULT_SCOPE) if set(scope) == {"type"} else repr(sorted(scope.items()))
    return key, str(p.get("language_code") or "")

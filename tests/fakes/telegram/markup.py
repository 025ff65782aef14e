"""Telegram's reply_markup rules: inline keyboards (callback_data, url, web_app buttons), ForceReply, keyboards.

Pure. Only callback_data, url and web_app buttons are modelled (web_app: an https URL; only in private
chats, which the API checks, see `has_web_app`); any other button kind is refused with a 400 that
says so, rather than being accepted and silently ignored.
"""

from __future__ import annotations

from typing import Any, Final
from urllib.parse import urlsplit

from .model import JSON, Button, Keyboard, bad_request

MAX_CALLBACK_DATA: Final = 64
"""Bytes of UTF-8."""
MAX_BUTTONS: Final = 100
MAX_PER_ROW: Final = 8
_ACTIONS: Final = (
    "url", "callback_data", "login_url", "switch_inline_query", "switch_inline_query_current_chat",
    "switch_inline_query_chosen_chat", "copy_text", "callback_game", "pay", "web_app",
)  # fmt: skip
_BAD_MARKUP: Final = "can't parse reply keyboard markup JSON object"


def parse_markup(raw: Any, *, inline_only: bool = False) -> tuple[Keyboard, JSON | None]:
    """Validate a reply_markup object; returns (inline keyboard rows, the raw object).

    `inline_only` is for edits, which accept nothing but an inline keyboard.

    Raises:
        ApiReject: 400 with Telegram's description.
    """
    if raw is None:
        return (), None
    if not isinstance(raw, dict):
        raise bad_request(_BAD_MARKUP)
    if "inline_keyboard" in raw:
        return _inline_keyboard(raw["inline_keyboard"]), raw
    if inline_only:
        raise bad_request("inline keyboard expected")
    if raw.get("force_reply") is True or "keyboard" in raw or raw.get("remove_keyboard") is True:
        return (), raw
    raise bad_request(_BAD_MARKUP)


def _inline_keyboard(rows: Any) -> Keyboard:
    if not isinstance(rows, list) or not all(isinstance(row, list) for row in rows):
        raise bad_request('field "inline_keyboard" of the InlineKeyboardMarkup must be an Array of Arrays')
    if sum(len(row) for row in rows) > MAX_BUTTONS or any(len(row) > MAX_PER_ROW for row in rows):
        raise bad_request("reply markup is too long")
    return tuple(tuple(_button(b) for b in row) for row in rows if row)


def _button(raw: Any) -> Button:
    if not isinstance(raw, dict):
        raise bad_request("can't parse inline keyboard button: InlineKeyboardButton must be an Object")
    if "text" not in raw:
        raise bad_request("can't parse inline keyboard button: Can't find field \"text\"")
    text = raw["text"]
    if not isinstance(text, str):
        raise bad_request('can\'t parse inline keyboard button: Field "text" must be of type String')
    if not text.strip():
        raise bad_request("BUTTON_TEXT_INVALID")
    # Telegram treats an empty callback_data as absent: the button then has no action at all.
    actions = [k for k in _ACTIONS if k in raw and raw[k] not in ("", None)]
    if not actions:
        raise bad_request(
            "can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
        )
    if len(actions) > 1:
        raise bad_request(f"can't parse inline keyboard button: only one of {actions} may be set")
    (action,) = actions
    if action == "callback_data":
        data = raw["callback_data"]
        if not isinstance(data, str) or len(data.encode("utf-8")) > MAX_CALLBACK_DATA:
            raise bad_request("BUTTON_DATA_INVALID")
        return Button(text, callback_data=data)
    if action == "url":
        return Button(text, url=_check_url(raw["url"]))
    if action == "web_app":
        info = raw["web_app"]
        url = info.get("url") if isinstance(info, dict) else None
        if not isinstance(url, str) or not url.lower().startswith("https://"):
            raise bad_request("BUTTON_URL_INVALID")  # Telegram: a Web App's URL must be HTTPS
        return Button(text, web_app=_check_url(url))
    raise bad_request(f"the fake Telegram server does not model {action!r} inline buttons")


def has_web_app(keyboard: Keyboard) -> bool:
    """Whether a keyboard holds a web_app button (Telegram allows them only in private chats)."""
    return any(b.web_app is not None for row in keyboard for b in row)


def _check_url(url: Any) -> str:
    if not isinstance(url, str):
        raise bad_request("BUTTON_URL_INVALID")
    parts = urlsplit(url if "://" in url else f"http://{url}")  # Telegram assumes http:// when omitted
    scheme = parts.scheme.lower()
    if scheme == "tg":
        return url
    if scheme not in ("http", "https"):
        raise bad_request(f"inline keyboard button URL '{url}' is invalid: Unsupported URL protocol")
    if "." not in (parts.hostname or ""):
        raise bad_request("BUTTON_URL_INVALID")
    return url

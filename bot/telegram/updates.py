"""What the bot reads of a tap's update, cut to that before PTB builds objects from it. Pure.

A tap's update (`callback_query`) echoes the whole message its button was on: the text, its entities, the
sender and every button. PTB builds each of them into an object (each attribute set through
`TelegramObject.__setattr__`): for a card with eight buttons 1.9 M instructions, a tenth of what a whole
question costs the bot (bench a), and two taps a question. The bot never reads that echo: a tap on a card, a
/tools list, an approval or a **Run again** is handled from its data and its sender (the token finds the card
and its chat), so its update carries no message, as a tap on a message sent in inline mode does; a tap of
another kind (the /agents list, edited where it was tapped; data that is not ours) keeps its message's identity
(id, chat, date, thread), without the text, the entities and the buttons. Used on getUpdates' answers
(`UpdatesRequest`) and on the webhook's bodies (`bot.compose` passes `lean` to `bot.web.webhook`).
"""

from __future__ import annotations

from typing import Any, Final

from bot.telegram.callback_data import FOUND_BY_TOKEN, kind_of
from bot.telegram.request import AiohttpRequest

__all__ = ["KEPT_OF_MESSAGE", "UpdatesRequest", "lean"]

KEPT_OF_MESSAGE: Final = frozenset(
    {"message_id", "chat", "date", "message_thread_id", "business_connection_id"}
)
"""What a tap not found by its token keeps of its message: where the message is, not what it says."""


def lean(update: dict[str, Any]) -> None:
    """Cut, in place, what the bot never reads out of one update as Telegram sent it (see the module)."""
    query = update.get("callback_query")
    if not isinstance(query, dict):
        return
    message = query.get("message")
    if not isinstance(message, dict):
        return
    if kind_of(query.get("data")) in FOUND_BY_TOKEN:
        del query["message"]
    else:
        query["message"] = {key: value for key, value in message.items() if key in KEPT_OF_MESSAGE}


class UpdatesRequest(AiohttpRequest):
    """The getUpdates client: `AiohttpRequest` whose answers' updates are `lean` before PTB builds them, through
    PTB's public `BaseRequest.parse_json_payload` (documented for changing how answers are parsed)."""

    __slots__ = ()

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        decoded = AiohttpRequest.parse_json_payload(payload)
        updates = decoded.get("result")
        if isinstance(updates, list):
            for update in updates:
                if isinstance(update, dict):
                    lean(update)
        return decoded

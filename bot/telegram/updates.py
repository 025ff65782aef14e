"""What the bot reads of a tap's update, cut to that before PTB builds objects from it. Pure.

A tap's update (`callback_query`) echoes the whole message its button was on: the text, its entities, the
sender and every button. PTB builds each of them into an object (each attribute set through
`TelegramObject.__setattr__`): for a card with eight buttons 1.9 M instructions, a tenth of what a whole
question costs the bot (bench a), and two taps a question. The bot never reads that echo: an allowed person's tap
on a card, a /tools list or a **Run again** is handled from its data and its sender (the token finds the card and
its chat), so its update carries no message, as a tap on a message sent in inline mode does. Any other tap keeps
its message's identity (id, chat, date, thread), without the text, the entities and the buttons: the /agents list
is edited where it was tapped, an approval card is redrawn where it was tapped (`FOUND_BY_TOKEN`), and a
stranger's refusal is rationed per chat. Used on
getUpdates' answers (`UpdatesRequest`) and on the webhook's bodies (`bot.compose` passes `Lean` to
`bot.web.webhook`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from bot.telegram.access import Access
from bot.telegram.callback_data import FOUND_BY_TOKEN, kind_of
from bot.telegram.request import AiohttpRequest

__all__ = ["KEPT_OF_MESSAGE", "Lean", "UpdatesRequest", "lean"]

KEPT_OF_MESSAGE: Final = frozenset(
    {"message_id", "chat", "date", "message_thread_id", "business_connection_id"}
)
"""What a tap not found by its token keeps of its message: where the message is, not what it says."""


def lean(update: dict[str, Any], access: Access) -> None:
    """Cut, in place, what the bot never reads out of one update as Telegram sent it (see the module); `access`
    tells an allowed person's tap from a stranger's."""
    query = update.get("callback_query")
    if not isinstance(query, dict):
        return
    message = query.get("message")
    if not isinstance(message, dict):
        return
    sender = query.get("from")
    person = sender.get("id") if isinstance(sender, dict) else None
    if kind_of(query.get("data")) in FOUND_BY_TOKEN and access.allows(
        person if isinstance(person, int) else None
    ):
        del query["message"]
    else:
        query["message"] = {key: value for key, value in message.items() if key in KEPT_OF_MESSAGE}


@dataclass(frozen=True, slots=True)
class Lean:
    """`lean` for one allow-list, as the webhook takes it: `Lean(access)(update)`."""

    access: Access

    def __call__(self, update: dict[str, Any]) -> None:
        lean(update, self.access)


class UpdatesRequest(AiohttpRequest):
    """The getUpdates client: `AiohttpRequest` whose answers' updates are `lean` before PTB builds them, through
    PTB's public `BaseRequest.parse_json_payload` (documented for changing how answers are parsed). Without
    `access` nobody counts as allowed: every tap keeps its message's identity."""

    __slots__ = ("_access",)

    def __init__(self, *, access: Access | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._access = access or Access()

    # PTB declares this hook static but calls it on the request (`self.parse_json_payload`, both call sites of
    # BaseRequest), so a method reading this request's allow-list is what it runs.
    def parse_json_payload(self, payload: bytes) -> dict[str, Any]:  # type: ignore[override]
        decoded = super().parse_json_payload(payload)
        updates = decoded.get("result")
        if isinstance(updates, list):
            for update in updates:
                if isinstance(update, dict):
                    lean(update, self._access)
        return decoded

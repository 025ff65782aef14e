"""The Telegram surface: elicitation cards, taps and replies, settled cards. Does I/O (Bot API calls).

Implements `bot.core.values.Surface`. Handlers decode an update and call `on_button` / `on_text`; the
decision is made by `mapping.form` (pure), then the card is re-rendered by `bot.telegram.render` and edited.
An answered card waits a moment for its call's result before it is settled (`bot.telegram.fold`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from telegram import Update, User
from telegram.constants import ParseMode
from telegram.error import BadRequest, Forbidden, TelegramError

from bot.core import Origin, Outcome, Prompt
from bot.core.permission import ANSWERED_BY
from bot.telegram.access import Access
from bot.telegram.bot import CardBot
from bot.telegram.callback_data import Action, Button, unpack
from bot.telegram.flood import card_first, kept_for
from bot.telegram.fold import FOLD_GRACE_S, Folds
from bot.telegram.render import (
    LONG_TEXT_CLIP,
    NAME_CLIP,
    Card,
    Screen,
    consented_screen,
    esc,
    prompt_screen,
    settled_screen,
)
from bot.telegram.taps import TapAnswer, decode_tap
from mapping import (
    DECLINED,
    Answer,
    Ask,
    Finished,
    FormInput,
    NumberField,
    Review,
    Submit,
    TextField,
    TextInput,
    apply,
    check_url,
    display_value,
    restore,
    snapshot,
    start,
)

logger = logging.getLogger(__name__)

EXPIRED = "This prompt has expired."
NOT_ALLOWED = "You may not use this bot."
ANSWER_SENT = "✅ Answer sent."


class TelegramSurface:
    """All cards of the bot, by prompt token."""

    def __init__(
        self, bot: CardBot, access: Access, form_link: Callable[[Prompt], str | None] | None = None
    ) -> None:
        self.bot = bot
        self.access = access
        self.cards: dict[str, Card] = {}
        self._by_message: dict[tuple[int, int], str] = {}
        self._messages: dict[str, list[tuple[int, int]]] = {}
        """Every message a card was placed at, by prompt token: `_by_message`'s keys to drop when it is forgotten."""
        self._busy: dict[str, anyio.Lock] = {}
        self.form_link = form_link
        """A form's Mini App page, when it has one (with `[miniapp]` and a public URL: `bot.web.miniapp`)."""
        self._folds = Folds(self._settle, self.edit)
        """Answered cards waiting for their call's result."""

    # -- sending ---------------------------------------------------------------------------------------

    async def send(
        self, chat_id: int, screen: Screen, *, reply_to: int | None = None, placeholder: str | None = None
    ) -> int:
        """Send a screen; the new message's id. `placeholder`: the message asks for a reply (ForceReply)."""
        return await self.bot.send_html(chat_id, screen.text, screen.keyboard, reply_to, placeholder)

    async def send_photo(self, chat_id: int, png: bytes, screen: Screen) -> int:
        """Send a picture with a short caption (`screen.text`, HTML); the new message's id."""
        sent = await self.bot.send_photo(chat_id, png, caption=screen.text, parse_mode=ParseMode.HTML)
        return sent.message_id

    async def edit(self, chat_id: int, message_id: int, screen: Screen) -> int | None:
        """Edit a message; "not modified" is fine (a double tap). A message that is gone (deleted, too old to
        edit) is sent again, and that new message's id is returned so the caller tracks it from then on."""
        try:
            await self.bot.edit_html(chat_id, message_id, screen.text, screen.keyboard)
        except BadRequest as exc:
            text = exc.message.lower()
            if "message is not modified" in text:
                return None
            if "message to edit not found" in text or "message can't be edited" in text:
                logger.info("card %s/%s is gone; sending it again", chat_id, message_id)
                return await self.send(chat_id, screen)
            raise
        return None

    # -- Surface ---------------------------------------------------------------------------------------

    async def show_prompt(self, prompt: Prompt) -> None:
        card = Card(prompt=prompt, chat_id=self._chat_for(prompt))
        if prompt.form is not None:
            card.state = start(prompt.form)
            if self.form_link is not None and card.chat_id == prompt.origin.chat_id:
                card.form_url = self.form_link(prompt)
        self.cards[prompt.token] = card
        self._busy[prompt.token] = lock = anyio.Lock(fast_acquire=True)
        # Locked until placed: a quick tap can arrive before the send's reply (429 retries, a busy loop); its
        # redraw must wait for the message id, or the card stays drawn as it was while its state moved on.
        await self.fold_result(prompt.origin, prompt.server, None)  # the question before: "Answer sent" first
        async with lock:
            try:
                with card_first():
                    message_id = await self.send(card.chat_id, prompt_screen(card))
            except Forbidden:
                await self._unreachable(prompt)
                return
            except TelegramError:
                logger.exception("could not show prompt %s", prompt.request.id)
                self._answer(prompt, Answer(prompt.request.id, ok=False, reason=Outcome.UNDELIVERABLE.value))
                return
            await self._placed(card, message_id)
        if card.chat_id != prompt.origin.chat_id:
            await self._note_private(prompt)

    def restore_prompt(
        self, prompt: Prompt, chat_id: int, message_id: int, progress: Mapping[str, Any]
    ) -> None:
        """Take back the card of a prompt kept from before a restart, as it stood (`_progress`): its buttons
        (same token, same version) and replies to it work again. Sends nothing."""
        card = Card(prompt=prompt, chat_id=chat_id)
        if prompt.form is not None:
            shot = progress.get("form")
            card.state = restore(prompt.form, shot) if isinstance(shot, Mapping) else start(prompt.form)
        version, page = progress.get("version"), progress.get("page")
        card.version = version if isinstance(version, int) else 0
        card.page = page if isinstance(page, int) else 0
        self.cards[prompt.token] = card
        self._busy[prompt.token] = anyio.Lock(fast_acquire=True)
        self._place(card, message_id)

    async def settle_message(self, chat_id: int, message_id: int, screen: Screen) -> None:
        """Edit a card this process never showed (kept from before a restart) to its final screen."""
        try:
            await self.edit(chat_id, message_id, screen)
        except TelegramError:
            logger.exception("could not settle the kept card %s/%s", chat_id, message_id)

    async def settle_prompt(self, prompt: Prompt, outcome: Outcome) -> None:
        card = self.cards.get(prompt.token)
        if card is None:
            return
        async with self._lock(card):
            if (
                outcome is Outcome.ANSWERED
                and prompt.request.url is None
                and prompt.permission is None  # no call's result follows an agent's permission prompt
                and card.message_id is not None
            ):
                self._park(card)
                return
            await self._settle(card, outcome)

    async def fold_result(self, origin: Origin, server: str, result: str | None) -> bool:
        """See `Folds.fold_result`."""
        return await self._folds.fold_result(origin, server, result)

    def awaits_result(self, origin: Origin, server: str) -> bool:
        """See `Folds.awaits_result`."""
        return self._folds.awaits_result(origin, server)

    def _park(self, card: Card) -> None:
        """Settle an answered card after `FOLD_GRACE_S`, unless its call's result comes first."""
        self._forget(card)
        self._folds.park(card, FOLD_GRACE_S)

    def drop(self, lost: Callable[[int], bool]) -> int:
        """Forget the cards of the people `lost` says are another instance's now, as they stand (their taps
        reach the new owner, which placed them again); returns how many."""
        cards = [card for card in self.cards.values() if lost(card.prompt.origin.user_id)]
        for card in cards:
            self._forget(card)
        self._folds.drop(lost)
        return len(cards)

    async def settle_parked(self) -> None:
        """Settle every answered card still waiting for a result, now (the bot is stopping)."""
        await self._folds.settle_all()

    async def _settle(self, card: Card, outcome: Outcome) -> None:
        prompt = card.prompt
        if outcome is Outcome.ANSWERED and prompt.request.url is not None:
            card.version += 1
            screen = consented_screen(card)
            if not (prompt.awaits_completion or prompt.elicitation_id):
                self._forget(card)  # no completion will ever come: the link button is the end state
        else:
            screen = settled_screen(card, outcome)
            self._forget(card)
        if card.message_id is not None:
            with kept_for(prompt.origin.user_id):  # the edit that settles a card is in the outbox until sent
                resent = await self.edit(card.chat_id, card.message_id, screen)
            if resent is not None and prompt.token in self.cards:
                self._place(card, resent)

    async def report_unsupported(self, origin: Origin, server: str, message: str, reason: str) -> None:
        text = (
            f"⚠️ <b>{esc(server, NAME_CLIP)}</b> asked something this bot cannot show, so it was refused:\n"
            f"{esc(message, LONG_TEXT_CLIP)}\n\n<i>{esc(reason, LONG_TEXT_CLIP)}</i>"
        )
        try:
            await self.send(origin.chat_id, Screen(text))
        except TelegramError:
            logger.exception("could not report an unsupported request")

    async def notify(self, origin: Origin, text: str) -> None:
        try:
            await self.send(origin.chat_id, Screen(esc(text, LONG_TEXT_CLIP)))
        except TelegramError:
            logger.exception("could not tell a person about their call")

    # -- taps and replies ------------------------------------------------------------------------------

    async def on_button(self, user: User, button: Button) -> TapAnswer:
        """A tap on a card button: decide, re-render, and say what the person should see."""
        if not self.access.allows(user.id):
            return TapAnswer(NOT_ALLOWED, alert=True)
        card = self.cards.get(button.token)
        if card is None:
            return TapAnswer(EXPIRED, alert=True)
        async with self._lock(card):
            return await self._tap(card, user, button)

    async def _tap(self, card: Card, user: User, button: Button) -> TapAnswer:
        prompt = card.prompt
        if user.id != prompt.origin.user_id:
            return TapAnswer("This question is for the person who started the call.", alert=True)
        if button.version != card.version:
            return TapAnswer("That button is outdated; use the buttons on the card as it is now.", alert=True)
        if button.action is Action.FINISHED:
            if prompt.complete_by_hand():
                return TapAnswer("Thanks, retrying the call.")
            return TapAnswer(EXPIRED, alert=True)
        if button.action is Action.CANCEL and prompt.sign_in and not prompt.pending:
            # A consented sign-in card: the person gives up waiting for the browser (`bot.servers.oauth`).
            return TapAnswer("Cancelled.") if prompt.complete_by_hand() else TapAnswer(EXPIRED, alert=True)
        if not prompt.pending:
            return TapAnswer(EXPIRED, alert=True)
        if button.action is Action.DECLINE:
            self._answer(prompt, Answer(prompt.request.id, ok=False, reason=DECLINED))
            return TapAnswer("Declined.")
        if button.action is Action.CANCEL:
            self._answer(prompt, Answer(prompt.request.id, ok=False, reason="cancelled"))
            return TapAnswer("Cancelled.")
        if button.action is Action.CONSENT and check_url(prompt.request.url or "").consentable:
            self._answer(prompt, Answer(prompt.request.id, ok=True))
            return TapAnswer()
        if button.action is Action.PAGE and button.arg is not None:
            card.page = button.arg
            await self._redraw(card)
            return TapAnswer()
        form_input = decode_tap(card, button)
        if form_input is None:
            return TapAnswer("That button does not fit this question.", alert=True)
        card.answered_by = user.first_name
        await self._step(card, form_input)
        return TapAnswer(None if prompt.pending else ANSWER_SENT)

    def answer_from_page(self, prompt: Prompt, answer: Answer) -> bool:
        """An answer from the form's Mini App page (already read by `mapping`); False when the prompt had
        ended. Its card is settled like a chat answer, listing the values."""
        card = self.cards.get(prompt.token)
        if card is not None and answer.ok and card.state is not None and answer.data is not None:
            card.answered_with = [
                f"{f.title}: {display_value(f, answer.data.get(f.name))}"
                for f in card.state.spec.fields
                if f.name in answer.data
            ]
        return prompt.answer(answer)

    def answers_a_card(self, update: Update) -> bool:
        """Whether `update` is a tap on, or a reply to, the card of a question still pending in this process
        (a drain takes these: a 2025-era question cannot wait for the next process)."""
        card = None
        if update.callback_query is not None:
            data = update.callback_query.data
            button = unpack(data if isinstance(data, str) else None)
            card = None if button is None else self.cards.get(button.token)
        elif update.message is not None and update.message.reply_to_message is not None:
            reply = update.message.reply_to_message
            card = self.card_for_reply(reply.chat.id, reply.message_id)
        return card is not None and card.prompt.pending

    def card_for_reply(self, chat_id: int, message_id: int) -> Card | None:
        token = self._by_message.get((chat_id, message_id))
        return self.cards.get(token) if token else None

    def text_cards(self, chat_id: int, user_id: int | None = None) -> list[Card]:
        """Pending cards in a chat whose current question is answered by typing."""
        return [
            c
            for c in self.cards.values()
            if c.chat_id == chat_id
            and c.prompt.pending
            and (user_id is None or c.prompt.origin.user_id == user_id)
            and c.state is not None
            and isinstance(c.state.step, Ask)
            and isinstance(c.state.step.field, TextField | NumberField)
        ]

    def waiting_for(self, chat_id: int, user_id: int) -> bool:
        """Whether a card in this chat waits for this person (whatever its question: buttons or text)."""
        return any(
            c.chat_id == chat_id and c.prompt.pending and c.prompt.origin.user_id == user_id
            for c in self.cards.values()
        )

    async def on_text(self, card: Card, user: User, text: str, message_id: int) -> None:
        """A typed answer for `card` (already matched by reply or as the only text question); one from a
        person not allowed is dropped unanswered."""
        if not self.access.allows(user.id):
            logger.warning("a typed answer from user %s, who is not allowed, was dropped", user.id)
            return
        async with self._lock(card):
            await self._typed(card, user, text, message_id)

    async def _typed(self, card: Card, user: User, text: str, message_id: int) -> None:
        if user.id != card.prompt.origin.user_id:
            await self.send(
                card.chat_id,
                Screen("Only the person who started the call can answer that."),
                reply_to=message_id,
            )
            return
        if not card.prompt.pending or card.state is None:
            await self.send(card.chat_id, Screen(EXPIRED), reply_to=message_id)
            return
        if isinstance(card.state.step, Review):
            hint = "Use the buttons on the card: ✅ Submit, ✏️ to change a field, or Decline / Cancel."
            await self.send(card.chat_id, Screen(hint), reply_to=message_id)
            return
        # The card moves below the reply, so the refusal ("⚠️ must be ...") and the question stay in view.
        card.answered_by = user.first_name
        await self._step(card, TextInput(text), moved=True)

    # -- internals -------------------------------------------------------------------------------------

    def _lock(self, card: Card) -> anyio.Lock:
        """One card's taps, replies and settling, one at a time: updates are handled concurrently, and a
        redraw that moves the card must be done before the next one reads where the card is."""
        return self._busy.get(card.prompt.token) or anyio.Lock(
            fast_acquire=True
        )  # a forgotten card needs no guarding

    def _answer(self, prompt: Prompt, answer: Answer) -> None:
        prompt.answer(answer)

    def _chat_for(self, prompt: Prompt) -> int:
        # A link meant for one person must not be tappable by another: URL cards go to a private chat.
        if prompt.request.url is not None and not prompt.origin.is_private:
            return prompt.origin.user_id
        return prompt.origin.chat_id

    def _place(self, card: Card, message_id: int) -> None:
        card.message_id = message_id
        key = (card.chat_id, message_id)
        self._by_message[key] = card.prompt.token
        self._messages.setdefault(card.prompt.token, []).append(key)

    async def _placed(self, card: Card, message_id: int) -> None:
        """`_place`, and tell the prompt's keeper where its card now stands."""
        self._place(card, message_id)
        keeper = card.prompt.keeper
        if keeper is not None:
            with anyio.CancelScope(shield=True):
                await keeper.placed(card.prompt, card.chat_id, message_id)

    async def _keep_progress(self, card: Card) -> None:
        """Record how far the card's form got (before the card is drawn so), for a restart to restore."""
        keeper = card.prompt.keeper
        if keeper is None:
            return
        progress = {
            "version": card.version,
            "page": card.page,
            "form": None if card.state is None else snapshot(card.state),
        }
        with anyio.CancelScope(shield=True):
            await keeper.progress(card.prompt, progress)

    def _forget(self, card: Card) -> None:
        token = card.prompt.token
        self.cards.pop(token, None)
        self._busy.pop(token, None)
        for key in self._messages.pop(token, ()):
            if self._by_message.get(key) == token:
                del self._by_message[key]

    async def _unreachable(self, prompt: Prompt) -> None:
        """The person never opened a private chat with the bot: tell them where the call started."""
        self.cards.pop(prompt.token, None)
        self._busy.pop(prompt.token, None)
        text = (
            f"🔐 <b>{esc(prompt.server, NAME_CLIP)}</b> needs you to open a link, which I only send in a private chat. "
            "Open a private chat with me, press Start, then run the command again."
        )
        try:
            await self.send(prompt.origin.chat_id, Screen(text))
        except TelegramError:
            logger.exception("could not tell the user about an unreachable private chat")
        self._answer(prompt, Answer(prompt.request.id, ok=False, reason=Outcome.UNDELIVERABLE.value))

    async def _note_private(self, prompt: Prompt) -> None:
        text = (
            f"🔐 <b>{esc(prompt.server, NAME_CLIP)}</b> asked for a link; I sent it to you in a private chat."
        )
        if prompt.sign_in:
            text = f"🔑 I sent you a sign-in link for <b>{esc(prompt.server, NAME_CLIP)}</b> in private."
        try:
            await self.send(prompt.origin.chat_id, Screen(text))
        except TelegramError:
            logger.exception("could not post the private-chat note")

    async def _step(self, card: Card, form_input: FormInput, *, moved: bool = False) -> None:
        assert card.state is not None
        before = getattr(card.state.step, "field", None)
        card.state = apply(card.state, form_input)
        if card.prompt.permission is not None and isinstance(card.state.step, Review):
            card.state = apply(card.state, Submit())  # a permission prompt's one choice is its answer
        step = card.state.step
        if isinstance(step, Finished):
            content = dict(step.content)
            if card.prompt.permission is not None and card.answered_by:
                content[ANSWERED_BY] = card.answered_by  # an agent's permission prompt says who decided
            card.answered_with = [
                f"{f.title}: {display_value(f, content.get(f.name))}"
                for f in card.state.spec.fields
                if f.name in content
            ]
            self._answer(card.prompt, Answer(card.prompt.request.id, ok=True, data=content))
            return
        if getattr(step, "field", None) is not before:
            card.page = 0  # a new question starts on its first page
        await self._redraw(card, moved=moved)

    async def _redraw(self, card: Card, *, moved: bool = False) -> None:
        card.version += 1
        screen = prompt_screen(card)
        if card.message_id is None:
            return
        await self._keep_progress(card)
        if moved:
            # After a typed answer the card would sit above the reply: send it again below and retire the old one.
            old = card.message_id
            with card_first():  # the next question: its person is waiting for it
                await self._placed(card, await self.send(card.chat_id, screen))
            await self.retire(card.chat_id, old)
            return
        resent = await self.edit(card.chat_id, card.message_id, screen)
        if resent is not None:
            await self._placed(card, resent)

    async def retire(self, chat_id: int, message_id: int) -> None:
        """Delete a message that moved below (or, when it cannot be deleted, say so on it)."""
        try:
            await self.bot.delete(chat_id, message_id)
        except TelegramError:
            try:
                await self.edit(chat_id, message_id, Screen("↓ continued below"))
            except TelegramError:
                logger.info("could not retire card message %s/%s", chat_id, message_id)

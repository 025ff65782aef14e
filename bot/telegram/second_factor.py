"""A second factor for approvals in Telegram: `/2fa` enrolment in a private chat, and the one-time code an
approval on a `second_factor = "totp"` rule asks for. Does I/O.

Enrolment: `/2fa` sends a QR code (an `otpauth://` address any authenticator app reads) and the secret to type
in; the enrolment counts once the person sends a code the app shows, and then they get their recovery codes,
once. Moving to a new phone is `/2fa new CODE` with a code from the current one (or a recovery code): a stolen
Telegram session alone cannot enrol its own authenticator.

An approval: Approve on such a request's card counts nothing by itself (`tally` refuses a tap without a code);
the approver is asked in their private chat for the current code, and the reply, checked by the store
(`bot.store.factors`: once per time step, locked after repeated wrong codes), casts the vote with its factor.
Which request a code is for (the last Approve tapped, its content hash, for `PROMPT_S`) is kept in the store, so
a code sent after a restart, or to another process of the fleet, still counts; a request whose content changed
since is not approved by it. A message is a code only when it replies to the code prompt, or when no other
question of the person waits for a typed answer in the chat: a six-digit answer to a form goes to the form.
"""

from __future__ import annotations

import datetime as dt
import io
import logging
import re
from typing import Final

import segno
from telegram import User
from telegram.error import TelegramError

from bot.approvals import ApprovalService
from bot.core.approvals import Factor, Vote, short_hash
from bot.core.totp import MAX_FAILURES, provisioning_uri
from bot.store.errors import StoreUnavailable
from bot.store.factors import CodeCheck, CodePrompt, CodeStatus, FactorStore
from bot.telegram.callback_data import Button
from bot.telegram.render import NAME_CLIP, Screen, esc
from bot.telegram.surface import TelegramSurface
from bot.telegram.taps import TapAnswer

__all__ = ["CODE", "ISSUER", "PROMPT_S", "SecondFactors"]

logger = logging.getLogger(__name__)

ISSUER: Final = "toolnexus-bot"
"""The issuer an authenticator app shows beside the account."""
CODE: Final = re.compile(r"\s*(\d{3}\s?\d{3}|[a-z0-9]{4}(-?[a-z0-9]{4}){3})\s*", re.IGNORECASE)
"""A message that is a code: six digits, or a recovery code."""
HOW: Final = "send /2fa to me in a private chat to set up your authenticator app (once)"
UNAVAILABLE: Final = "The database is unavailable; try again in a moment."
PROMPT_S: Final = 600.0
"""How long a code prompt waits for its code: after that, tap Approve again."""
PLACEHOLDER: Final = "6-digit code"
"""The hint in the input field of a reply to the code prompt."""
GONE: Final = "That request is no longer waiting for approval."
CHANGED: Final = (
    "⚠️ The request changed since you tapped Approve (or ended): your code was not used. Look at its card "
    "again and tap Approve if you still agree."
)


class SecondFactors:
    """Enrolment and codes of the approvers; `store` keeps the secrets and the code prompts, `service` counts
    the votes."""

    def __init__(self, store: FactorStore, service: ApprovalService, surface: TelegramSurface) -> None:
        self.store = store
        self.service = service
        self.surface = surface

    # -- an approval -----------------------------------------------------------------------------------

    async def ask(self, user: User, button: Button, card: tuple[int, int] | None) -> TapAnswer:
        """Approve was tapped on a request that needs a code: ask the approver for it privately (or tell them
        how to enrol first)."""
        try:
            enrolled = await self.store.enrolled(user.id)
        except StoreUnavailable:
            return TapAnswer(UNAVAILABLE, alert=True)
        if not enrolled:
            await self._tell(
                user.id, f"🔐 Approving this request needs a code from an authenticator app: {HOW}."
            )
            return TapAnswer(f"This approval needs a code from an authenticator app: {HOW}.", alert=True)
        try:
            record = await self.service.book.get(button.token)
        except StoreUnavailable:
            return TapAnswer(UNAVAILABLE, alert=True)
        if record is None:
            return TapAnswer(GONE, alert=True)
        prompt = CodePrompt(
            button.token, button.version, record.state.content_hash, card, self.store.clock() + PROMPT_S
        )
        try:
            await self.store.ask(user.id, prompt)
        except StoreUnavailable:
            return TapAnswer(UNAVAILABLE, alert=True)
        ask = record.ask
        what = (
            f"<b>{esc(ask.tool, NAME_CLIP)}</b> on <b>{esc(ask.server, NAME_CLIP)}</b> for "
            f"{esc(ask.requester, NAME_CLIP)} (content <code>{short_hash(record.state.content_hash)}</code>)"
        )
        try:
            sent = await self.surface.send(
                user.id,
                Screen(
                    f"🔐 To approve {what}, send me the 6-digit code your authenticator app shows now (or one "
                    f"of your recovery codes) as a reply to this message, within {int(PROMPT_S // 60)} minutes."
                ),
                placeholder=PLACEHOLDER,
            )
        except TelegramError as exc:
            logger.info("could not write to approver %s privately: %s", user.id, exc)
            await self._forget(user.id, button.token)
            return TapAnswer(
                "This approval needs a code: open a private chat with me first (Start).", alert=True
            )
        try:
            await self.store.asked_in(user.id, button.token, sent)
        except StoreUnavailable:
            logger.info(
                "where the code prompt of %s went was not kept (the database is unavailable)", user.id
            )
        return TapAnswer(
            "This approval needs a code from your authenticator app: see our private chat.", alert=True
        )

    async def _forget(self, user_id: int, approval_id: str) -> None:
        try:
            await self.store.answered(user_id, approval_id)
        except StoreUnavailable:
            logger.info("a code prompt of %s that was not sent stays until it ends", user_id)

    # -- codes sent in the private chat ----------------------------------------------------------------

    async def on_code(
        self, user: User, text: str, replied_to: int | None = None, others_waiting: bool = False
    ) -> str | None:
        """A code the person sent privately: it finishes an enrolment, or approves the request they were
        asked about; the reply. `replied_to`: the message it replies to; `others_waiting`: another question of
        theirs in the chat waits for a typed answer, which then gets it unless it replies to the code prompt.
        None: the message is not a code for us (the other handlers see it)."""
        if not CODE.fullmatch(text):
            return None
        try:
            prompt = await self.store.asked(user.id)
            for_prompt = prompt is not None and replied_to is not None and replied_to == prompt.message_id
            if others_waiting and not for_prompt:
                return None
            if not for_prompt and await self.store.enrolling(user.id):
                checked, recovery = await self.store.confirm(user.id, text)
                if checked.ok:
                    return _enrolled(recovery)
                return _refused(checked)
            if prompt is None:
                return None
            if await self._changed(prompt):
                await self.store.answered(user.id, prompt.approval_id)
                return CHANGED
            checked = await self.store.check(user.id, text)
            if not checked.ok or checked.factor is None:
                return _refused(checked)
            if not await self.store.answered(user.id, prompt.approval_id):
                return None  # another process took this code's prompt first, and answers it
        except StoreUnavailable:
            return UNAVAILABLE
        cast = await self.service.vote(
            prompt.approval_id,
            user.id,
            user.first_name,
            Vote.APPROVE,
            prompt.generation,
            prompt.card,
            factor=checked.factor,
        )
        left = (
            f" ({checked.recovery_left} recovery codes left: /2fa new with a code makes new ones)"
            if checked.factor is Factor.RECOVERY
            else ""
        )
        return ("🚫 " if cast.refused else "✅ ") + esc(cast.text) + left

    async def _changed(self, prompt: CodePrompt) -> bool:
        """Whether the request ended or its content is no longer what Approve was tapped on."""
        record = await self.service.book.get(prompt.approval_id)
        return record is None or record.state.content_hash != prompt.content_hash

    # -- /2fa ------------------------------------------------------------------------------------------

    async def enrol(self, user: User, args: list[str]) -> None:
        """/2fa: start an enrolment (QR code and secret), or say it is on; `/2fa new CODE` moves it."""
        try:
            if await self.store.enrolled(user.id):
                if len(args) != 2 or args[0] != "new":
                    await self._tell(
                        user.id,
                        "🔐 Your authenticator app is set up for approvals. To move it to a new phone (or make "
                        "new recovery codes): /2fa new CODE, with a code from the current app or a recovery code.",
                    )
                    return
                checked = await self.store.check(user.id, args[1])
                if not checked.ok:
                    await self._tell(user.id, _refused(checked))
                    return
            secret = await self.store.begin(user.id)
        except StoreUnavailable:
            await self._tell(user.id, UNAVAILABLE)
            return
        uri = provisioning_uri(secret, f"{user.first_name} ({user.id})", ISSUER)
        png = io.BytesIO()
        segno.make(uri, error="m").save(png, kind="png", scale=6, border=4)
        try:
            await self.surface.send_photo(
                user.id, png.getvalue(), Screen("🔐 Scan this with your authenticator app.")
            )
        except TelegramError as exc:
            logger.info("the enrolment QR code could not be sent: %s", exc)
        await self._tell(
            user.id,
            "Or type this secret into the app (time-based, 6 digits, 30 s):\n"
            f"<code>{secret}</code>\n\nThen send me the code the app shows, to finish. Your earlier app (if "
            "any) keeps working until then.",
        )

    async def _tell(self, user_id: int, text: str) -> bool:
        try:
            await self.surface.send(user_id, Screen(text))
        except TelegramError as exc:
            logger.info("could not write to approver %s privately: %s", user_id, exc)
            return False
        return True


def _enrolled(recovery: list[str]) -> str:
    codes = "\n".join(f"<code>{code}</code>" for code in recovery)
    return (
        "✅ Your authenticator app is set up: approvals that need a code will ask you for one here.\n\n"
        "Recovery codes: each works once in place of a code (if you lose your phone). They are shown only "
        f"now; keep them somewhere safe:\n{codes}"
    )


def _refused(checked: CodeCheck) -> str:
    if checked.status is CodeStatus.LOCKED:
        until = dt.datetime.fromtimestamp(checked.until, dt.UTC).strftime("%H:%M:%S UTC")
        return f"⛔ Too many wrong codes: no code is accepted until {until}."
    if checked.status is CodeStatus.NOT_ENROLLED:
        return f"🔐 You have no authenticator app set up: {HOW}."
    if checked.status is CodeStatus.USED:
        return f"❌ That code was used already; wait for the next one ({checked.left} of {MAX_FAILURES} tries left)."
    return (
        f"❌ That code is not right ({checked.left} of {MAX_FAILURES} tries left before a lock). Is the "
        "phone's clock right?"
    )

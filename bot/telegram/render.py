"""Cards as Telegram shows them: (prompt, form state) -> `Screen(text, keyboard)`. Builds values, awaits nothing.

Every server string is escaped (HTML parse mode), every text stays inside Telegram's 4096 characters,
every keyboard inside 100 buttons and 64-byte callback data.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Final

from telegram.constants import MessageLimit

from bot.core import MESSAGE_CLIP, OUTCOME_TEXT, Outcome, Progress, Prompt, clip
from bot.telegram.callback_data import Action, Button, Kind
from bot.telegram.permission_cards import permission_lines
from mapping import (
    Ask,
    BoolField,
    ChoiceField,
    FormState,
    MultiChoiceField,
    Review,
    describe,
    display_value,
)
from mapping.form import walk_note
from mapping.urls import MAX_HOST, MAX_SHOWN_URL, UrlCheck, check_url

PAGE_SIZE: Final = 8
MAX_TEXT: Final = int(MessageLimit.MAX_TEXT_LENGTH)
URL_MESSAGE_CLIP: Final = 1000
"""A link card's message is clipped shorter, so the whole link (`MAX_SHOWN_URL`) and its warnings still fit."""
LABEL_CLIP: Final = 40
NAME_CLIP: Final = 64
"""Server text shown as a name (a server's, a tool's): clipped to this many characters."""
TITLE_CLIP: Final = 100
"""A title (a field's, "server · tool")."""
TEXT_CLIP: Final = 300
"""A line of server text: a description, a reason, an error, a warning."""
LONG_TEXT_CLIP: Final = 500
"""A server's question or message shown whole on its own."""
VALUE_CLIP: Final = 80
MAX_EDIT_BUTTONS: Final = 40
OPEN_FORM: Final = "📝 Open form"
_TAG: Final = re.compile(r"<[^>]+>")

InlineButton = dict[str, object]
"""One inline keyboard button as the Bot API takes it: `text` and `callback_data`, `url` or `web_app`."""
Keyboard = list[list[InlineButton]]
"""Rows of buttons, in the wire format: plain values, easy to build and compare; `bot.telegram.bot` sends them
as they are."""


@dataclass(frozen=True, slots=True)
class Screen:
    """What one message shows: HTML text and an optional inline keyboard."""

    text: str
    keyboard: Keyboard | None = None


def callback_button(label: str, data: str) -> InlineButton:
    return {"text": label, "callback_data": data}


def url_button(label: str, url: str) -> InlineButton:
    return {"text": label, "url": url}


def web_app_button(label: str, url: str) -> InlineButton:
    """`InlineKeyboardButton(web_app=WebAppInfo(url))` on the wire: opens a Mini App (private chats only)."""
    return {"text": label, "web_app": {"url": url}}


@dataclass(slots=True)
class Card:
    """A prompt's message in a chat and the state it was drawn from (owned by the Telegram surface)."""

    prompt: Prompt
    chat_id: int
    message_id: int | None = None
    state: FormState | None = None
    version: int = 0
    page: int = 0
    answered_with: list[str] = field(default_factory=list)
    form_url: str | None = None
    """The form's Mini App page (long forms in private chats): an **Open form** button while pending."""
    answered_by: str | None = None
    """Who answered (their first name): named on the settled card in a group, where several people call."""


def esc(text: str, limit: int | None = None) -> str:
    """Escape server text for HTML parse mode, clipped (before escaping) to `limit` characters."""
    return html.escape(clip(text, limit) if limit else text, quote=False)


def button_label(text: str) -> str:
    """Server text as a button label: Telegram refuses labels that are empty or only whitespace."""
    return clip(text.strip(), LABEL_CLIP) or "·"


def _btn(card: Card, label: str, action: Action, arg: int | None = None) -> InlineButton:
    data = Button(Kind.PROMPT, card.prompt.token, card.version, action, arg).pack()
    return callback_button(button_label(label), data)


def _header(prompt: Prompt) -> str:
    agent = prompt.origin.agent
    if prompt.permission is not None:  # the agent's own permission prompt (its hook's)
        return "\n".join(permission_lines(prompt.permission, agent))
    if agent is not None and prompt.server == agent:  # the agent's own question (`ask_person`)
        head = f"🤖 Your agent <b>{esc(agent, NAME_CLIP)}</b> asks:"
    else:
        head = f"❓ <b>{esc(prompt.server, NAME_CLIP)}</b> asks{_for_agent(prompt)}:"
    return f"{head}\n{esc(prompt.request.prompt, MESSAGE_CLIP)}"


def _for_agent(prompt: Prompt) -> str:
    """On a server's question during an agent's call: whose call it is (the person did not start it)."""
    agent = prompt.origin.agent
    return "" if agent is None else f" (for your agent <b>{esc(agent, NAME_CLIP)}</b>)"


def _exit_row(card: Card) -> list[InlineButton]:
    return [_btn(card, "Decline", Action.DECLINE), _btn(card, "Cancel", Action.CANCEL)]


def prompt_screen(card: Card) -> Screen:
    """The card while its prompt is pending."""
    if card.prompt.request.url is not None:
        return _url_screen(card)
    assert card.state is not None
    step = card.state.step
    if card.prompt.permission is not None and isinstance(step, Ask):
        return _permission_screen(card, step)
    if isinstance(step, Review):
        screen = _review_screen(card, step)
    else:
        assert isinstance(step, Ask)
        screen = _ask_screen(card, step)
    if card.form_url is not None:
        return Screen(screen.text, [[web_app_button(OPEN_FORM, card.form_url)], *(screen.keyboard or [])])
    return screen


def _permission_screen(card: Card, step: Ask) -> Screen:
    """An agent's permission prompt: what it wants to do, and one button per answer (one tap decides)."""
    field_ = step.field
    assert isinstance(field_, ChoiceField)  # the hooks endpoint asks one choice
    buttons = [_btn(card, option.title, Action.CHOOSE, i) for i, option in enumerate(field_.options)]
    return Screen(fit([_header(card.prompt)]), [buttons[i : i + 2] for i in range(0, len(buttons), 2)])


def _ask_screen(card: Card, step: Ask) -> Screen:
    field_ = step.field
    lines = [_header(card.prompt), ""]
    counter = f" ({step.index + 1}/{step.total})" if step.total > 1 else ""
    need = "" if field_.required else " <i>(optional)</i>"
    lines.append(f"<b>{esc(field_.title, TITLE_CLIP)}</b>{counter}{need}")
    note = walk_note(card.state) if card.state is not None else None
    if note is not None:
        lines[-1] += f" · <i>{esc(note)}</i>"
    if field_.description:
        lines.append(f"<i>{esc(field_.description, TEXT_CLIP)}</i>")
    rows: Keyboard = []
    if isinstance(field_, ChoiceField | MultiChoiceField):
        options = field_.options
        pages = max(1, -(-len(options) // PAGE_SIZE))
        card.page = min(card.page, pages - 1)
        first = card.page * PAGE_SIZE
        shown = list(enumerate(options))[first : first + PAGE_SIZE]
        if isinstance(field_, MultiChoiceField):
            chosen = set(step.selected)
            lines.append("Tap to select, then Done." + (f" Selected: {len(chosen)}." if chosen else ""))
            buttons = [
                _btn(card, ("☑ " if o.value in chosen else "☐ ") + o.title, Action.TOGGLE, i)
                for i, o in shown
            ]
        else:
            lines.append("Choose one:")
            buttons = [_btn(card, o.title, Action.CHOOSE, i) for i, o in shown]
        per_row = 1 if any(len(o.title) > 16 for _, o in shown) else 2
        rows += [buttons[i : i + per_row] for i in range(0, len(buttons), per_row)]
        if pages > 1:
            lines.append(f"Page {card.page + 1} of {pages}")
            nav = []
            if card.page > 0:
                nav.append(_btn(card, "‹ Previous", Action.PAGE, card.page - 1))
            if card.page < pages - 1:
                nav.append(_btn(card, "Next ›", Action.PAGE, card.page + 1))
            rows.append(nav)
        if isinstance(field_, MultiChoiceField):
            rows.append([_btn(card, f"Done ({len(step.selected)} selected)", Action.DONE)])
    elif isinstance(field_, BoolField):
        rows.append([_btn(card, "Yes", Action.YES), _btn(card, "No", Action.NO)])
    else:
        lines.append(f"Reply to this message with {esc(describe(field_), TEXT_CLIP)}.")
    if step.error:
        lines.append(f"⚠️ {esc(step.error, TEXT_CLIP)}")
    extra = []
    if step.current is not None and not isinstance(field_, MultiChoiceField):
        extra.append(_btn(card, f"Keep: {display_value(field_, step.current)}", Action.KEEP))
    if not field_.required:
        extra.append(_btn(card, "Skip", Action.SKIP))
    if extra:
        rows.append(extra)
    rows.append(_exit_row(card))
    return Screen(fit(lines), rows)


def _review_screen(card: Card, step: Review) -> Screen:
    lines = [_header(card.prompt), ""]
    rows: Keyboard = []
    if step.rows:
        lines.append("<b>Please review:</b>")
        for f, value in step.rows:
            lines.append(f"• {esc(f.title, 60)}: {esc(display_value(f, value), VALUE_CLIP)}")
    if step.error:
        lines.append(f"⚠️ {esc(step.error, TEXT_CLIP)}")
    rows.append([_btn(card, "✅ Submit" if step.rows else "✅ OK", Action.SUBMIT)])
    edits = [_btn(card, f"✏️ {f.title}", Action.EDIT, i) for i, (f, _) in enumerate(step.rows)][
        :MAX_EDIT_BUTTONS
    ]
    rows += [edits[i : i + 2] for i in range(0, len(edits), 2)]
    rows.append(_exit_row(card))
    return Screen(fit(lines), rows)


def _url_lines(card: Card, check: UrlCheck) -> list[str]:
    if card.prompt.sign_in:  # the bot's own card: the authorization server is who the person signs in with
        head = (
            f"🔑 <b>{esc(card.prompt.server, NAME_CLIP)}</b> needs you to sign in{_for_agent(card.prompt)}:"
        )
        host = f"Authorization server: <b>{esc(check.host, MAX_HOST + 1)}</b>"
    else:
        head = f"🔐 <b>{esc(card.prompt.server, NAME_CLIP)}</b> asks you to open a link{_for_agent(card.prompt)}:"
        host = f"Host: <b>{esc(check.host, MAX_HOST + 1)}</b>"
    lines = [
        head,
        esc(card.prompt.request.prompt, URL_MESSAGE_CLIP),
        "",
        host if check.host else "Host: none",
    ]
    lines += [f"⚠️ {esc(w, TEXT_CLIP)}" for w in check.warnings]
    lines.append(f"<code>{esc(check.shown)}</code>")
    if check.too_long:
        lines.append(
            f"✂️ Cut: the link is {len(check.href or check.url):,} characters long, more than the "
            f"{MAX_SHOWN_URL:,} a card shows whole; only its start and end are shown, and it is not offered "
            "as a link."
        )
    return lines


def telegram_can_link(check: UrlCheck) -> bool:
    """Whether the link may be a URL button: shown whole, and one Telegram accepts (http(s), a dot in the host)."""
    return check.consentable and "." in check.host


def _url_screen(card: Card) -> Screen:
    check = check_url(card.prompt.request.url or "")
    lines = _url_lines(card, check)
    if not check.consentable:  # nothing to consent to: the person can only say no
        if not check.openable:
            lines.append("\nThis link cannot be opened from here.")
        return Screen(fit(lines), [_exit_row(card)])
    lines.append("\nTapping Open gives your consent and shows the link button.")
    rows = [[_btn(card, f"Open {check.host}", Action.CONSENT)], _exit_row(card)]
    return Screen(fit(lines), rows)


def consented_screen(card: Card) -> Screen:
    """After consent: the link a browser opens (a URL button when Telegram allows one) and, for a retry, Finished."""
    check = check_url(card.prompt.request.url or "")
    lines = _url_lines(card, check)
    rows: Keyboard = []
    if telegram_can_link(check):
        lines.append("\n✅ Consent given. Open the link below.")
        rows.append([url_button(clip(f"Open {check.host}", LABEL_CLIP), check.href)])
    elif check.consentable:
        lines.append("\n✅ Consent given. Copy the link above into your browser.")
    else:
        lines.append("\n✅ Consent given, but this link cannot be opened from here.")
    if card.prompt.awaits_completion:
        lines.append("Tap <b>I've finished</b> when you are done there; the tool call is then retried.")
        rows.append([_btn(card, "I've finished", Action.FINISHED)])
    if card.prompt.sign_in:
        rows.append([_btn(card, "Cancel", Action.CANCEL)])
    return Screen(fit(lines), rows or None)


def settled_screen(card: Card, outcome: Outcome) -> Screen:
    """The final card: what was asked, how it ended, no buttons."""
    icon = {Outcome.ANSWERED: "✅", Outcome.COMPLETED: "✅", Outcome.DECLINED: "🚫"}.get(outcome, "⏹")
    url = card.prompt.request.url
    if card.prompt.sign_in and outcome is Outcome.COMPLETED:
        return Screen(f"✅ <b>Signed in to {esc(card.prompt.server, NAME_CLIP)}</b>", None)
    lines = _url_lines(card, check_url(url)) if url is not None else [_header(card.prompt)]
    by = ""
    if card.answered_by and outcome is Outcome.ANSWERED and not card.prompt.origin.is_private:
        by = f" by {esc(card.answered_by, NAME_CLIP)}"
    lines += ["", f"{icon} <b>{esc(OUTCOME_TEXT[outcome])}</b>{by}"]
    if outcome is Outcome.ANSWERED and card.state is not None:
        lines += [esc(line, VALUE_CLIP + 60) for line in card.answered_with[:30]]
    permission = card.prompt.permission
    if permission is not None and outcome is not Outcome.ANSWERED and permission.fallback:
        lines.append(f"<i>{esc(permission.fallback, TEXT_CLIP)}</i>")
    return Screen(fit(lines), None)


def folded_screen(card: Card, result: str) -> Screen | None:
    """A card answered just before its call ended: the settled card with the call's result (HTML, headed by
    the tool's name) below, as one message; None when the two do not fit in one."""
    text = f"{settled_screen(card, Outcome.ANSWERED).text}\n\n{result}"
    if len(text) > MAX_TEXT and visible_len(text) > MAX_TEXT:
        return None
    return Screen(text, None)


def progress_text(title: str, progress: Progress | None) -> str:
    """The status message of a running call, with a small text bar."""
    text = f"⏳ Running <b>{esc(title, TITLE_CLIP)}</b>…"
    if progress is None:
        return text
    fraction = progress.fraction
    if fraction is not None:
        filled = round(fraction * 10)
        text += f"\n{'▓' * filled}{'░' * (10 - filled)} {fraction:.0%}"
    else:
        text += f"\nstep {progress.progress:g}"
    if progress.message:
        text += f"\n{esc(progress.message, TEXT_CLIP)}"
    return text


def visible_len(text: str) -> int:
    """Length as Telegram counts it: after tags are parsed and entities decoded."""
    return len(html.unescape(_TAG.sub("", text)))


def fit(lines: list[str]) -> str:
    text = "\n".join(lines)
    if len(text) <= MAX_TEXT or visible_len(text) <= MAX_TEXT:  # tags and entities only ever shorten it
        return text
    # Only reached by extreme forms (hundreds of fields): drop whole lines so no tag is cut in half.
    kept: list[str] = []
    total = 0
    for line in lines:
        size = visible_len(line) + 1
        if total + size > MAX_TEXT - 40:
            kept.append("… (shortened)")
            break
        kept.append(line)
        total += size
    return "\n".join(kept)

"""The form walker: a question asked at the terminal, a link to open or a form's fields one by one. Does I/O
(through the `next_line` and `say` it is given).

The decisions are `mapping.form`'s (pure); this reads the lines, shows each step and says why a line is not an
answer. Server text is made `printable` by `say`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from bot.console.terminal import INTERRUPT
from bot.core import Prompt
from bot.core.call_args import ECHO_LIMIT, echo
from mapping import (
    DECLINED,
    Answer,
    Ask,
    BoolField,
    ChoiceField,
    Finished,
    FormSpec,
    Keep,
    MultiChoiceField,
    Review,
    Skip,
    Submit,
    TextInput,
    apply,
    describe,
    display_value,
    start,
)
from mapping.form import Edit, FormState, walk_note
from mapping.urls import MAX_SHOWN_URL, check_url

__all__ = ["FormWalker", "is_cancel"]


class FormWalker:
    """Asks one question at a time: `next_line(prompt)` reads a line (None at end of input), `say` prints."""

    def __init__(self, next_line: Callable[[str], Awaitable[str | None]], say: Callable[[str], None]) -> None:
        self._next_line = next_line
        self.say = say

    async def ask(self, prompt: Prompt) -> Answer:
        """Ask `prompt` (a link to open, or a form) line by line; the person's answer."""
        request = prompt.request
        self.say(f"\n[{prompt.server}] asks: {request.prompt}")
        if request.url is not None:
            check = check_url(request.url)
            self.say(f"  Link: {check.shown}\n  Host: {check.host or 'none'}")
            if check.too_long:
                self.say(
                    f"  Cut: the link is {len(check.href or check.url):,} characters long, more than the "
                    f"{MAX_SHOWN_URL:,} shown whole; only its start and end are shown, and it is not offered."
                )
            for warning in check.warnings:
                self.say(f"  Warning: {warning}")
            if check.consentable:
                self.say(f"  Open {check.host}? [y]es / /decline / /cancel")
            else:
                self.say("  This link cannot be opened from here: /decline / /cancel")
            while True:
                line = await self._next_line("open? > " if check.consentable else "/decline or /cancel > ")
                if line is None or is_cancel(line):
                    return Answer(request.id, ok=False, reason="cancelled")
                raw = line.strip()
                if raw == "/decline":
                    return Answer(request.id, ok=False, reason=DECLINED)
                if _command(raw) is not None:
                    self.say("  ! " + _command_refused(raw))
                    continue
                if check.consentable and raw.lower() in ("y", "yes", "open"):
                    return Answer(request.id, ok=True)
                self.say("  ! " + _why_not_a_link_answer(raw, check.consentable, check.host))
        assert prompt.form is not None
        content = await self.walk(prompt.form)
        if isinstance(content, dict):
            return Answer(request.id, ok=True, data=content)
        return Answer(request.id, ok=False, reason=content)

    async def walk(self, spec: FormSpec) -> dict[str, object] | str:
        """Walk a form; the content, or the reason it was not sent ("declined"/"cancelled")."""
        state: FormState = start(spec)
        while not isinstance(state.step, Finished):
            step = state.step
            self._show_step(step, walk_note(state))
            line = await self._next_line(
                "submit? > " if isinstance(step, Review) else f"{step.field.title}> "
            )
            if line is None or is_cancel(line):
                return "cancelled"
            raw = line.strip()
            if raw == "/decline":
                return DECLINED
            refusal = _not_an_answer(raw, step)
            if refusal is not None:
                self.say("  ! " + refusal)
                continue
            if isinstance(step, Review):
                if raw.lower() in ("s", "submit", "y", "yes", "ok"):
                    state = apply(state, Submit())
                elif raw.isdigit() and 1 <= int(raw) <= len(step.rows):
                    state = apply(state, Edit(step.rows[int(raw) - 1][0].name))
                else:
                    self.say("  ! " + _why_not_a_review_answer(raw, len(step.rows)))
                continue
            if raw == "" and step.current is not None:
                state = apply(state, Keep())
            elif raw == "/skip":
                state = apply(state, Skip())
            else:
                state = apply(state, TextInput(raw))
        return dict(state.step.content)

    def _show_step(self, step: Ask | Review, note: str | None = None) -> None:
        if isinstance(step, Review):
            if step.error:
                self.say(f"  ! {step.error}")
            self.say("  Review:" if step.rows else "  Confirm?")
            for number, (field, value) in enumerate(step.rows, 1):
                self.say(f"   {number}. {field.title}: {display_value(field, value)}")
            self.say(
                "  s = submit"
                + (", a number = change that field" if step.rows else "")
                + ", /decline, /cancel"
            )
            return
        field = step.field
        if step.error:
            self.say(f"  ! {field.title}: {step.error}")
        need = "required" if field.required else "optional, /skip to leave empty"
        self.say(f"  ({step.index + 1}/{step.total}) {field.title} ({need})" + (f"; {note}" if note else ""))
        if field.description:
            self.say(f"    {field.description}")
        if isinstance(field, ChoiceField | MultiChoiceField):
            for number, option in enumerate(field.options, 1):
                self.say(f"    {number}) {option.title}")
            if isinstance(field, MultiChoiceField):
                self.say("    (numbers separated by commas)")
        elif isinstance(field, BoolField):
            self.say("    y / n")
        else:
            self.say(f"    {describe(field)}")
        if step.current is not None:
            self.say(f"    Enter keeps: {display_value(field, step.current)}")


COMMANDS: Final = frozenset({"/call", "/tools", "/servers", "/help", "/start", "/quit", "/exit"})
"""The console's commands: typed while a question waits, they are refused, never taken as its answer."""


def _command(raw: str) -> str | None:
    """The console command `raw` starts with, if any (a value such as "/etc/hosts" is none)."""
    word = raw.split(maxsplit=1)[0] if raw else ""
    return word if word in COMMANDS else None


def _command_refused(raw: str) -> str:
    return (
        f"{_command(raw)} is a command, not an answer: answer this question first, or /decline or /cancel it"
    )


def _not_an_answer(raw: str, step: Ask | Review) -> str | None:
    """Why `raw` is not offered to the form at all: a console command, or an empty line where a required
    field has nothing to keep."""
    if _command(raw) is not None:
        return _command_refused(raw)
    if raw == "" and isinstance(step, Ask) and step.current is None and step.field.required:
        field = step.field
        choose = (
            f": type one of 1 to {len(field.options)}"
            if isinstance(field, ChoiceField | MultiChoiceField)
            else ""
        )
        return f"an empty line is not an answer: {field.title} is required{choose}"
    return None


def is_cancel(line: str) -> bool:
    """`/cancel` typed, or Ctrl-C at the prompt."""
    return line == INTERRUPT or line.strip() == "/cancel"


def _why_not_a_link_answer(raw: str, consentable: bool, host: str | None) -> str:
    if raw == "/skip":
        why = "/skip does not apply to a link: it can only be opened, declined or cancelled"
    elif not consentable:
        return "this link cannot be opened from here; type /decline or /cancel"
    else:
        why = f"{echo(raw)} is not an answer here" if raw else "an empty line is not an answer here"
    return f"{why}; type y to open {host}, /decline or /cancel" if consentable else why


def _why_not_a_review_answer(raw: str, rows: int) -> str:
    if raw == "/skip":
        why = "/skip does not apply to the review: nothing is left to skip"
    elif raw.isdigit():
        why = f"there is no field {raw if len(raw) <= ECHO_LIMIT else echo(raw)}" + (
            f" (1 to {rows})" if rows else ""
        )
    else:
        why = f"{echo(raw)} is not an answer here" if raw else "an empty line is not an answer here"
    return (
        f"{why}; type s to submit"
        + (", a field number to change it" if rows else "")
        + ", /decline or /cancel"
    )

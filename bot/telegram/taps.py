"""What a tap on a card means and what it gets back: beside `callback_data`, which knows the data's format. Pure.

`decode_tap` turns a card's button into the form input it stands for (`mapping.form` decides from there);
`TapAnswer` is what every tap gets back (`query.answer`), on a form card or an approval card.
"""

from __future__ import annotations

from dataclasses import dataclass

from bot.telegram.callback_data import Action, Button
from bot.telegram.render import Card
from mapping import Choose, Done, Edit, FormInput, Keep, Review, SetBool, Skip, Submit, Toggle

__all__ = ["TapAnswer", "decode_tap"]


@dataclass(frozen=True, slots=True)
class TapAnswer:
    """What a tap gets back: a toast, or an alert the person must dismiss (a refusal)."""

    text: str | None = None
    alert: bool = False


def decode_tap(card: Card, button: Button) -> FormInput | None:
    """The form input a tap on `card` stands for, or None when the button does not fit its question."""
    assert card.state is not None or card.prompt.request.url is not None
    if card.state is None:
        return None
    step = card.state.step
    action, arg = button.action, button.arg
    simple: dict[Action, FormInput] = {
        Action.YES: SetBool(True),
        Action.NO: SetBool(False),
        Action.DONE: Done(),
        Action.SKIP: Skip(),
        Action.KEEP: Keep(),
        Action.SUBMIT: Submit(),
    }
    if action in simple:
        return simple[action]
    if arg is None:
        return None
    if action is Action.CHOOSE:
        return Choose(arg)
    if action is Action.TOGGLE:
        return Toggle(arg)
    if action is Action.EDIT and isinstance(step, Review) and arg < len(step.rows):
        return Edit(step.rows[arg][0].name)
    return None

"""A form walk saved as JSON (`snapshot`) and taken back (`restore`) goes on exactly where it stood."""

from __future__ import annotations

import json

import pytest

from mapping import (
    Choose,
    Done,
    Edit,
    Finished,
    FormInput,
    SetBool,
    Skip,
    Submit,
    TextInput,
    Toggle,
    apply,
    parse_schema,
    restore,
    snapshot,
    start,
)
from tests.mapping.test_form import ORDER

WALKS: list[list[FormInput]] = [
    [],
    [TextInput("3")],
    [TextInput("3"), Choose(1)],
    [TextInput("3"), Choose(1), SetBool(True), Toggle(0)],
    [TextInput("3"), Choose(1), SetBool(True), Toggle(0), Toggle(2), Done()],
    [TextInput("3"), Choose(1), SetBool(True), Toggle(0), Done(), Skip()],
    [TextInput("3"), Choose(1), SetBool(True), Toggle(0), Done(), Skip(), Edit("size")],
]


@pytest.mark.parametrize("walk", WALKS, ids=lambda walk: f"{len(walk)} inputs")
def test_a_restored_walk_is_the_walk_that_was_saved(walk: list[FormInput]) -> None:
    """Values, the questions left, the step (with a multi-select's picks so far) survive a JSON round trip."""
    spec = parse_schema(ORDER)
    state = start(spec)
    for user_input in walk:
        state = apply(state, user_input)
    again = restore(spec, json.loads(json.dumps(snapshot(state))))
    assert dict(again.values) == dict(state.values)
    assert again.queue == state.queue and again.editing == state.editing
    assert again.step == state.step


def test_a_restored_walk_goes_on_to_the_same_content() -> None:
    """The rest of the walk after a restore gives what it would have given without one."""
    spec = parse_schema(ORDER)
    state = apply(start(spec), TextInput("3"))
    rest: list[FormInput] = [Choose(0), SetBool(False), Toggle(1), Done(), Skip(), Submit()]
    direct, restored = state, restore(spec, json.loads(json.dumps(snapshot(state))))
    for user_input in rest:
        direct, restored = apply(direct, user_input), apply(restored, user_input)
    assert restored.step == direct.step and isinstance(direct.step, Finished)


@pytest.mark.parametrize("shot", [{}, {"values": 3, "queue": "x", "ask": []}, {"values": {"qty": "many"}}])
def test_a_malformed_snapshot_starts_that_part_over_instead_of_raising(shot: dict[str, object]) -> None:
    """Nothing in a snapshot (read back from a database) makes `restore` raise; a refused value is dropped."""
    state = restore(parse_schema(ORDER), shot)
    assert "qty" not in state.values

"""`mapping.__all__` is pinned: exactly the public names of the package's modules."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import mapping

EXPECTED = [
    "DECLINED",
    "MAX_HOST",
    "MAX_PATTERN_INPUT",
    "MAX_SHOWN_URL",
    "MAX_TEXT_LENGTH",
    "NOT_FOR_THIS",
    "WEB_SCHEMES",
    "Answer",
    "Ask",
    "BoolField",
    "ChoiceField",
    "Choose",
    "Done",
    "Edit",
    "Field",
    "FieldError",
    "Finished",
    "FormInput",
    "FormSpec",
    "FormState",
    "InvalidParams",
    "Keep",
    "MappingError",
    "MultiChoiceField",
    "NumberField",
    "Option",
    "Request",
    "RequestKind",
    "Review",
    "SetBool",
    "Skip",
    "Step",
    "Submit",
    "TextField",
    "TextFormat",
    "TextInput",
    "Toggle",
    "UnsupportedSchema",
    "UrlCheck",
    "Value",
    "answer_to_elicit_result",
    "apply",
    "check_content",
    "check_url",
    "check_value",
    "describe",
    "display_value",
    "elicitation_to_request",
    "new_request_id",
    "parse_schema",
    "parse_text",
    "restore",
    "snapshot",
    "start",
    "to_base36",
    "walk_note",
]


def public_names(module_name: str) -> set[str]:
    """A module's `__all__`, else the names it defines itself without a leading underscore."""
    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return set(module.__all__)
    return {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and not inspect.ismodule(obj)
        and (name.isupper() or getattr(obj, "__module__", None) == module_name)
    }


def test_all_is_pinned_to_the_expected_names() -> None:
    """Adding or removing a public name is a deliberate change to this list."""
    assert mapping.__all__ == EXPECTED


def test_every_exported_name_exists() -> None:
    """Each name in `__all__` is importable from `mapping`."""
    assert all(hasattr(mapping, name) for name in mapping.__all__)


def test_all_covers_the_public_names_of_every_public_module() -> None:
    """Every public module's public names are re-exported, and nothing else is."""
    modules = [m.name for m in pkgutil.iter_modules(mapping.__path__) if not m.name.startswith("_")]
    names = set().union(*(public_names(f"mapping.{m}") for m in modules))

    assert set(mapping.__all__) == names


def test_reexports_are_the_same_objects_as_in_their_modules() -> None:
    """`mapping.X` is the very object its module defines (no copies or shadows)."""
    from mapping import form, schema, values

    assert mapping.parse_schema is schema.parse_schema
    assert mapping.apply is form.apply
    assert mapping.parse_text is values.parse_text
    assert mapping.TextField is schema.TextField

"""What every table of the configuration is built from: the `Table` base model, the field types, `Secret`.

A field's rule is its annotated type (a converter from `read`, after `${VAR}` expansion); a rule between
fields is its model's `_relations`. Either way a problem is a pydantic error whose `loc` names the key and
whose message never quotes the value; `load.problem_line` turns them into the lines users see.

Models are built with keywords only. A model built by hand (in tests) is validated like one read from a
file, except that `${VAR}` is not expanded and the document's shape (`_prepare`) is not translated: that
happens only with a validation context (`Context`), which `bot.config.load.parse_config` gives.

Why not pydantic's own `int`/`str` checks: their messages ("Input should be a valid integer") are not the
ones this bot's users and tests know; the converters keep them, and pydantic still collects every error.

Private to `bot.config`: the table modules (`telegram`, `web`, `servers`, `storage`, `approvals`, `limits`)
and the root `model` import from here; nothing else does. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Annotated, Any, ClassVar, Final, TypedDict, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from bot.config import read

T = TypeVar("T")
MASK: Final = "**********"


@dataclass(frozen=True, slots=True, repr=False)
class Secret:
    """A string that never shows itself in `repr`/`str` (tracebacks, logs); `.get()` reveals it."""

    _value: str

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{MASK}')"

    def __str__(self) -> str:
        return MASK


class Context(TypedDict):
    """The validation context `parse_config` gives: a document read from a file."""

    environ: Mapping[str, str]
    """Where `${VAR}` is looked up."""
    base_dir: str | None
    """The config file's folder (a relative SQLite path is resolved against it)."""


def problem(reason: str, at: str = "") -> PydanticCustomError:
    """The pydantic error for one problem line; `at` extends the key into the value (`[2]`, `.Authorization`)."""
    return PydanticCustomError("config", "{reason}", {"reason": reason, "at": at})


def _expand(value: object, info: ValidationInfo) -> object:
    context = cast("Context | None", info.context)
    if context is None:  # built by hand: values are taken as they are
        return value
    try:
        return read.expand_all(value, context["environ"])
    except read.Invalid as exc:
        raise problem(exc.reason, exc.at) from None


def expand_in(value: object, context: Context | None) -> object:
    return value if context is None else read.expand_all(value, context["environ"])


def checked(convert: read.Convert[T]) -> PlainValidator:
    def validate(value: object) -> T:
        try:
            return convert(value)
        except read.Invalid as exc:
            raise problem(exc.reason, exc.at) from None

    return PlainValidator(validate)


def optional(convert: read.Convert[T]) -> read.Convert[T | None]:
    return lambda value: None if value is None else convert(value)


def as_secret(convert: read.Convert[str]) -> read.Convert[Secret]:
    return lambda value: value if isinstance(value, Secret) else Secret(convert(value))


def as_frozenset(convert: read.Convert[tuple[T, ...]]) -> read.Convert[frozenset[T]]:
    return lambda value: frozenset(convert(value))


EXPAND: Final = BeforeValidator(_expand)
Text = Annotated[str, checked(read.text), EXPAND]
OptionalText = Annotated[str | None, checked(optional(read.text)), EXPAND]
Boolean = Annotated[bool, checked(read.boolean), EXPAND]
Positive = Annotated[float, checked(read.positive), EXPAND]
PositiveInt = Annotated[int, checked(read.positive_int), EXPAND]
UserIds = Annotated[frozenset[int], checked(read.user_ids), EXPAND]
Strings = Annotated[tuple[str, ...], checked(read.str_list), EXPAND]


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise read.Invalid("must be 0 (no limit) or a positive integer")
    return value


Limit = Annotated[int, checked(_limit), EXPAND]
Loc = tuple[str | int, ...]
Found = list[tuple[Loc, str]]
"""Problems a check found: (where under the model, reason)."""


class Table(BaseModel):
    """A TOML table: unknown keys forbidden, frozen, keyword-only; every problem in it reported at once.

    Subclasses state field rules in their annotations and rules between fields in `_relations`, which
    runs on the model, or (when a field failed) on what could be read, so that a broken field never hides
    another problem. `_prepare` translates the document's shape (a file's only) into the model's.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        arbitrary_types_allowed=True,
        hide_input_in_errors=True,
        use_attribute_docstrings=True,
    )
    _hidden: ClassVar[frozenset[str]] = frozenset()
    """Fields that are not keys of the file (`toml_keys` leaves them out)."""

    @classmethod
    def toml_keys(cls) -> tuple[str, ...]:
        """The keys this table may have in the file, in documented order."""
        return tuple(name for name in cls.model_fields if name not in cls._hidden)

    @classmethod
    def _prepare(cls, data: dict[str, Any], context: Context) -> Found:
        """Translate a file's table into the model's shape in place; return problems found doing so."""
        return []

    @classmethod
    def _relations(cls, v: Any, data: Mapping[str, Any], context: Context | None) -> Found:
        """Rules between fields. `v` is the model, or a namespace where a failed field is None; `data` is
        the (prepared) input; `context` None for a model built by hand."""
        return []

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, data: Any, handler: ValidatorFunctionWrapHandler, info: ValidationInfo) -> Any:
        if not isinstance(data, Mapping):
            return handler(data)  # a built model, or (a problem) not a table
        context = cast("Context | None", info.context)
        prepared = dict(cast("Mapping[str, Any]", data))
        found = cls._prepare(prepared, context) if context is not None else []
        errors: list[InitErrorDetails] = []
        try:
            model = handler(prepared)
        except ValidationError as exc:
            errors = _init_errors(exc)
            model = None
        view = model if model is not None else partial(cls, prepared, context)
        found += cls._relations(view, prepared, context)
        if not errors and not found:
            return model
        errors += [{"type": problem(reason), "loc": loc, "input": None} for loc, reason in found]
        order = {name: i for i, name in enumerate(cls.model_fields)}
        errors.sort(key=lambda e: order.get(str(e["loc"][0]), -1) if e["loc"] else -1)
        raise ValidationError.from_exception_data(cls.__name__, errors, hide_input=True)


def _init_errors(exc: ValidationError) -> list[InitErrorDetails]:
    """`exc`'s errors, ready to be raised again among others."""
    errors: list[InitErrorDetails] = []
    for e in exc.errors(include_url=False):
        ctx = e.get("ctx")
        kind: Any = (
            problem(str(ctx["reason"]), str(ctx.get("at", "")))
            if e["type"] == "config" and ctx
            else e["type"]
        )
        detail: InitErrorDetails = {"type": kind, "loc": e["loc"], "input": e["input"]}
        if ctx is not None and e["type"] != "config":
            detail["ctx"] = ctx
        errors.append(detail)
    return errors


_ADAPTERS: dict[tuple[type[Table], str], TypeAdapter[Any]] = {}


def partial(cls: type[Table], data: Mapping[str, Any], context: Context | None) -> SimpleNamespace:
    """Each field of `cls` validated on its own: its value, a namespace of what could be read of a failed
    sub-table, or None."""
    values: dict[str, Any] = {}
    for name, field in cls.model_fields.items():
        if name not in data:
            values[name] = field.get_default(call_default_factory=True)
            continue
        adapter = _ADAPTERS.get((cls, name))
        if adapter is None:
            annotation: Any = field.annotation
            adapter = TypeAdapter(Annotated[(annotation, *field.metadata)] if field.metadata else annotation)
            _ADAPTERS[(cls, name)] = adapter
        try:
            values[name] = adapter.validate_python(data[name], context=context)
        except ValidationError:
            inner = table_in(field.annotation)
            raw = data[name]
            values[name] = partial(inner, raw, context) if inner and isinstance(raw, Mapping) else None
    return SimpleNamespace(**values)


def table_in(annotation: Any) -> type[Table] | None:
    """The `Table` a field holds (`X`, `X | None`), if any."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, Table):
            return candidate
    return None

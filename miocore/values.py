"""miocore's value classes: standard-library dataclasses with a few of attrs' conveniences.

:func:`frozen` (immutable, hashable) and :func:`define` (mutable) build slotted, keyword-friendly
dataclasses; :func:`field` adds per-field ``converter`` and ``validator`` (run by ``__init__``
and so by :func:`evolve`, converters first); all classes share one ``__repr__``
(:func:`value_repr`) instead of one compiled per class. Classes are slotted unless they have
a ``functools.cached_property`` (its value lives in the instance's ``__dict__``).

A FindDb hit in a new process builds some 35 of these classes before it answers: the
standard library's ``dataclasses`` imports in a third of attrs' time (issue 17's warm start).

Everything the standard library offers works on these classes: ``dataclasses.replace`` (as
:func:`evolve`), ``dataclasses.fields``, ``dataclasses.asdict``, ``dataclasses.is_dataclass``.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable
from dataclasses import MISSING, asdict, fields
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = [
    "asdict",
    "define",
    "evolve",
    "field",
    "fields",
    "frozen",
    "init_fields",
    "value_repr",
]

T = TypeVar("T")

#: Metadata keys of :func:`field`'s converter and validator.
_CONVERT = "miocore.convert"
_VALIDATE = "miocore.validate"

#: The ids of the instances whose repr is being written on this thread (a cycle prints "...").
_writing = threading.local()


def value_repr(self: Any) -> str:
    """``ClassName(field=value, ...)`` over the fields shown (``repr=False`` hides one; a cycle
    prints ``...``): the repr dataclasses would generate, from one shared function."""
    active: set[int] | None = getattr(_writing, "ids", None)
    if active is None:
        active = _writing.ids = set()
    key = id(self)
    if key in active:
        return "..."
    active.add(key)
    try:
        parts = [f"{f.name}={getattr(self, f.name, '<unset>')!r}" for f in fields(self) if f.repr]
        name = type(self).__qualname__.rsplit(">.", 1)[-1]
        return f"{name}({', '.join(parts)})"
    finally:
        active.discard(key)


def field(
    *,
    default: Any = MISSING,
    factory: Callable[[], Any] | None = None,
    converter: Callable[[Any], Any] | None = None,
    validator: Callable[[Any, Any, Any], None] | None = None,
    init: bool = True,
    repr: bool = True,
    eq: bool = True,
    hash: bool | None = None,
) -> Any:
    """A dataclass field with attrs' spelling (``factory=``, ``eq=``) and two additions:
    ``converter(value)`` replaces the value given to ``__init__``, and then
    ``validator(instance, field, value)`` may raise; both run on every construction."""
    metadata: dict[str, Any] = {}
    if converter is not None:
        metadata[_CONVERT] = converter
    if validator is not None:
        metadata[_VALIDATE] = validator
    return dataclasses.field(
        default=default,
        default_factory=MISSING if factory is None else factory,
        init=init,
        repr=repr,
        compare=eq,
        hash=hash,
        metadata=metadata or None,
    )


def evolve(instance: T, /, **changes: Any) -> T:
    """A copy of ``instance`` with ``changes`` (``dataclasses.replace``: converters and
    validators run again)."""
    return dataclasses.replace(instance, **changes)  # type: ignore[type-var]


def init_fields(instance: object, /, **values: Any) -> None:
    """Set fields from a class's own ``__init__`` (``init=False`` classes), frozen or not."""
    for name, value in values.items():
        object.__setattr__(instance, name, value)


def _run_steps(self: Any) -> None:
    """``__post_init__`` of a class with converters or validators: converters, then
    validators, then the class's own ``__post_init__`` if it wrote one."""
    steps = type(self).__value_steps__
    for f, convert, _ in steps:
        if convert is not None:
            object.__setattr__(self, f.name, convert(getattr(self, f.name)))
    for f, _, validate in steps:
        if validate is not None:
            validate(self, f, getattr(self, f.name))
    own = type(self).__value_post_init__
    if own is not None:
        own(self)


def _has_steps(cls: type) -> bool:
    for value in vars(cls).values():
        if isinstance(value, dataclasses.Field) and (
            _CONVERT in value.metadata or _VALIDATE in value.metadata
        ):
            return True
    return any(getattr(base, "__value_steps__", ()) for base in cls.__mro__[1:])


def _build(cls: type, frozen: bool, options: dict[str, Any]) -> Any:
    wants_repr = options.pop("repr", True) and "__repr__" not in vars(cls)
    # A cached property keeps its value in the instance's __dict__: such classes get one.
    options.setdefault(
        "slots", not any(isinstance(v, functools.cached_property) for v in vars(cls).values())
    )
    if options["slots"]:
        options.setdefault("weakref_slot", True)
    steps = _has_steps(cls)
    if steps:
        # the class's own __post_init__, else the one a base with steps ran after its own
        own = vars(cls).get("__post_init__") or getattr(cls, "__value_post_init__", None)
        cls.__post_init__ = _run_steps  # type: ignore[attr-defined]
    built: Any = dataclasses.dataclass(cls, frozen=frozen, repr=False, **options)
    if steps:
        built.__value_post_init__ = own
        built.__value_steps__ = tuple(
            (f, f.metadata.get(_CONVERT), f.metadata.get(_VALIDATE))
            for f in fields(built)
            if _CONVERT in f.metadata or _VALIDATE in f.metadata
        )
    if wants_repr:
        built.__repr__ = value_repr
    return built


@overload
def frozen(maybe_cls: type[T], /) -> type[T]: ...
@overload
def frozen(
    maybe_cls: None = None,
    /,
    *,
    kw_only: bool = ...,
    init: bool = ...,
    eq: bool = ...,
    slots: bool = ...,
    repr: bool = ...,
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(maybe_cls: Any = None, /, **options: Any) -> Any:
    """An immutable, hashable value class (``dataclasses.dataclass(frozen=True, slots=True)``
    with the shared repr and :func:`field`'s converters and validators)."""
    if maybe_cls is None:
        return lambda cls: _build(cls, True, dict(options))
    return _build(maybe_cls, True, options)


@overload
def define(maybe_cls: type[T], /) -> type[T]: ...
@overload
def define(
    maybe_cls: None = None,
    /,
    *,
    kw_only: bool = ...,
    init: bool = ...,
    eq: bool = ...,
    slots: bool = ...,
    repr: bool = ...,
) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(field,))
def define(maybe_cls: Any = None, /, **options: Any) -> Any:
    """A mutable value class (``dataclasses.dataclass(slots=True)``, the shared repr,
    :func:`field`'s converters and validators at construction)."""
    if maybe_cls is None:
        return lambda cls: _build(cls, False, dict(options))
    return _build(maybe_cls, False, options)

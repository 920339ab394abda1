"""attrs' class decorators with one shared ``__repr__``: miocore's value classes.

attrs writes and compiles a ``__repr__`` for every class it builds, about 0.1 ms each; a
FindDb hit in a new process builds some 35 such classes before it answers, so the compiled
reprs were ~3.5 ms of a ~55 ms warm start. :func:`frozen` and :func:`define` build the same
attrs classes (``attrs.evolve``, ``attrs.fields`` and the rest work on them) and give each the
one :func:`attrs_repr`, which prints what attrs' generated repr prints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

__all__ = ["attrs_repr", "define", "frozen"]

#: The ids of the instances whose repr is being written on this thread (a cycle prints "...").
_writing = threading.local()


def attrs_repr(self: Any) -> str:
    """``ClassName(field=value, ...)`` over the fields attrs shows, as attrs' own repr writes
    it (a field's ``repr=False`` leaves it out, a callable formats it; a cycle prints ``...``)."""
    active: set[int] | None = getattr(_writing, "ids", None)
    if active is None:
        active = _writing.ids = set()
    key = id(self)
    if key in active:
        return "..."
    active.add(key)
    try:
        parts = []
        for field in type(self).__attrs_attrs__:
            shown = field.repr
            if shown is False:
                continue
            value = getattr(self, field.name, attrs.NOTHING)
            parts.append(
                f"{field.name}={value!r}" if shown is True else f"{field.name}={shown(value)}"
            )
        name = type(self).__qualname__.rsplit(">.", 1)[-1]
        return f"{name}({', '.join(parts)})"
    finally:
        active.discard(key)


def _with_shared_repr(build: Callable[..., Any], options: dict[str, Any]) -> Callable[[Any], Any]:
    def wrap(cls: Any) -> Any:
        wanted = options.pop("repr", True) and "__repr__" not in cls.__dict__
        built = build(cls, repr=False, **options)
        if wanted:
            built.__repr__ = attrs_repr
        return built

    return wrap


if TYPE_CHECKING:
    # Type checkers know attrs' own decorators (mypy's attrs plugin: converters, aliases):
    # they see those, and the classes below type as attrs classes.
    from attrs import define, frozen
else:

    def frozen(maybe_cls: Any = None, /, **options: Any) -> Any:
        """``attrs.frozen`` (same options) with the shared :func:`attrs_repr`."""
        wrap = _with_shared_repr(attrs.frozen, options)
        return wrap if maybe_cls is None else wrap(maybe_cls)

    def define(maybe_cls: Any = None, /, **options: Any) -> Any:
        """``attrs.define`` (same options) with the shared :func:`attrs_repr`."""
        wrap = _with_shared_repr(attrs.define, options)
        return wrap if maybe_cls is None else wrap(maybe_cls)

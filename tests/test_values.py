"""miocore's value classes print what attrs' own generated repr prints, from one shared
function (attrs compiles a repr per class: a cost every new process paid at import)."""

from __future__ import annotations

import sys

import attrs

import miocore
from miocore.values import attrs_repr, define, frozen


def _shout(value: object) -> str:
    return str(value).upper()


def _body() -> dict[str, object]:
    """One class body with every repr case attrs knows (built twice below)."""
    return {
        "__annotations__": {
            "plain": "int",
            "hidden": "str",
            "custom": "str",
            "later": "int",
            "items": "list",
        },
        "plain": attrs.field(),
        "hidden": attrs.field(default="secret", repr=False),
        "custom": attrs.field(default="quiet", repr=_shout),
        "later": attrs.field(init=False, default=7),
        "items": attrs.field(factory=list),
    }


def _pair(build_ours: object, build_attrs: object) -> tuple[type, type]:
    ours = build_ours(type("Sample", (), {**_body(), "__module__": __name__}))  # type: ignore[operator]
    theirs = build_attrs(type("Sample", (), {**_body(), "__module__": __name__}))  # type: ignore[operator]
    return ours, theirs


def test_frozen_prints_what_attrs_prints() -> None:
    ours, theirs = _pair(frozen(kw_only=True), attrs.frozen(kw_only=True))
    for kwargs in ({"plain": 1}, {"plain": -3, "hidden": "x", "custom": "loud", "items": [1, "a"]}):
        assert repr(ours(**kwargs)) == repr(theirs(**kwargs))
    assert repr(ours(plain=1)) == "Sample(plain=1, custom=QUIET, later=7, items=[])"


def test_define_prints_what_attrs_prints_and_a_cycle_prints_dots() -> None:
    ours, theirs = _pair(define, attrs.define)
    a, b = ours(plain=2), theirs(plain=2)
    a.items.append(a)  # a cycle through a field
    b.items.append(b)
    assert repr(a) == repr(b) == "Sample(plain=2, custom=QUIET, later=7, items=[...])"


def test_a_class_of_its_own_repr_keeps_it_and_attrs_still_works_on_the_result() -> None:
    @frozen
    class Own:
        n: int

        def __repr__(self) -> str:
            return f"<own {self.n}>"

    @frozen(kw_only=True)
    class Point:
        x: int
        y: int = 0

    assert repr(Own(1)) == "<own 1>"
    p = attrs.evolve(Point(x=1), y=5)
    assert (p, repr(p), attrs.asdict(p)) == (Point(x=1, y=5), "Point(x=1, y=5)", {"x": 1, "y": 5})
    assert hash(p) == hash(Point(x=1, y=5))
    assert attrs.has(Point) and Point.__slots__  # still a slotted attrs class


def test_no_class_import_miocore_builds_carries_a_compiled_repr() -> None:
    """Every attrs class ``import miocore`` builds prints through the shared function or its
    own method: none through a repr attrs compiled (a warm start pays for each)."""
    assert miocore.Timing.__repr__ is attrs_repr  # the whole public API imported
    compiled = []
    for name, module in list(sys.modules.items()):
        if not (name == "miocore" or name.startswith("miocore.")):
            continue
        for value in vars(module).values():
            if isinstance(value, type) and attrs.has(value) and value.__module__ == name:
                code = getattr(value.__repr__, "__code__", None)
                if code is not None and code.co_filename.startswith("<attrs generated"):
                    compiled.append(f"{name}.{value.__qualname__}")
    assert not compiled, compiled

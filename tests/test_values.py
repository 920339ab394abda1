"""miocore's value classes: standard-library dataclasses with converters, validators and one
shared repr (a repr compiled per class was a cost every new process paid at import)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import weakref

import pytest

import miocore
from miocore.values import define, evolve, field, frozen, init_fields, value_repr


def _body() -> dict[str, object]:
    """One class body with every repr case (built twice below: ours and plain dataclasses)."""
    return {
        "__annotations__": {"plain": "int", "hidden": "str", "later": "int", "items": "list"},
        "hidden": dataclasses.field(default="secret", repr=False),
        "later": dataclasses.field(init=False, default=7),
        "items": dataclasses.field(default_factory=list),
    }


def _pair(ours_build: object, frozen_: bool) -> tuple[type, type]:
    ours = ours_build(type("Sample", (), {**_body(), "__module__": __name__}))  # type: ignore[operator]
    theirs: type = dataclasses.dataclass(frozen=frozen_, kw_only=True)(
        type("Sample", (), {**_body(), "__module__": __name__})
    )
    return ours, theirs


def test_frozen_prints_what_dataclasses_print() -> None:
    ours, theirs = _pair(frozen(kw_only=True), True)
    for kwargs in ({"plain": 1}, {"plain": -3, "hidden": "x", "items": [1, "a"]}):
        assert repr(ours(**kwargs)) == repr(theirs(**kwargs))
    assert repr(ours(plain=1)) == "Sample(plain=1, later=7, items=[])"


def test_define_prints_what_dataclasses_print_and_a_cycle_prints_dots() -> None:
    ours, theirs = _pair(define(kw_only=True), False)
    a, b = ours(plain=2), theirs(plain=2)
    a.items.append(a)  # a cycle through a field
    b.items.append(b)
    assert repr(a) == repr(b) == "Sample(plain=2, later=7, items=[...])"
    a.plain = 3  # define: mutable
    assert a.plain == 3


def test_frozen_is_immutable_hashable_slotted_and_weakly_referable() -> None:
    @frozen(kw_only=True)
    class Point:
        x: int
        y: int = 0
        tag: str = field(default="", eq=False)

    p = Point(x=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    assert Point(x=1, tag="a") == Point(x=1, tag="b")  # eq=False leaves tag out
    assert hash(Point(x=1, tag="a")) == hash(Point(x=1, tag="b"))
    assert Point.__slots__ and not hasattr(p, "__dict__")  # type: ignore[attr-defined]
    assert weakref.ref(p)() is p
    with pytest.raises(TypeError):
        Point(1)  # type: ignore[call-arg]  # keyword-only


def test_converters_then_validators_run_on_init_and_on_evolve() -> None:
    seen: list[tuple[str, object]] = []

    def positive(_instance: object, f: dataclasses.Field[int], value: int) -> None:
        seen.append((f.name, value))
        if value <= 0:
            raise ValueError(f"{f.name} must be positive, not {value}")

    @frozen(kw_only=True)
    class Sized:
        n: int = field(converter=int, validator=positive)
        names: tuple[str, ...] = field(factory=tuple, converter=tuple)

    s = Sized(n="3", names=["a", "b"])  # type: ignore[arg-type]
    assert (s.n, s.names) == (3, ("a", "b"))
    assert seen == [("n", 3)]  # the validator sees the converted value
    t = evolve(s, n="5")
    assert (t.n, t.names) == (5, ("a", "b")) and s.n == 3
    with pytest.raises(ValueError, match="n must be positive, not 0"):
        Sized(n=0)
    with pytest.raises(ValueError, match="not -1"):
        evolve(s, n=-1)


def test_a_class_of_its_own_post_init_runs_after_the_converters() -> None:
    order: list[str] = []

    @frozen
    class Checked:
        n: int = field(converter=abs)

        def __post_init__(self) -> None:
            order.append(f"own sees {self.n}")

    assert Checked(-4).n == 4 and order == ["own sees 4"]


def test_a_class_of_its_own_repr_or_init_keeps_it_and_stdlib_tools_work() -> None:
    @frozen
    class Own:
        n: int

        def __repr__(self) -> str:
            return f"<own {self.n}>"

    @frozen(init=False)
    class Made:
        a: int
        b: str

        def __init__(self, a: object) -> None:
            init_fields(self, a=int(a), b=str(a))  # type: ignore[call-overload]

    assert repr(Own(1)) == "<own 1>"
    m = Made("7")
    assert (m.a, m.b, repr(m)) == (7, "7", "Made(a=7, b='7')")
    assert dataclasses.asdict(m) == {"a": 7, "b": "7"} and dataclasses.is_dataclass(m)
    assert [f.name for f in dataclasses.fields(Made)] == ["a", "b"]


def test_no_class_import_miocore_builds_carries_a_compiled_repr() -> None:
    """Every value class ``import miocore`` builds prints through the shared function or its
    own method: none through a repr dataclasses compiled (a warm start pays for each)."""
    assert miocore.Timing.__repr__ is value_repr  # the whole public API imported
    compiled = []
    for name, module in list(sys.modules.items()):
        if not (name == "miocore" or name.startswith("miocore.")):
            continue
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and dataclasses.is_dataclass(value)
                and value.__module__ == name
                and value.__repr__ is not value_repr
            ):
                code = getattr(value.__repr__, "__code__", None)
                if code is not None and code.co_filename == "<string>":
                    compiled.append(f"{name}.{value.__qualname__}")
    assert not compiled, compiled


def test_import_miocore_loads_no_attrs() -> None:
    """The core's value classes need nothing beyond the standard library (a warm start paid
    ~8 ms for importing attrs)."""
    code = "import sys, miocore; print('attr' in sys.modules or 'attrs' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_subclass_keeps_its_bases_converters_and_post_init() -> None:
    seen: list[int] = []

    @frozen(kw_only=True)
    class Base:
        n: int = field(converter=int)

        def __post_init__(self) -> None:
            seen.append(self.n)

    @frozen(kw_only=True)
    class Child(Base):
        m: int = field(default=0, converter=abs)

    c = Child(n="3", m=-2)  # type: ignore[arg-type]
    assert (c.n, c.m, seen) == (3, 2, [3])

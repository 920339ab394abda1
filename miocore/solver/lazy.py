"""Lazy solver records: a solver declared by name, family and backends, made on first use.

A plugin module is imported by every process that uses miocore, so a solver declared with
``SolverRecord(factory="pkg.module:Class", name=..., algorithm=..., backends=...)`` costs
nothing until a find asks it a question: a CPU handle never imports a GPU solver's module, and
a FindDb hit imports only the solvers its record names. This module checks such records and
makes their solvers; :class:`miocore.solver.registry.RegisteredSolver` calls it once.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from miocore.errors import PluginError
from miocore.solver.interface import Algorithm, Solver

#: ``package.module:attribute`` (the attribute may be dotted: ``module:Class.make``).
_FACTORY_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
    r"(\.[A-Za-z_][A-Za-z0-9_]*)*$"
)


def declared_algorithm(value: Any) -> Algorithm | None:
    """The :class:`Algorithm` a lazy record declares (an Algorithm or its exact value), or
    None when it is neither."""
    if isinstance(value, Algorithm):
        return value
    if isinstance(value, str):
        try:
            return Algorithm(value)
        except ValueError:
            return None
    return None


def declared_backends(value: Any) -> frozenset[str] | None:
    """The backends a lazy record declares (a non-empty collection of non-empty strings; a bare
    string is refused: ``"cpu"`` would be three one-letter backends), or None."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list, set, frozenset)):
        return None
    out = frozenset(value)
    if not out or not all(isinstance(b, str) and b for b in out):
        return None
    return out


def factory_problem(factory: Any) -> str | None:
    """Why ``factory`` is not a usable factory (None when it is)."""
    if isinstance(factory, str):
        if not _FACTORY_RE.match(factory):
            return f"factory {factory!r} must be 'package.module:attribute'"
        return None
    if not callable(factory):
        return (
            f"factory must be 'package.module:attribute', a Solver subclass or a zero-argument "
            f"callable, got {type(factory).__name__}"
        )
    return None


def resolve(factory: Any) -> Any:
    """The object a factory string names (imported now), or the factory itself."""
    if not isinstance(factory, str):
        return factory
    module_name, _, attr_path = factory.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr_path.split("."):
        target = getattr(target, part)
    return target


def make(
    factory: Any, *, name: str, algorithm: Algorithm, backends: frozenset[str], label: str
) -> Solver:
    """Import and call ``factory``; check that the solver it makes declares what the record
    declared. Every failure is a :class:`PluginError` naming the plugin (``label``), the solver
    and the cause."""
    where = f"solver {name!r} of plugin {label} (factory {_describe(factory)})"
    try:
        target = resolve(factory)
        solver = target() if callable(target) and not isinstance(target, Solver) else target
    except Exception as exc:  # ImportError, AttributeError, or the factory's own failure
        raise PluginError(
            f"{where} could not be made: {type(exc).__name__}: {exc}", field="solver", value=name
        ) from exc
    if not isinstance(solver, Solver):
        raise PluginError(
            f"{where} made {type(solver).__name__}, not a miocore.Solver instance",
            field="solver",
            value=name,
        )
    mismatches = []
    if getattr(solver, "name", None) != name:
        mismatches.append(f"name {getattr(solver, 'name', None)!r}, declared {name!r}")
    if getattr(solver, "algorithm", None) != algorithm:
        made = getattr(solver, "algorithm", None)
        mismatches.append(f"algorithm {made!r}, declared {algorithm.value!r}")
    made_backends = getattr(solver, "backends", None)
    if not isinstance(made_backends, (frozenset, set, tuple)) or frozenset(made_backends) != (
        backends
    ):
        mismatches.append(f"backends {made_backends!r}, declared {sorted(backends)!r}")
    if mismatches:
        raise PluginError(
            f"{where} does not match its record: it has " + "; ".join(mismatches),
            field="solver",
            value=name,
        )
    return solver


def _describe(factory: Any) -> str:
    if isinstance(factory, str):
        return factory
    module = getattr(factory, "__module__", None) or "?"
    qualname = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{qualname}"


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's ``__getattr__`` (PEP 562) whose public names load on first access.

    ``exports`` maps each public name to the module that defines it; a plugin package writes
    ``__getattr__ = miocore.lazy_exports(__name__, {"MySolver": "my_pkg.solver"})`` so that
    importing the package, as the plugin scan does, imports none of its solver modules.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later accesses skip this function
        return value

    return __getattr__

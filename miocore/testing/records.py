"""What the contract suite checks: a solver instance, or the registration that makes it.

A plugin declares its solvers lazily (``SolverRecord(factory=..., name=..., ...)``); the suite
accepts such a record, or a :class:`~miocore.RegisteredSolver` from ``miocore.solvers()``, and
makes the solver the way the registry does, so the declaration is checked too: a factory that
fails to import, or a solver whose name, algorithm or backends differ from its record, breaks
the registration rule.
"""

from __future__ import annotations

from typing import Any

from miocore.errors import PluginError
from miocore.solver.hookspecs import SolverRecord
from miocore.solver.interface import Solver
from miocore.solver.registry import PluginInfo, RegisteredSolver, _record_problem, _register


def solver_under_test(subject: Any) -> tuple[Any, str | None]:
    """``(solver, flaw)``: the solver of ``subject`` (a Solver, a RegisteredSolver or a
    SolverRecord; a lazy one is made now) and what is wrong with its registration (None when
    nothing is found wrong here; a plain Solver is returned as it is)."""
    if isinstance(subject, SolverRecord):
        flaw = _record_problem(subject)
        if flaw:
            return subject, flaw
        info = PluginInfo(name="contract", distribution="contract", version="0", status="active")
        subject = _register([subject], info, {})[0]
    if isinstance(subject, RegisteredSolver):
        try:
            return subject.solver, None
        except PluginError as exc:
            return subject, str(exc)
    return subject, None


def subject_name(subject: Any) -> str:
    """The name a contract reports for ``subject`` (the declared one, for a record)."""
    if isinstance(subject, Solver):
        return str(subject.name)
    name = getattr(subject, "name", None)
    return str(name) if name is not None else type(subject).__name__

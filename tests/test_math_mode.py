"""The math mode: solvers that round fp32 to TF32 apply only when the caller allows it.

``Handle(..., math_mode="tf32")`` sets ``ExecutionContext.math_mode``; the default ``"exact"``
keeps every reduced-precision solver out of find, immediate mode and FindDb hits. Tested on the
CPU with a fake TF32-style solver that behaves like ``igemm.gpu_tf32``.
"""

from __future__ import annotations

from typing import Any

import pytest
from fake_solvers import TimedSolver, small_problem

from miocore import (
    APPLICABLE,
    ExecutionContext,
    FindMode,
    Handle,
    InvalidArgumentError,
    NotApplicableError,
    Registry,
    not_applicable,
)
from miocore.db import FindDbEntry
from miocore.db.mathkeys import record_key
from miocore.testing import cpu_context

PROBLEM = small_problem()


class FakeTf32Solver(TimedSolver):
    """Applies only in the ``"tf32"`` math mode, as a TF32 tensor-core solver must."""

    def is_applicable(self, ctx: ExecutionContext, problem: Any) -> Any:
        if ctx.math_mode != "tf32":
            return not_applicable(f"math mode is {ctx.math_mode!r}: TF32 needs 'tf32'")
        return APPLICABLE


def _solvers() -> tuple[FakeTf32Solver, TimedSolver]:
    return FakeTf32Solver("test.tf32", wti=0.9), TimedSolver("test.exact", delay_s=0.002, wti=0.1)


def test_context_default_is_exact_and_checked() -> None:
    assert cpu_context().math_mode == "exact"
    assert ExecutionContext(device=cpu_context().device, math_mode="tf32").math_mode == "tf32"
    with pytest.raises(InvalidArgumentError, match="math_mode"):
        ExecutionContext(device=cpu_context().device, math_mode="fast")


def test_handle_sets_the_math_mode() -> None:
    assert Handle("cpu").context.math_mode == "exact"
    assert Handle("cpu", math_mode="tf32").context.math_mode == "tf32"
    with pytest.raises(InvalidArgumentError, match="math_mode"):
        Handle("cpu", math_mode="TF32!")


def test_tf32_solver_declines_in_exact_mode_with_a_reason() -> None:
    tf32, exact = _solvers()
    h = Handle("cpu", registry=Registry.from_solvers([tf32, exact]))
    sols = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.exact"]
    assert "math mode is 'exact'" in h.last_report.not_applicable["test.tf32"]
    assert tf32.runs == 0
    assert "test.tf32" not in [s.solver for s in h.get_solutions(PROBLEM)]
    with pytest.raises(NotApplicableError, match="math mode"):
        h.compile_solution(PROBLEM, "test.tf32")


def test_tf32_solver_applies_in_tf32_mode() -> None:
    tf32, exact = _solvers()
    h = Handle("cpu", registry=Registry.from_solvers([tf32, exact]), math_mode="tf32")
    sols = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert {s.solver for s in sols} == {"test.tf32", "test.exact"}
    assert sols[0].solver == "test.tf32"  # no delay: the faster one


def test_a_tf32_find_record_is_not_returned_to_an_exact_caller() -> None:
    tf32, exact = _solvers()
    registry = Registry.from_solvers([tf32, exact])
    writer = Handle("cpu", registry=registry, math_mode="tf32")
    writer.find_solutions(PROBLEM, find_mode="NORMAL")
    # The TF32 find's record has the mode's own key (miocore.db.mathkeys): never a hit for an
    # exact caller, whose times it does not describe.
    assert writer.find_db.records(PROBLEM.key) == []
    [record] = writer.find_db.records(record_key(PROBLEM, "tf32"))
    assert record.entries[0].solver == "test.tf32"

    reader = Handle("cpu", registry=registry)  # exact, same database
    for mode in (FindMode.FAST, FindMode.HYBRID):
        sols = reader.find_solutions(PROBLEM, find_mode=mode.name)
        assert [s.solver for s in sols] == ["test.exact"], mode
    assert [s.solver for s in reader.get_solutions(PROBLEM)] == ["test.exact"]
    assert reader.last_report.db_hit  # its own record, written by the HYBRID find above
    [own] = reader.find_db.records(PROBLEM.key)
    assert [e.solver for e in own.entries] == ["test.exact"]


def test_a_record_holding_only_tf32_falls_back_to_find_for_an_exact_caller() -> None:
    tf32, exact = _solvers()
    h = Handle("cpu", registry=Registry.from_solvers([tf32, exact]))
    h.find_db.write(
        PROBLEM.key,
        [FindDbEntry(solver="test.tf32", algorithm="direct", time_ms=0.01, workspace_size=0)],
    )
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert [s.solver for s in sols] == ["test.exact"]
    assert tf32.runs == 0


def test_a_tf32_solution_does_not_run_on_an_exact_handle() -> None:
    tf32, exact = _solvers()
    registry = Registry.from_solvers([tf32, exact])
    sol = Handle("cpu", registry=registry, math_mode="tf32").get_solutions(PROBLEM)[0]
    assert sol.solver == "test.tf32"
    exact_handle = Handle("cpu", registry=registry)
    inputs = {name: exact_handle.backend.empty(getattr(PROBLEM, name)) for name in "xwy"}
    with pytest.raises(NotApplicableError, match="math mode"):
        exact_handle.run_solution(sol, **inputs)

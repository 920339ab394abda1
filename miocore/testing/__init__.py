"""Helpers for testing solvers, and miocore's opt-in pytest plugin.

Without pytest: :func:`run_solver` runs one solver directly, :func:`check_solver` compares it
with the float64 reference, and :func:`check_contract` runs the whole solver contract suite
(:mod:`miocore.testing.contract`).

With pytest, opt in (nothing is auto-loaded into other projects' test runs)::

    pytest_plugins = ["miocore.testing"]

to get the fixtures and the ``gpu`` marker of :mod:`miocore.testing.plugin`, and subclass
:class:`SolverContract` to run the contract suite as tests::

    from miocore.testing import SolverContract

    class TestMySolverContract(SolverContract):
        solver = MySolver()

(PYTEST_DONT_REWRITE: a test module usually imports this module before pytest loads it as a
plugin, so it cannot be rewritten; its checks raise with full messages instead.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miocore import reference
from miocore.backends.cpu import allocate_workspace, cpu_device_info, empty_for
from miocore.problem.conv import ConvProblem
from miocore.problem.dtypes import DataType
from miocore.solver.interface import (
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    Solver,
    normalize_applicability,
)
from miocore.testing.contract import Contract, ContractReport, ContractViolation, check_contract

#: Loaded by pytest when a test suite opts in with ``pytest_plugins = ["miocore.testing"]``.
pytest_plugins = ["miocore.testing.plugin"]

__all__ = [
    "TOLERANCES",
    "Contract",
    "ContractReport",
    "ContractViolation",
    "check_contract",
    "check_solver",
    "cpu_context",
    "inputs_for",
    "run_solver",
]

#: Relative tolerances (max abs error / max abs reference) the plugin correctness tests use.
#: Exact-arithmetic algorithms (direct, GEMM) sum in float32; the output is rounded to the
#: dtype, so float16 and bfloat16 are bounded by their rounding (2^-11, 2^-8) with headroom.
TOLERANCES: dict[DataType, float] = {
    DataType.FLOAT32: 2e-5,
    DataType.FLOAT16: 2e-3,
    DataType.BFLOAT16: 1.6e-2,
}


def cpu_context() -> ExecutionContext:
    """The execution context of this machine's CPU."""
    return ExecutionContext(device=cpu_device_info())


def run_solver(
    solver: Solver,
    problem: ConvProblem,
    inputs: dict[str, np.ndarray],
    *,
    perf_config: PerfConfig | None = None,
    ctx: ExecutionContext | None = None,
    workspace: np.ndarray | None = None,
) -> np.ndarray:
    """Run ``solver`` on copies of ``inputs`` and return the tensor its direction wrote.

    The problem may be transposed: the arrays are mapped to the canonical problem as the
    handle does. The output array starts filled with NaN, so a solver that forgets to write
    an element fails the comparison.
    """
    ctx = ctx or cpu_context()
    canon = problem.canonical
    # Copies that keep each descriptor's strides (an NHWC input stays NHWC in memory).
    arrays: dict[str, np.ndarray | None] = {}
    for name in ("x", "w", "y"):
        if name in inputs:
            arrays[name] = empty_for(getattr(problem, name))
            arrays[name][...] = inputs[name]
        else:
            arrays[name] = None
    if problem.is_transposed:
        arrays["x"], arrays["y"] = arrays["y"], arrays["x"]
    out_name = canon.direction.output_tensor
    out = empty_for(getattr(canon, out_name))
    out[...] = np.nan
    arrays[out_name] = out
    solution = solver.get_solution(ctx, canon, perf_config)
    if workspace is None:
        workspace = allocate_workspace(solution.workspace_size)
    invoker = solution.invoker_factory(())
    invoker(None, InvokeParams(problem=canon, workspace=workspace, **arrays))  # type: ignore[arg-type]
    return out


def check_solver(
    solver: Solver,
    problem: ConvProblem,
    *,
    seed: int = 0,
    perf_config: PerfConfig | None = None,
    tolerance: float | None = None,
) -> float:
    """Run ``solver`` on random data and assert it matches the float64 reference.

    Returns the relative error. Raises AssertionError naming the solver, problem and error.
    """
    ctx = cpu_context()
    answer = normalize_applicability(solver.is_applicable(ctx, problem.canonical))
    assert answer, f"{solver.name} is not applicable to {problem.key}: {answer.reason}"
    inputs = reference.random_inputs(problem, seed)
    got = run_solver(solver, problem, inputs, perf_config=perf_config, ctx=ctx)
    out_name = problem.direction.output_tensor
    ref_inputs = {k: v for k, v in inputs.items() if k != out_name}
    expected = reference.convolution(problem, **ref_inputs)
    err = reference.relative_error(got, expected)
    tol = tolerance if tolerance is not None else TOLERANCES[problem.dtype]
    assert np.isfinite(err) and err <= tol, (
        f"{solver.name} on {problem.key}: relative error {err:.3g} > tolerance {tol:.3g}"
    )
    return err


def inputs_for(problem: ConvProblem, seed: int = 0) -> dict[str, Any]:
    """Random x, w, y arrays for ``problem`` (see :func:`miocore.reference.random_inputs`)."""
    return reference.random_inputs(problem, seed)


def __getattr__(name: str) -> Any:
    # SolverContract needs pytest; import it only when asked, so this module works without.
    if name == "SolverContract":
        from miocore.testing.plugin import SolverContract

        return SolverContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

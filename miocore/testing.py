"""Helpers for testing solvers: run one solver directly and compare it with the reference.

This module is importable without pytest. (An opt-in pytest plugin with fixtures and the full
solver contract suite builds on it.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miocore import reference
from miocore.backends.cpu import allocate_workspace, cpu_device_info
from miocore.dtypes import DataType
from miocore.problem import ConvProblem
from miocore.solver import (
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    Solver,
    normalize_applicability,
)

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
    arrays = {name: inputs[name].copy() if name in inputs else None for name in ("x", "w", "y")}
    if problem.is_transposed:
        arrays["x"], arrays["y"] = arrays["y"], arrays["x"]
    out_name = canon.direction.output_tensor
    from miocore.backends.cpu import empty_for

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

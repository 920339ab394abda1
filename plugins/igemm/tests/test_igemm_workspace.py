"""Workspace: exactly what the invoker carves, checked against independent formulas; too
little is refused; no scratch is allocated behind the caller's back."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from miocore_igemm import SOLVERS

import miocore
from miocore import ConvProblem, InvokeParams, PerfConfig, WorkspaceError, reference
from miocore.testing import check_solver, cpu_context

FWD, BWD, WRW = SOLVERS


def r64(nbytes: int) -> int:
    return -(-nbytes // 64) * 64


def _problem(direction="forward", **kw) -> ConvProblem:
    base = dict(n=3, c=8, k=6, in_spatial=(9, 10), filter_spatial=(3, 3), pads=(1, 1))
    return ConvProblem.from_sizes(direction, **{**base, **kw})


def _run(solver, problem, config, workspace):
    sol = solver.get_solution(cpu_context(), problem, config)
    inputs = reference.random_inputs(problem, 0)
    out = problem.direction.output_tensor
    inputs[out][...] = np.nan
    sol.invoker_factory(())(None, InvokeParams(problem=problem, workspace=workspace, **inputs))
    return inputs[out]


# (solver, problem kwargs, config, expected bytes from the README's formulas)
# Tap grid: P = prod(padded spatial); slack = offset of the last tap; nb images per chunk.
P, SLACK = 11 * 12, 2 * 12 + 2
CASES = [
    # forward tap NCHW fp16: weights (G,T,Kg,Cg) + input grid (C*nb*P + slack) + output (K*nb*P)
    (
        FWD,
        dict(dtype="float16"),
        PerfConfig(strategy="tap", block=2),
        r64(4 * 9 * 6 * 8) + r64(4 * (8 * 2 * P + SLACK)) + r64(4 * 6 * 2 * P),
    ),
    # backward data tap NHWC fp32, 2 groups: weights + dy grid (G*nb*P*Kg) + dx grid
    (
        BWD,
        dict(layout="NHWC", groups=2),
        PerfConfig(strategy="tap", block=1),
        r64(4 * 2 * 9 * 3 * 4) + r64(4 * 2 * P * 3) + r64(4 * 2 * (P + SLACK) * 4),
    ),
    # forward block fp32 NCHW (two whole 9x10 images per 256-pixel block: B = 180): padded x
    # (N*C*prod(padded)) + column block (B*T*C) + output block (B*K); w used in place
    (
        FWD,
        dict(),
        PerfConfig(strategy="block", block=256),
        r64(4 * 3 * 8 * P) + r64(4 * 180 * 9 * 8) + r64(4 * 180 * 6),
    ),
    # backward weights block bf16 NHWC, 2 groups, B = 180: w staging (G*Kg*T*Cg) + padded x
    # + column block (G*B*T*Cg) + dy block (G*B*Kg) + dw accumulator + per-block product
    (
        WRW,
        dict(layout="NHWC", groups=2, dtype="bfloat16"),
        PerfConfig(strategy="block", block=256),
        r64(4 * 6 * 9 * 4)
        + r64(4 * 3 * P * 8)
        + r64(4 * 2 * 180 * 9 * 4)
        + r64(4 * 2 * 180 * 3)
        + 2 * r64(4 * 6 * 9 * 4),
    ),
    # 1x1 float32 NCHW tap, one image per chunk: x, w and y are used in place
    (FWD, dict(filter_spatial=(1, 1), pads=(0, 0)), PerfConfig(strategy="tap", block=1), 0),
    (
        WRW,
        dict(filter_spatial=(1, 1), pads=(0, 0), layout="NHWC"),
        PerfConfig(strategy="tap", block=3),
        0,
    ),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_workspace_formula_and_exact_use(case) -> None:
    solver, kw, config, expected = CASES[case]
    problem = _problem(solver.direction, **kw)
    ctx = cpu_context()
    size = solver.workspace_size(ctx, problem, config)
    assert size == expected
    assert solver.get_solution(ctx, problem, config).workspace_size == size
    if size:
        # exactly that many bytes, filled with NaN garbage, is enough
        ws = np.full(size // 4, np.nan, np.float32).view(np.uint8)
        got = _run(solver, problem, config, ws)
        assert np.isfinite(got.astype(np.float32)).all()
        with pytest.raises(WorkspaceError, match="workspace"):
            _run(solver, problem, config, np.empty(size - 4, np.uint8))
        with pytest.raises(WorkspaceError, match="workspace"):
            _run(solver, problem, config, None)
    else:
        assert np.isfinite(_run(solver, problem, config, None).astype(np.float32)).all()
    check_solver(solver, problem, perf_config=config)


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
@pytest.mark.parametrize("strategy", ["tap", "block"])
def test_no_scratch_behind_the_callers_back(solver, strategy) -> None:
    problem = _problem(solver.direction, n=4, c=64, k=64, in_spatial=(40, 40), dtype="float16")
    config = PerfConfig(strategy=strategy, block=2 if strategy == "tap" else 256)
    sol = solver.get_solution(cpu_context(), problem, config)
    inputs = reference.random_inputs(problem, 0)
    ws = np.empty(sol.workspace_size, np.uint8)
    params = InvokeParams(problem=problem, workspace=ws, **inputs)
    invoker = sol.invoker_factory(())
    invoker(None, params)  # warm up caches (BLAS buffers are allocated once per process)
    tracemalloc.start()
    try:
        invoker(None, params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # numpy's casting buffers are a few KiB; the staging itself is megabytes
    assert sol.workspace_size > 1 << 20
    assert peak < 128 * 1024, f"invoker allocated {peak} bytes outside the workspace"


def test_registered_through_entry_point() -> None:
    names = {r.solver.name: r for r in miocore.solvers()}
    for solver in SOLVERS:
        assert names[solver.name].plugin == "igemm"
        assert names[solver.name].solver.algorithm is miocore.Algorithm.IMPLICIT_GEMM


def test_wti_ranks_sensibly() -> None:
    ctx = cpu_context()
    dense = _problem(n=8, c=256, k=256, in_spatial=(28, 28))
    depthwise = _problem(n=8, c=256, k=256, in_spatial=(28, 28), groups=256)
    w_dense, w_dw = FWD.wti(ctx, dense), FWD.wti(ctx, depthwise)
    assert 0 < w_dw < w_dense <= 1
    assert math.isfinite(w_dense)

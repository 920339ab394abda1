"""Property tests over random valid problems: applicable => correct; inapplicable => a reason.

Tolerances are miocore.testing.TOLERANCES (float32 2e-5, float16 2e-3, bfloat16 1.6e-2).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_direct import NaiveDirectSolver, TapsDirectSolver

from miocore import ConvProblem, InvalidArgumentError, PerfConfig
from miocore.backends.cpu import allocate_workspace
from miocore.testing import check_solver, cpu_context, inputs_for, run_solver
from miocore.testing.strategies import check_strictly, conv_problems

SOLVERS = (TapsDirectSolver(), NaiveDirectSolver())


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    rank = draw(st.sampled_from([2, 2, 3]))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = groups > 1 and draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, 3))
    kg = 1 if depthwise else draw(st.integers(1, 3))
    filt = tuple(draw(st.integers(1, 9 if rank == 2 else 4)) for _ in range(rank))
    dils = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(rank))
    ins = []
    for f, d, p in zip(filt, dils, pads, strict=True):
        smallest = max(1, d * (f - 1) + 1 - 2 * p)
        ins.append(draw(st.integers(smallest, smallest + (7 if rank == 2 else 3))))
    layout = draw(st.sampled_from(["NCHW", "NHWC"] if rank == 2 else ["NCDHW", "NDHWC"]))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(["forward", "backward_data", "backward_weights"])),
        n=draw(st.integers(1, 3)),
        c=cg * groups,
        k=kg * groups,
        in_spatial=tuple(ins),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        layout=layout,
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems(), st.integers(0, 2**16))
def test_applicable_means_correct(problem: ConvProblem, seed: int) -> None:
    ctx = cpu_context()
    for solver in SOLVERS:
        answer = solver.is_applicable(ctx, problem)
        if answer:
            check_solver(solver, problem, seed=seed)
            assert 0 < solver.wti(ctx, problem) <= 1
        else:
            assert answer.reason.startswith("filter ")
            with pytest.raises(InvalidArgumentError, match="filter"):
                solver.get_solution(ctx, problem)


@settings(max_examples=40, deadline=None)
@given(problems())
def test_output_fully_overwritten_and_inputs_untouched(problem: ConvProblem) -> None:
    """The output starts as NaN (run_solver) and the read tensors are left as they were."""
    ctx = cpu_context()
    inputs = inputs_for(problem, 1)
    before = {k: v.copy() for k, v in inputs.items()}
    for solver in SOLVERS:
        if solver.is_applicable(ctx, problem):
            out = run_solver(solver, problem, inputs)
            assert np.isfinite(out.astype(np.float32)).all()
    for name, array in inputs.items():
        assert np.array_equal(array, before[name], equal_nan=True), name


def test_bad_perf_config_is_named() -> None:
    p = ConvProblem.from_sizes(
        "forward", n=1, c=2, k=2, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1)
    )
    ctx = cpu_context()
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        TapsDirectSolver().get_solution(ctx, p, PerfConfig(block=3))
    with pytest.raises(InvalidArgumentError, match="perf_config"):
        NaiveDirectSolver().get_solution(ctx, p, PerfConfig(block=0))
    sol = TapsDirectSolver().get_solution(ctx, p)
    assert allocate_workspace(sol.workspace_size) is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_direct_edge_shapes_exact(problem: ConvProblem, seed: int) -> None:
    """Size-1 inputs, filters longer than the input, even filters, dilations into the
    padding (miocore.testing.strategies): an applicable solver is correct, and exactly zero
    where every tap sees only padding."""
    ctx = cpu_context()
    for solver in SOLVERS:
        if solver.is_applicable(ctx, problem.canonical):
            check_strictly(solver, problem, seed=seed, tolerance=None)

"""Property: wherever an igemm solver says it applies it is correct; where it does not, it
gives a reason and refuses to build a solution (so nothing runs)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_igemm import SOLVERS

from miocore import ConvProblem, ExecutionContext, InvalidProblemError, NotApplicableError
from miocore.testing import check_solver, cpu_context
from miocore.testing.strategies import check_strictly, conv_problems

# Tolerances as in test_igemm_corpus (float32 sums, one rounding to the output dtype).
TOLERANCE = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


@st.composite
def problems(draw) -> ConvProblem:
    rank = draw(st.sampled_from([2, 3]))
    layout = draw(st.sampled_from(["NCHW", "NHWC"] if rank == 2 else ["NCDHW", "NDHWC"]))
    g = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = g > 1 and draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, 4))
    kg = 1 if depthwise else draw(st.integers(1, 4))
    cap = 9 if rank == 2 else 5
    filt = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(rank))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(rank))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    sizes = tuple(
        draw(st.integers(max(1, d * (f - 1) + 1 - 2 * p), cap))
        for f, d, p in zip(filt, dil, pads, strict=True)
    )
    try:
        return ConvProblem.from_sizes(
            draw(st.sampled_from(["forward", "backward_data", "backward_weights"])),
            n=draw(st.integers(1, 3)),
            c=cg * g,
            k=kg * g,
            in_spatial=sizes,
            filter_spatial=filt,
            pads=pads,
            strides=strides,
            dilations=dil,
            groups=g,
            dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
            layout=layout,
        )
    except InvalidProblemError:  # pads larger than the filter reach can leave no output
        draw(st.just(None).filter(lambda _: False))
        raise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), seed=st.integers(0, 2**16))
def test_applicable_means_correct_else_reason(problem: ConvProblem, seed: int) -> None:
    ctx = cpu_context()
    applicable = 0
    for solver in SOLVERS:
        answer = solver.is_applicable(ctx, problem)
        if answer:
            applicable += 1
            for config in solver.perf_config_space(ctx, problem):
                check_solver(
                    solver,
                    problem,
                    seed=seed,
                    perf_config=config,
                    tolerance=TOLERANCE[problem.dtype.value],
                )
        else:
            assert answer.reason and problem.direction.value in answer.reason
            with pytest.raises(NotApplicableError, match=solver.name):
                solver.get_solution(ctx, problem)
            assert solver.wti(ctx, problem) < 0
    assert applicable == 1  # exactly the solver of the problem's direction


def test_other_backends_refused_with_reason() -> None:
    cpu = cpu_context()
    gpu = ExecutionContext(device=dataclasses.replace(cpu.device, backend="cuda"))
    problem = ConvProblem.from_sizes(
        "forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(3, 3)
    )
    answer = SOLVERS[0].is_applicable(gpu, problem)
    assert not answer and "cuda" in answer.reason
    with pytest.raises(NotApplicableError):
        SOLVERS[0].get_solution(gpu, problem)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_igemm_edge_shapes_exact(problem: ConvProblem, seed: int) -> None:
    """Size-1 inputs, filters longer than the input, even filters, dilations into the
    padding (miocore.testing.strategies): an applicable solver is correct, and exactly zero
    where every tap sees only padding."""
    ctx = cpu_context()
    for solver in SOLVERS:
        if solver.is_applicable(ctx, problem.canonical):
            check_strictly(solver, problem, seed=seed, tolerance=TOLERANCE[problem.dtype.value])

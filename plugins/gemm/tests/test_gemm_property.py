"""Property: on any valid small problem, an applicable GEMM solver matches the reference.

Random directions, 2-D and 3-D, groups, strides, pads, dilations, a layout per tensor (mixed
layouts included), non-packed strides, every dtype and random tile sizes. Tolerances as in
test_gemm_corpus: float32 2e-5, float16 2e-3, bfloat16 1.6e-2 (float32 accumulation, one
rounding to the output type).
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_gemm import SOLVERS, Gemm1x1Solver

from miocore import ConvolutionDescriptor, ConvProblem, DataType, PerfConfig, TensorDescriptor
from miocore.testing import check_solver, cpu_context
from miocore.testing.strategies import check_strictly, conv_problems

TOLERANCE = {DataType.FLOAT32: 2e-5, DataType.FLOAT16: 2e-3, DataType.BFLOAT16: 1.6e-2}
LAYOUTS = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def _descriptor(dtype: str, lengths: tuple[int, ...], layout: str, gap: int) -> TensorDescriptor:
    """A descriptor in ``layout``; with ``gap`` > 0 its innermost-but-one stride is widened."""
    if not gap:
        return TensorDescriptor(dtype, lengths, layout=layout)
    logical = "NCHW" if len(lengths) == 4 else "NCDHW"
    size = dict(zip(logical, lengths, strict=True))
    strides, step = {}, 1
    for i, dim in enumerate(reversed(layout)):
        strides[dim] = step
        step *= size[dim] + (gap if i == 0 else 0)
    return TensorDescriptor(dtype, lengths, strides=[strides[d] for d in logical])


@st.composite
def problems(draw) -> tuple[ConvProblem, PerfConfig | None]:
    rank = draw(st.sampled_from([2, 2, 3]))
    groups = draw(st.integers(1, 3))
    cg, kg = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    filt, pads, strides, dils, in_sp = [], [], [], [], []
    for _ in range(rank):
        f = draw(st.integers(1, 3))
        dil = draw(st.integers(1, 2))
        pad = draw(st.integers(0, 2))
        extent = dil * (f - 1) + 1
        size = draw(st.integers(max(1, extent - 2 * pad), 7 if rank == 2 else 5))
        filt.append(f), pads.append(pad), dils.append(dil), in_sp.append(size)
        strides.append(draw(st.integers(1, 3)))
    if draw(st.booleans()):  # make the pointwise special case frequent
        filt, pads = [1] * rank, [0] * rank
    dtype = draw(st.sampled_from(["float32", "float32", "float16", "bfloat16"]))
    layouts = [draw(st.sampled_from(LAYOUTS[rank])) for _ in range(3)]
    gaps = [draw(st.sampled_from([0, 0, 0, 2])) for _ in range(3)]
    conv = ConvolutionDescriptor(pads=pads, strides=strides, dilations=dils, groups=groups)
    x = _descriptor(dtype, (n, cg * groups, *in_sp), layouts[0], gaps[0])
    w = _descriptor(dtype, (kg * groups, cg, *filt), layouts[1], gaps[1])
    out = conv.output_spatial(in_sp, filt)
    y = _descriptor(dtype, (n, kg * groups, *out), layouts[2], gaps[2])
    direction = draw(st.sampled_from(["forward", "backward_data", "backward_weights"]))
    problem = ConvProblem(direction, x=x, w=w, y=y, conv=conv)
    lines = draw(st.one_of(st.none(), st.integers(1, 2 * n * math.prod(out[:-1]))))
    return problem, (PerfConfig({"tile_lines": lines}) if lines else None)


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
@given(problems())
def test_applicable_implies_correct(case) -> None:
    problem, config = case
    ctx = cpu_context()
    applied = 0
    for solver in SOLVERS:
        if solver.is_applicable(ctx, problem):
            check_solver(
                solver, problem, seed=1, perf_config=config, tolerance=TOLERANCE[problem.dtype]
            )
            applied += 1
    pointwise = all(f == 1 for f in problem.filter_spatial) and not any(problem.conv.pads)
    assert applied == (2 if pointwise else 1)
    assert bool(Gemm1x1Solver().is_applicable(ctx, problem)) == pointwise


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_gemm_edge_shapes_exact(problem: ConvProblem, seed: int) -> None:
    """Size-1 inputs, filters longer than the input, even filters, dilations into the
    padding (miocore.testing.strategies): an applicable solver is correct, and exactly zero
    where every tap sees only padding."""
    ctx = cpu_context()
    for solver in SOLVERS:
        if solver.is_applicable(ctx, problem.canonical):
            check_strictly(solver, problem, seed=seed, tolerance=TOLERANCE[problem.dtype])

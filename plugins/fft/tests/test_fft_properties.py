"""Property: applicable => matches the reference; inapplicable => a reason, and never run."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_fft import FftOverlapSave
from miocore_fft.accuracy import TOLERANCES

from miocore import ConvProblem, MiocoreError, reference
from miocore.testing import check_solver, cpu_context, inputs_for, run_solver
from miocore.testing.strategies import check_strictly, conv_problems

DIRECTIONS = ("forward", "backward_data", "backward_weights")
SOLVER = FftOverlapSave()
CTX = cpu_context()


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    """Small random problems of every kind; some are strided (so FFT must refuse them)."""
    rank = draw(st.sampled_from([2, 2, 3]))
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = groups > 1 and draw(st.booleans())
    cpg = 1 if depthwise else draw(st.integers(1, 3))
    kpg = 1 if depthwise else draw(st.integers(1, 3))
    cap = 12 if rank == 2 else 6
    filt = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    dil = tuple(draw(st.sampled_from([1, 1, 2])) for _ in range(rank))
    pads = tuple(draw(st.integers(0, 3)) for _ in range(rank))
    strides = tuple(draw(st.sampled_from([1, 1, 1, 2])) for _ in range(rank))
    spatial = []
    for f, d, p in zip(filt, dil, pads, strict=True):
        smallest = max(1, d * (f - 1) + 1 - 2 * p)
        spatial.append(draw(st.integers(smallest, max(smallest, cap))))
    layout = draw(st.sampled_from(["NCHW", "NHWC"] if rank == 2 else ["NCDHW", "NDHWC"]))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(DIRECTIONS)),
        n=draw(st.integers(1, 2)),
        c=cpg * groups,
        k=kpg * groups,
        in_spatial=tuple(spatial),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dil,
        groups=groups,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        layout=layout,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=problems(), tile=st.sampled_from([0, 16, 24]))
def test_fft_applicable_means_correct(problem: ConvProblem, tile: int) -> None:
    """Stride 1: applicable and correct under a default or forced tiling; else refused."""
    canon = problem.canonical
    answer = SOLVER.is_applicable(CTX, canon)
    if all(s == 1 for s in canon.conv.strides):
        assert answer, answer.reason
        config = SOLVER.default_perf_config(CTX, canon)
        if tile and SOLVER.is_valid_perf_config(CTX, canon, config.__class__(fft_len=tile)):
            config = config.__class__(fft_len=tile)
        check_solver(SOLVER, problem, perf_config=config, tolerance=TOLERANCES[problem.dtype])
    else:
        assert not answer
        assert "stride 1" in answer.reason and str(canon.conv.strides) in answer.reason
        # check_solver asks first and refuses to run an inapplicable solver
        with pytest.raises(AssertionError, match="not applicable"):
            check_solver(SOLVER, problem)


def test_fft_refuses_other_backends() -> None:
    """The solver names the backend it refuses."""
    import dataclasses

    problem = ConvProblem.from_sizes(
        "forward", n=1, c=1, k=1, in_spatial=(5, 5), filter_spatial=(3, 3)
    )
    gpu = dataclasses.replace(CTX, device=dataclasses.replace(CTX.device, backend="cuda"))
    answer = SOLVER.is_applicable(gpu, problem)
    assert not answer and "'cuda'" in answer.reason
    assert isinstance(MiocoreError("x"), Exception)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problems(strides=(1,)), seed=st.integers(0, 2**16))
def test_fft_edge_shapes_exact(problem: ConvProblem, seed: int) -> None:
    """Size-1 inputs, filters longer than the input, even filters, dilations into the
    padding: correct, and exactly zero where every tap sees only padding."""
    check_strictly(SOLVER, problem, seed=seed, tolerance=TOLERANCES[problem.dtype])


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize(("pad", "dilation"), [(1, 2), (2, 3)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fft_all_padding_outputs_are_zero(
    direction: str, pad: int, dilation: int, dtype: str
) -> None:
    """Issue 15: x 1x5, a 2x2 filter dilated across a size-1 input only ever sees padding;
    the answer is exactly zero (the transforms left ~1e-7 of noise: relative error 1e5+)."""
    problem = ConvProblem.from_sizes(
        direction,
        n=2,
        c=3,
        k=4,
        in_spatial=(1, 5),
        filter_spatial=(2, 2),
        pads=(pad, pad),
        dilations=(dilation, 1),
        dtype=dtype,
    )
    assert check_strictly(SOLVER, problem, tolerance=0.0) == 0.0


def test_fft_partly_dead_outputs_are_zero_and_rest_correct() -> None:
    """Only some rows see only padding (size-1 height, taps 0 and 3 of a pad-2 input): those
    rows are exact zeros, the others match the reference."""
    problem = ConvProblem.from_sizes(
        "forward",
        n=1,
        c=2,
        k=2,
        in_spatial=(1, 6),
        filter_spatial=(2, 3),
        pads=(2, 1),
        dilations=(2, 1),
    )
    inputs = inputs_for(problem, 3)
    got = run_solver(SOLVER, problem, inputs)
    expected = reference.convolution(problem, x=inputs["x"], w=inputs["w"])
    dead_rows = [r for r in range(expected.shape[2]) if not np.any(expected[:, :, r])]
    assert dead_rows and len(dead_rows) < expected.shape[2]
    assert not np.any(got[:, :, dead_rows])
    assert check_strictly(SOLVER, problem, seed=3) <= TOLERANCES[problem.dtype]

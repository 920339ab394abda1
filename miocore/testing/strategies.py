"""Hypothesis strategies for solver property tests, weighted towards the corners that hide bugs.

Uniform random problems almost never draw the shapes where index arithmetic breaks: a spatial
dimension of size 1, a filter larger than the input, an even filter, a dilation that reaches
into the padding (so that some, or all, outputs see only padding). :func:`conv_problems` draws
each spatial dimension from one of these regimes or a plain one, so every property test that
uses it exercises them on every run. :func:`strict_relative_error` is the comparison to use with
it: an output the reference says is exactly zero must be exactly zero.

Needs ``hypothesis`` (a test dependency, not a runtime one)::

    from miocore.testing.strategies import conv_problems, strict_relative_error

    @given(conv_problems(strides=(1,)))
    def test_my_solver(problem): ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import strategies as st

from miocore import reference
from miocore.problem.conv import ConvProblem

__all__ = [
    "REGIMES",
    "cancellation_floor",
    "check_strictly",
    "conv_problems",
    "spatial_dims",
    "strict_relative_error",
]

#: The regimes one spatial dimension is drawn from (see :func:`spatial_dims`).
REGIMES = ("size_one", "filter_larger", "dilated_into_padding", "even_filter", "plain")

DIRECTIONS = ("forward", "backward_data", "backward_weights")
DTYPES = ("float32", "float16", "bfloat16")


def _fits(size: int, f: int, d: int, pad: int, stride: int) -> bool:
    """Whether the output has at least one element along this dimension."""
    return size + 2 * pad >= d * (f - 1) + 1 and stride >= 1


@st.composite
def spatial_dims(
    draw: st.DrawFn,
    *,
    regime: str | None = None,
    max_filter: int = 5,
    max_size: int = 9,
    strides: Sequence[int] = (1, 2),
) -> tuple[int, int, int, int, int]:
    """One spatial dimension: ``(input size, filter, dilation, pad, stride)``, always valid.

    ``size_one``: input of 1, a filter of 1 to ``max_filter`` taps, padded just enough.
    ``filter_larger``: the (undilated) filter is longer than the input; the padding makes up.
    ``dilated_into_padding``: dilation >= 2 and a pad, so taps land in the padding (with an
    even filter and a size-1 input every tap may, and the whole output is zero).
    ``even_filter``: 2 or 4 taps. ``plain``: anything small.
    """
    regime = regime or draw(st.sampled_from(REGIMES))
    stride = draw(st.sampled_from(tuple(strides)))
    if regime == "size_one":
        f = draw(st.integers(1, max_filter))
        d = draw(st.integers(1, 3))
        least = math.ceil((d * (f - 1)) / 2)
        pad = draw(st.integers(least, least + 2))
        return 1, f, d, pad, stride
    if regime == "filter_larger":
        f = draw(st.integers(2, max_filter))
        d = draw(st.integers(1, 2))
        size = draw(st.integers(1, f - 1))
        least = math.ceil(max(0, d * (f - 1) + 1 - size) / 2)
        pad = draw(st.integers(least, least + 1))
        return size, f, d, pad, stride
    if regime == "dilated_into_padding":
        f = draw(st.sampled_from([2, 2, 3, 4][: max(1, max_filter - 1)]))
        d = draw(st.integers(2, 4))
        pad = draw(st.integers(1, 3))
        least = max(1, d * (f - 1) + 1 - 2 * pad)
        size = draw(st.integers(least, max(least, min(max_size, least + 3))))
        return size, f, d, pad, stride
    if regime == "even_filter":
        f = draw(st.sampled_from([2, 4] if max_filter >= 4 else [2]))
    else:
        f = draw(st.integers(1, max_filter))
    d = draw(st.integers(1, 2))
    pad = draw(st.integers(0, 2))
    least = max(1, d * (f - 1) + 1 - 2 * pad)
    size = draw(st.integers(least, max(least, max_size)))
    return size, f, d, pad, stride


@st.composite
def conv_problems(
    draw: st.DrawFn,
    *,
    directions: Sequence[str] = DIRECTIONS,
    dtypes: Sequence[str] = DTYPES,
    ranks: Sequence[int] = (2, 2, 3),
    strides: Sequence[int] = (1, 1, 2),
    max_filter: int = 5,
    max_size: int = 9,
    groups: Sequence[int] = (1, 1, 2, 3),
) -> ConvProblem:
    """A small valid problem of any direction, rank, layout, dtype and grouping, whose every
    spatial dimension comes from one of :data:`REGIMES` (see :func:`spatial_dims`)."""
    rank = draw(st.sampled_from(tuple(ranks)))
    g = draw(st.sampled_from(tuple(groups)))
    depthwise = g > 1 and draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, 3))
    kg = 1 if depthwise else draw(st.integers(1, 3))
    cap = max_size if rank == 2 else min(max_size, 5)
    filt_cap = max_filter if rank == 2 else min(max_filter, 4)
    dims = [
        draw(spatial_dims(max_filter=filt_cap, max_size=cap, strides=strides)) for _ in range(rank)
    ]
    layout = draw(st.sampled_from(["NCHW", "NHWC"] if rank == 2 else ["NCDHW", "NDHWC"]))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(tuple(directions))),
        n=draw(st.integers(1, 2)),
        c=cg * g,
        k=kg * g,
        in_spatial=tuple(d[0] for d in dims),
        filter_spatial=tuple(d[1] for d in dims),
        dilations=tuple(d[2] for d in dims),
        pads=tuple(d[3] for d in dims),
        strides=tuple(d[4] for d in dims),
        groups=g,
        dtype=draw(st.sampled_from(tuple(dtypes))),
        layout=layout,
    )


def strict_relative_error(result: Any, expected: np.ndarray, floor: float = 0.0) -> float:
    """:func:`miocore.reference.relative_error`, except that where the reference is all
    zeros any non-zero output is an infinite error, and a NaN anywhere is infinite; the
    divisor is never below ``floor`` (see :func:`cancellation_floor`).

    An output whose every tap lies in the padding is exactly zero; a solver that returns
    rounding noise there has an unbounded relative error (``fft.overlap_save`` did).
    """
    got = np.asarray(result).astype(np.float64)
    if not np.isfinite(got).all():
        return math.inf
    if expected.size and not np.any(expected):
        return 0.0 if not np.any(got) else math.inf
    scale = max(float(np.max(np.abs(expected))), floor)
    return float(np.max(np.abs(got - expected))) / scale


def cancellation_floor(problem: ConvProblem, inputs: dict[str, np.ndarray]) -> float:
    """The smallest divisor a relative error of ``problem`` on ``inputs`` is taken against:
    the largest sum of the terms' magnitudes (the reference on the inputs' absolute values)
    over the square root of the reduction length.

    Rounding error grows with the terms' magnitudes, not with the result's: where a short
    random sum cancels (a 1x1 output of two taps came to 0.0075 from terms near 0.5), an fp32
    sum may err by ~8e-6 relative to the result, and a Winograd solver, whose transforms form
    values of the terms' size, erred by 6.5e-6 against a 2e-6 tolerance. On sums that do not
    cancel, random-sign terms add up to more than this floor, so it does not lower the bar.
    """
    from miocore.solver.numerics import reduction_length

    out_name = problem.direction.output_tensor
    magnitudes = {k: np.abs(v.astype(np.float64)) for k, v in inputs.items() if k != out_name}
    sums = reference.convolution(problem, **magnitudes)
    if not sums.size:
        return 0.0
    return float(np.max(sums)) / math.sqrt(max(1, reduction_length(problem)))


def check_strictly(
    solver: Any,
    problem: ConvProblem,
    *,
    seed: int = 0,
    perf_config: Any = None,
    tolerance: float | None = None,
) -> float:
    """:func:`miocore.testing.check_solver` with :func:`strict_relative_error`; returns it."""
    from miocore.testing import TOLERANCES, run_solver

    inputs = reference.random_inputs(problem, seed)
    got = run_solver(solver, problem, inputs, perf_config=perf_config)
    out_name = problem.direction.output_tensor
    expected = reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out_name})
    err = strict_relative_error(got, expected, cancellation_floor(problem, inputs))
    bound = tolerance if tolerance is not None else TOLERANCES[problem.dtype]
    assert err <= bound, (
        f"{solver.name} on {problem.key}: relative error {err:.3g} > tolerance {bound:.3g}"
        f" (reference max |value| {float(np.max(np.abs(expected), initial=0.0)):.3g})"
    )
    return err

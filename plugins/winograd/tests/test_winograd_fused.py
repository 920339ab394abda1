"""winograd.fused: the contract suite, and its answers against the float64 reference on random
data in both directions, both layouts, both tiles, partial tiles, every pad, chunked runs."""

from __future__ import annotations

import numpy as np
import pytest
from miocore_winograd import WinogradFused
from miocore_winograd.fused_kernels import input_source, output_source

import miocore
from miocore import ConvProblem, InvokeParams, PerfConfig, reference
from miocore.testing import SolverContract, cpu_context

pytest.importorskip("numba")

FP32_BY_TILE = {2: 2e-6, 4: 3e-5}


def tolerance(problem: ConvProblem, config: PerfConfig | None) -> float:
    """The bound for ``problem`` under ``config`` (the wider tile when none is given)."""
    return FP32_BY_TILE[config["tile"]] if config is not None else max(FP32_BY_TILE.values())


class TestWinogradFusedContract(SolverContract):
    """winograd.fused: 3x3 stride-1 float32 forward and backward data, tile x chunk configs."""

    solver = WinogradFused()
    tolerance = tolerance


def _problem(direction: str, layout: str, n: int, c: int, k: int, hw: tuple[int, int], pad: int):
    return miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=(3, 3),
        pads=(pad, pad),
        layout=layout,
    )


CASES = [
    # (n, c, k, (h, w), pad): partial tiles on both sides, a channel count that is no
    # vector width, pads 0 to 2, more tiles than one chunk
    (2, 5, 7, (9, 11), 1),
    (1, 16, 24, (13, 6), 0),
    (3, 32, 16, (10, 10), 2),
    (2, 24, 40, (30, 29), 1),
]


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("block", [-1, 0, 128])
@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"n{c[0]}c{c[1]}k{c[2]}{c[3]}p{c[4]}")
def test_matches_the_float64_reference(
    case: tuple, tile: int, block: int, direction: str, layout: str
) -> None:
    n, c, k, hw, pad = case
    p = _problem(direction, layout, n, c, k, hw, pad)
    solver, ctx = WinogradFused(), cpu_context()
    assert solver.is_applicable(ctx, p)
    config = PerfConfig(tile=tile, block=block)
    arrays = reference.random_inputs(p, 7)
    out = p.direction.output_tensor
    expected = reference.convolution(p, **{name: a for name, a in arrays.items() if name != out})
    arrays[out][...] = np.nan
    sol = solver.get_solution(ctx, p, config)
    ws = np.empty(sol.workspace_size, np.uint8)
    sol.invoker_factory(())(None, InvokeParams(problem=p, workspace=ws, **arrays))
    err = np.abs(arrays[out] - expected).max() / np.abs(expected).max()
    assert err <= solver.expected_error(ctx, p, config), err


def test_not_applicable_outside_its_case() -> None:
    ctx, solver = cpu_context(), WinogradFused()
    base = dict(n=1, c=4, k=4, in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1))
    assert solver.is_applicable(ctx, miocore.ConvProblem.from_sizes("forward", **base))
    for change, word in [
        (dict(strides=(2, 2)), "stride"),
        (dict(filter_spatial=(5, 5)), "filter"),
        (dict(groups=2), "groups"),
        (dict(dtype="float16"), "float16"),
    ]:
        changed = miocore.ConvProblem.from_sizes("forward", **{**base, **change})
        answer = solver.is_applicable(ctx, changed)
        assert not answer and word in answer.reason
    weights = miocore.ConvProblem.from_sizes("backward_weights", **base)
    assert not solver.is_applicable(ctx, weights)
    wide = miocore.ConvProblem.from_sizes("backward_data", **{**base, "pads": (3, 3)})
    assert not solver.is_applicable(ctx, wide)


def test_generated_transforms_skip_zero_coefficients() -> None:
    # F(2,3)'s B^T has 8 zeros of 16: no term of the source multiplies by a zero constant,
    # and unit coefficients appear without a multiply
    text = input_source(2, 3) + output_source(2, 3)
    assert "np.float32(0.0) *" not in text and "* np.float32(1.0)" not in text
    assert "K0 = np.float32" not in output_source(2, 3)  # A^T of F(2,3) is all +-1 and 0

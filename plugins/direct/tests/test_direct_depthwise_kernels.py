"""direct.depthwise's CPU kernels one by one against the reference: register-blocked rows,
tiles, full rows, the strided backward data's phases, the stride-2 even-width kernel and the
backward-weights tiles (tolerances as ``test_direct_depthwise.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from direct_depthwise_support import depthwise_problem, twenty_channels
from miocore_direct import DepthwiseDirectSolver

from miocore import ConvProblem
from miocore.testing import TOLERANCES, check_solver


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize(
    ("filt", "strides", "pads", "dils", "size", "layout", "dtype"),
    [
        ((3, 3), (1, 1), (1, 1), (1, 1), (9, 13), "NHWC", "float32"),
        ((3, 3), (2, 2), (1, 1), (2, 1), (12, 14), "NHWC", "float32"),
        ((3, 2), (1, 1), (0, 1), (1, 1), (7, 11), "NHWC", "bfloat16"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (14, 10), "NCHW", "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (6, 11), "NHWC", "float16"),
        ((3, 5), (1, 1), (0, 4), (2, 2), (8, 12), "NCHW", "bfloat16"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (11, 12), "NHWC", "float32"),
        ((1, 7), (2, 1), (0, 3), (1, 1), (5, 9), "NCHW", "float32"),
        ((3, 3), (1, 1), (3, 2), (1, 1), (7, 9), "NCHW", "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (40, 37), "NCHW", "float32"),
        ((3, 3), (1, 1), (1, 1), (1, 1), (6, 6), "NCHW", "float16"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (13, 16), "NCHW", "float32"),
        ((4, 3), (2, 2), (0, 1), (1, 1), (12, 9), "NCHW", "bfloat16"),
        ((3, 3), (2, 2), (1, 1), (2, 2), (11, 11), "NCHW", "float32"),
    ],
)
def test_register_blocked_kernel_matches_reference(
    direction: str, filt, strides, pads, dils, size, layout: str, dtype: str
) -> None:
    """The generated kernels (depthwise_blocked.py): forward, and backward data at stride 1;
    20 channels (one 16-lane vector and a remainder), edge pixels, tile remainders, pads
    beyond the filter's reach. NCHW takes a plane kernel at stride 1 (forward and backward
    data) and at stride 2 without dilation (forward), where its padding (for backward data,
    (F - 1) * d - p) is not negative; a float16 one is cast in NCHW order."""
    from miocore_direct.depthwise import _Plan

    problem = twenty_channels(direction, 2, filt, pads, strides, dils, size, dtype, layout)
    effective = pads
    if direction == "backward_data":
        effective = tuple((f - 1) * d - p for f, d, p in zip(filt, dils, pads, strict=True))
    plane = (
        layout == "NCHW"
        and min(effective) >= 0
        and (strides == (1, 1) or (strides, dils, direction) == ((2, 2), (1, 1), "forward"))
    )
    blocked = not plane and (direction == "forward" or strides == (1, 1))
    plan = _Plan(problem)
    assert (plan.plane, plan.blocked) == (plane, blocked)
    check_solver(DepthwiseDirectSolver(), problem, seed=7, tolerance=TOLERANCES[problem.dtype])


@pytest.mark.parametrize(
    ("filt", "pads", "dils", "size", "dtype"),
    [
        ((3, 3), (1, 1), (1, 1), (9, 13), "float32"),
        ((7, 7), (3, 3), (1, 1), (14, 10), "float32"),
        ((3, 5), (0, 4), (2, 2), (8, 12), "bfloat16"),
        ((4, 3), (2, 0), (1, 1), (7, 6), "float16"),
    ],
)
def test_plane_backward_weights_matches_reference(filt, pads, dils, size, dtype: str) -> None:
    """NCHW backward weights at stride 1 through the plane kernel: dot products of dy's grid
    with the shifted input plane, every filter shape, padding beyond reach, dilation, and
    float16/bfloat16 cast in NCHW order."""
    from miocore_direct.depthwise import _Plan

    problem = twenty_channels("backward_weights", 3, filt, pads, (1, 1), dils, size, dtype, "NCHW")
    plan = _Plan(problem)
    assert plan.plane and plan.parts == 0
    check_solver(DepthwiseDirectSolver(), problem, seed=11, tolerance=TOLERANCES[problem.dtype])


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize(
    ("filt", "strides", "pads", "dils", "size", "dtype"),
    [
        ((7, 7), (1, 1), (3, 3), (1, 1), (14, 23), "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (12, 9), "bfloat16"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (29, 31), "float16"),
        ((7, 7), (2, 2), (3, 3), (1, 1), (19, 40), "float32"),
        ((5, 5), (1, 1), (0, 4), (2, 2), (17, 26), "float32"),
        ((7, 5), (1, 1), (2, 1), (1, 1), (5, 30), "float32"),
        ((5, 7), (1, 2), (4, 3), (1, 1), (12, 35), "bfloat16"),
        ((8, 6), (2, 2), (1, 5), (1, 1), (16, 27), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (9, 6), "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (7, 5), "float32"),
        ((3, 7), (1, 1), (1, 5), (1, 1), (8, 12), "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (9, 7), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (7, 7), "float32"),
        ((5, 5), (1, 1), (2, 2), (1, 1), (14, 14), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (13, 17), "float32"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (14, 14), "float32"),
        ((5, 5), (1, 1), (3, 3), (1, 1), (11, 12), "float32"),
        ((5, 5), (2, 1), (4, 2), (2, 2), (19, 20), "float32"),
        ((7, 7), (2, 2), (3, 3), (1, 1), (15, 15), "float32"),
        ((7, 7), (2, 2), (3, 3), (1, 1), (14, 14), "float32"),
        ((5, 5), (2, 2), (1, 1), (1, 1), (13, 12), "float32"),
        ((5, 5), (2, 2), (4, 4), (2, 2), (20, 21), "float32"),
        ((5, 5), (2, 2), (3, 5), (1, 1), (9, 10), "float32"),
        ((5, 5), (2, 2), (1, 1), (1, 1), (9, 40), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (6, 45), "float32"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (5, 70), "float32"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (5, 71), "bfloat16"),
        ((5, 5), (2, 2), (1, 1), (1, 1), (5, 72), "float32"),
        ((5, 5), (1, 1), (4, 4), (2, 2), (6, 40), "float32"),
        ((3, 3), (1, 1), (1, 1), (1, 1), (9, 40), "float32"),
        ((3, 3), (2, 2), (1, 1), (1, 1), (12, 71), "float32"),
        ((3, 3), (1, 1), (1, 1), (1, 1), (14, 14), "float32"),
        ((3, 3), (2, 2), (1, 1), (1, 1), (28, 28), "bfloat16"),
        ((3, 3), (1, 1), (2, 2), (2, 2), (10, 37), "float32"),
        ((3, 3), (1, 1), (0, 0), (1, 1), (5, 33), "float16"),
        ((3, 3), (2, 2), (0, 0), (1, 1), (7, 7), "float32"),
    ],
)
def test_tile_kernel_matches_reference(
    direction: str, filt, strides, pads, dils, size, dtype: str
) -> None:
    """The all-taps tile kernels (depthwise_tiles.py, 3x3 to 8x8, NHWC): forward at stride 1
    and 2, backward data at stride 1 (strided backward data takes the phase kernels); full
    tiles and an overlapping last tile, rows in the vertical padding (a 5-row image under a
    7-row filter: no row has every filter row), edge columns, dilation, pads beyond the
    filter's reach, column stride alone, float16/bfloat16 staged in float32. Outputs of more
    than 32 columns: interior columns split evenly (39 into 5 tiles of 8, 33-34 at stride 2
    into 5 of 7), edge tiles generated for the padding, at column stride 2 with the right
    side fixed by the width's parity (70 and 71 columns; padding 1 on 72: no right edge
    pixel), dilation 2. Outputs of at most 32 columns take whole-row tiles where the padding
    is within the filter's reach (in 2 segments above 16 columns: 17 to 28 here): 5x5 and
    7x7, stride 1 and 2, dilation 2, padding beyond half the filter; a padding beyond the
    reach (10 columns padded 5 under 5x5/2) keeps the pixel loop."""
    from miocore_direct.depthwise import _Plan
    from miocore_direct.depthwise_choice import tiles_apply as _tiles_apply

    problem = twenty_channels(direction, 2, filt, pads, strides, dils, size, dtype, "NHWC")
    plan = _Plan(problem)
    tiles = direction == "forward" or strides == (1, 1)
    assert plan.blocked == tiles and not plan.plane
    assert _tiles_apply(plan.mult, plan.filt, strides[1], dils[1])
    if tiles:
        from miocore_direct.depthwise_tile_shapes import MAX_FULL, edge_pad_for

        name = plan.generated()[0][0]
        # backward data: a forward pass of dy (its width) padded (F - 1) * d - p
        fwd = direction == "forward"
        width, out_w = (size[1], plan.outs[1]) if fwd else (plan.outs[1], size[1])
        pw = pads[1] if fwd else (filt[1] - 1) * dils[1] - pads[1]
        full = out_w <= MAX_FULL and edge_pad_for(filt[1], strides[1], dils[1], pw) > 0
        assert (f"_w{width}_" in name + "_") == full
    check_solver(DepthwiseDirectSolver(), problem, seed=13, tolerance=TOLERANCES[problem.dtype])


@pytest.mark.parametrize(("width", "stride"), [(7, 1), (11, 1), (14, 2), (13, 2)])
def test_full_row_kernel_matches_reference_and_falls_back_on_other_widths(
    width: int, stride: int
) -> None:
    """A kernel generated for whole-row tiles of 7 (stride 1) or 14 (stride 2) input columns,
    padding 2 under 5x5, against a float64 reference: on its own width through the row
    tiles, on another width (11, 13) through the pixel loop it keeps for other calls."""
    from miocore_direct.depthwise_tiles import tile_kernel

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, width, 16), dtype=np.float32)
    wt = rng.standard_normal((5, 5, 16), dtype=np.float32)
    out_w = (width + 4 - 5) // stride + 1
    y = np.empty((2, 6, out_w, 16), np.float32)
    kernel = tile_kernel(5, 5, stride, 1, 16, edge_pad=2, full_width=7 * stride)
    kernel(x, wt, y, x.reshape(-1), wt.reshape(-1), y.reshape(-1), 1, 2, 1, 2)
    xp = np.pad(x.astype(np.float64), ((0, 0), (2, 2), (2, 2), (0, 0)))
    ref = np.zeros(y.shape)
    for fy in range(5):
        for fx in range(5):
            cols = xp[:, fy : fy + 6, fx : fx + stride * (out_w - 1) + 1 : stride]
            ref += cols * wt[fy, fx].astype(np.float64)
    assert np.abs(y - ref).max() <= 2e-5 * np.abs(ref).max()


def test_tile_kernel_refuses_strided_arrays() -> None:
    """Flat indexing needs packed arrays: a strided view is refused, never read wrongly."""
    from miocore_direct.depthwise_tiles import run

    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 9, 20, 16), dtype=np.float32)
    wt = rng.standard_normal((5, 5, 16), dtype=np.float32)
    y = np.empty((1, 9, 10, 16), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        run(x[:, :, ::2], wt, y, 1, 2, 1, 2, 1, 1)


@pytest.mark.parametrize(
    ("filt", "strides", "pads", "size"),
    [(5, 2, 2, 11), (5, 2, 0, 12), (3, 2, 1, 9), (1, 2, 0, 7), (7, 3, 5, 14), (4, 2, 3, 1),
     (2, 3, 0, 2), (8, 2, 1, 16)],
)  # fmt: skip
def test_phases_split_the_gather_exactly(filt: int, strides: int, pads: int, size: int) -> None:
    """Along one axis, the phases of depthwise_phases.py are the gather rewritten: every tap in
    exactly one phase, and each phase's correlation with its padding equals the float64
    gather ``dx[i] = sum dy[(i + p - f) / s] * w[f]`` on random data."""
    from miocore_direct.depthwise_phases import phases_1d

    out = (size + 2 * pads - filt) // strides + 1
    if out < 1:
        pytest.skip("no output")
    rng = np.random.default_rng(filt * 100 + size)
    dy, w = rng.standard_normal(out), rng.standard_normal(filt)
    gather = np.zeros(size)
    for i in range(size):
        for f in range(filt):
            t = i + pads - f
            if t % strides == 0 and 0 <= t // strides < out:
                gather[i] += dy[t // strides] * w[f]
    phases = phases_1d(filt, strides, pads, size)
    assert sorted(t for p in phases for t in p.taps) == list(range(filt))
    got = np.full(size, np.nan)
    for p in phases:
        for a in range(p.count):
            reads = [(a - p.pad + u, tap) for u, tap in enumerate(p.taps)]
            got[p.residue + strides * a] = sum(dy[j] * w[t] for j, t in reads if 0 <= j < out)
    np.testing.assert_allclose(got, gather, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("filt", "strides", "pads", "size", "layout", "dtype"),
    [
        ((5, 5), (2, 2), (2, 2), (29, 31), "NHWC", "float32"),
        ((5, 5), (2, 2), (2, 2), (12, 9), "NCHW", "bfloat16"),
        ((3, 3), (2, 2), (1, 1), (23, 40), "NHWC", "float32"),
        ((3, 3), (2, 2), (0, 2), (10, 11), "NHWC", "float16"),
        ((1, 1), (2, 2), (0, 0), (7, 8), "NHWC", "float32"),
        ((3, 5), (2, 1), (4, 2), (9, 30), "NCHW", "float32"),
        ((5, 3), (3, 2), (4, 1), (16, 13), "NHWC", "float32"),
        ((2, 2), (2, 2), (0, 0), (6, 4), "NHWC", "float32"),
    ],
)
def test_strided_backward_data_phases_match_reference(
    filt, strides, pads, size, layout: str, dtype: str
) -> None:
    """Strided backward data through the phase kernels (depthwise_phases.py): tiles and an
    overlapping last tile, edge columns, phases whose padding is negative (pads beyond the
    filter's reach), zero phases (a 1x1 filter at stride 2), unequal strides (2, 1) and
    (3, 2), a filter narrower than the stride in one axis, float16/bfloat16 staged, NCHW
    staged to channels-last; random data against the float64 reference."""
    from miocore_direct.depthwise import _Plan

    problem = twenty_channels("backward_data", 2, filt, pads, strides, (1, 1), size, dtype, layout)
    plan = _Plan(problem)
    assert plan.phased and not plan.blocked and not plan.plane
    check_solver(DepthwiseDirectSolver(), problem, seed=17, tolerance=TOLERANCES[problem.dtype])


def test_strided_backward_data_with_dilation_keeps_the_gather() -> None:
    """Dilation or a channel multiplier is not phase-split (the generic gather runs)."""
    from miocore_direct.depthwise import _Plan

    dilated = twenty_channels(
        "backward_data", 1, (3, 3), (1, 1), (2, 2), (2, 2), (9, 9), "float32", "NHWC"
    )
    assert not _Plan(dilated).phased
    assert not _Plan(depthwise_problem("backward_data", "NHWC", "float32", mult=2)).phased


@pytest.mark.parametrize(
    ("filt", "pads", "size"),
    [
        ((3, 3), (1, 1), (28, 28)),  # MobileNetV2's stride-2 layers
        ((5, 5), (2, 2), (14, 16)),  # EfficientNet's: a right column past the image
        ((3, 3), (0, 0), (9, 10)),  # odd height, no padding
        ((3, 5), (1, 2), (7, 12)),
        ((4, 3), (0, 1), (6, 8)),  # taller than wide filter, padding on one axis
        ((7, 7), (3, 3), (11, 14)),
        ((3, 3), (3, 4), (5, 6)),  # padding past the filter's reach
        ((2, 2), (0, 0), (4, 2)),  # one pair of columns
        ((5, 5), (1, 3), (10, 4)),  # the filter wider than the image
        ((1, 2), (0, 2), (3, 2)),  # output wider than the grid allows: the phase kernel
        ((3, 3), (1, 3), (6, 8)),  # padding past half the filter: the phase kernel
    ],
)
def test_stride2_even_width_kernel_matches_reference(filt, pads, size) -> None:
    """The stride-2 NCHW kernel for even widths (flat column split, one grid pass per filter
    row, wrapped taps taken back) against a float64 reference: padding on one or both axes,
    odd heights, a right-hand column whose taps pass the image, padding beyond the filter;
    outputs wider than its grid allows take the four-phase kernel (hypothesis found one)."""
    from miocore_direct.depthwise_plane import stride2_even_applies, stride2_kernel

    rng = np.random.default_rng(11)
    n, c = 2, 5
    x = rng.standard_normal((n, c, *size)).astype(np.float32)
    wt = rng.standard_normal((c, *filt)).astype(np.float32)
    (ph, pw), (fh, fw) = pads, filt
    out_h = (size[0] + 2 * ph - fh) // 2 + 1
    out_w = (size[1] + 2 * pw - fw) // 2 + 1
    xp = np.zeros((n, c, size[0] + 2 * ph + 2, size[1] + 2 * pw + 2))
    xp[:, :, ph : ph + size[0], pw : pw + size[1]] = x
    expected = np.zeros((n, c, out_h, out_w))
    for fy in range(fh):
        for fx in range(fw):
            cols = xp[:, :, fy : fy + 2 * out_h : 2, fx : fx + 2 * out_w : 2][:, :, :out_h, :out_w]
            expected += cols * wt[None, :, fy, fx, None, None].astype(np.float64)
    assert stride2_even_applies(size[1], out_w) == (size[1] % 2 == 0 and 2 * pw <= fw + 1)
    y = np.full((n, c, out_h, out_w), np.nan, np.float32)
    stride2_kernel(filt, size[1], out_w)(x, wt, y, ph, pw)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize(
    ("filt", "strides", "pads", "dils", "size", "dtype"),
    [
        ((3, 3), (1, 1), (1, 1), (1, 1), (9, 40), "float32"),
        ((3, 3), (2, 2), (1, 1), (1, 1), (12, 71), "float32"),
        ((3, 3), (1, 1), (1, 1), (1, 1), (7, 7), "bfloat16"),
        ((3, 3), (1, 1), (0, 0), (1, 1), (5, 33), "float16"),
        ((3, 3), (1, 1), (2, 2), (2, 2), (10, 37), "float32"),
        ((5, 5), (2, 2), (2, 2), (1, 1), (29, 31), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (6, 45), "float32"),
        ((7, 7), (1, 1), (3, 3), (1, 1), (9, 5), "float32"),
        ((3, 3), (1, 1), (4, 4), (1, 1), (8, 21), "float32"),
    ],
)
def test_wrw_tile_kernel_matches_reference(filt, strides, pads, dils, size, dtype: str) -> None:
    """Channels-last backward weights on the register tiles (depthwise_wrw_tiles.py): tiles
    of 8 columns and a remainder tile (40 columns less the edges: 4 tiles and 6), column
    stride 2 on an odd width, an image narrower than one tile (7x7: the remainder alone), no
    padding (no edge columns), dilation 2, 5x5 and 7x7, a width below the 7x7 filter's reach
    (5 columns: every column an edge), padding beyond the filter's reach (edges wider than
    the taps: the per-pixel loop); float16/bfloat16 staged in float32."""
    from miocore_direct.depthwise import _Plan

    problem = twenty_channels("backward_weights", 3, filt, pads, strides, dils, size, dtype, "NHWC")
    plan = _Plan(problem)
    assert plan.wrw_tiles and not plan.plane
    assert plan.generated()[0][0].startswith("dw_wrw_tiles_")
    check_solver(DepthwiseDirectSolver(), problem, seed=17, tolerance=TOLERANCES[problem.dtype])


def test_wrw_tiles_leave_a_channel_multiplier_to_the_generic_kernel() -> None:
    from miocore_direct.depthwise import _Plan

    problem = ConvProblem.from_sizes(
        "backward_weights",
        n=2,
        c=8,
        k=16,
        in_spatial=(9, 12),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=8,
        layout="NHWC",
    )
    plan = _Plan(problem)
    assert not plan.wrw_tiles and plan.generated() == []
    check_solver(DepthwiseDirectSolver(), problem, seed=19, tolerance=TOLERANCES[problem.dtype])

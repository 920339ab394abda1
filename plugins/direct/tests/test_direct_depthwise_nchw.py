"""direct.depthwise on NCHW: the stride-2 backward-data planes, planes or staging by row
length, the block transposes that stage NCHW through the NHWC kernels (tolerances as
``test_direct_depthwise.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from direct_depthwise_support import DIRECTIONS, twenty_channels
from miocore_direct import DepthwiseDirectSolver

from miocore import ConvProblem
from miocore.testing import TOLERANCES, check_solver


@pytest.mark.parametrize(
    ("filt", "pads", "size", "dtype"),
    [
        ((5, 5), (2, 2), (29, 31), "float32"),
        ((5, 5), (0, 3), (24, 26), "float32"),
        ((3, 3), (1, 1), (25, 24), "float32"),
        ((3, 3), (0, 2), (27, 30), "bfloat16"),
        ((4, 3), (3, 1), (30, 25), "float16"),
        ((2, 5), (0, 4), (24, 33), "float32"),
        ((7, 8), (6, 7), (24, 24), "float32"),
    ],
)
def test_nchw_stride2_backward_data_planes_match_reference(filt, pads, size, dtype) -> None:
    """NCHW backward data at stride 2 through depthwise_plane_bwd.py (no transposes): odd and
    even sizes (unequal column-phase counts), both pad parities, pads beyond the filter's
    reach (negative phase padding), even and odd filters (every phase's tap count),
    float16/bfloat16 cast in NCHW order; random data against the float64 reference.
    Planes under 24x24 keep the channels-last phases (asserted)."""
    from miocore_direct.depthwise import _Plan

    problem = twenty_channels("backward_data", 2, filt, pads, (2, 2), (1, 1), size, dtype, "NCHW")
    plan = _Plan(problem)
    assert plan.plane and plan.plane_bwd2 and not plan.phased
    check_solver(DepthwiseDirectSolver(), problem, seed=23, tolerance=TOLERANCES[problem.dtype])
    small = twenty_channels("backward_data", 2, filt, pads, (2, 2), (1, 1), (14, 14), dtype,
                             "NCHW")  # fmt: skip
    assert not _Plan(small).plane and _Plan(small).phased


@pytest.mark.parametrize(
    "c, hw, f, s, staged",
    [
        (672, 14, 5, 2, True),  # 7-wide output rows for a 5-wide filter: staged
        (192, 10, 7, 1, True),  # 10-wide rows for a 7-wide filter: staged
        (576, 10, 5, 1, True),  # 10-wide rows for a 5-wide filter: staged
        (64, 20, 5, 1, False),  # 20-wide rows for a 5-wide filter: planes
        (16, 10, 5, 2, False),  # too few channels to fill the tiles' vectors: planes
        (96, 56, 7, 1, False),  # long rows: planes
    ],
)
def test_forward_nchw_takes_the_planes_or_staging_by_row_length(
    c: int, hw: int, f: int, s: int, staged: bool
) -> None:
    """Short output rows for the filter, and enough channels, stage to channels-last; the
    result matches the float64 reference either way."""
    from miocore_direct.depthwise import _Plan

    from miocore import Handle, reference

    p = ConvProblem.from_sizes(
        "forward", n=1, c=c, k=c, in_spatial=(hw, hw), filter_spatial=(f, f),
        pads=(f // 2, f // 2), strides=(s, s), groups=c, layout="NCHW",
    )  # fmt: skip
    assert _Plan(p.canonical).plane is not staged
    arrays = reference.random_inputs(p, 5)
    Handle("cpu").immediate(p, "direct.depthwise", **arrays)
    expected = reference.convolution(p, x=arrays["x"], w=arrays["w"])
    np.testing.assert_allclose(arrays["y"], expected, rtol=2e-5, atol=2e-5 * abs(expected).max())


@pytest.mark.parametrize(
    "shape", [(2, 1, 3, 5), (1, 5, 7, 7), (2, 8, 1, 1), (3, 12, 4, 6), (1, 17, 7, 3), (2, 64, 5, 5)]
)
def test_staging_transposes_move_every_element(shape: tuple[int, int, int, int]) -> None:
    """NCHW to channels-last and back, in blocks of eight channels and a remainder: equal to
    numpy's transpose, element for element, for channel counts in, at and past a block."""
    from miocore_direct.depthwise_kernels import nchw_to_nhwc, nhwc_to_nchw

    rng = np.random.default_rng(sum(shape))
    src = rng.standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    staged = np.full((n, h, w, c), np.nan, np.float32)
    nchw_to_nhwc(src, staged)
    np.testing.assert_array_equal(staged, src.transpose(0, 2, 3, 1))
    back = np.full(shape, np.nan, np.float32)
    nhwc_to_nchw(staged, back)
    np.testing.assert_array_equal(back, src)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("channels", [32, 24])
def test_nchw_staged_through_the_block_transposes(direction: str, channels: int) -> None:
    """Packed float32 NCHW layers staged to channels-last: through the 16x16 register-block
    transposes when the channels come in whole blocks (32), the scalar pass otherwise (24);
    stride 2 keeps backward weights and data off the plane kernels, and a 7-column output
    leaves a block of pixels that overlaps the one before."""
    from miocore_direct.depthwise import _Plan

    problem = ConvProblem.from_sizes(
        direction, n=2, c=channels, k=channels, in_spatial=(13, 14), filter_spatial=(3, 3),
        pads=(1, 1), strides=(2, 2), groups=channels, dtype="float32", layout="NCHW",
    )  # fmt: skip
    plan = _Plan(problem.canonical)
    assert not plan.plane or direction == "forward"
    check_solver(DepthwiseDirectSolver(), problem, seed=channels, tolerance=TOLERANCES["float32"])


def test_nchw_backward_weights_on_small_images_is_staged() -> None:
    """7-wide outputs with channels in blocks of 16 take the staged tiles, wider ones or other
    channel counts the planes; both against the float64 reference."""
    from miocore_direct.depthwise import _Plan

    for channels, size, staged in ((32, 7, True), (24, 7, False), (32, 9, False)):
        problem = ConvProblem.from_sizes(
            "backward_weights", n=2, c=channels, k=channels, in_spatial=(size, size),
            filter_spatial=(3, 3), pads=(1, 1), groups=channels, dtype="float32", layout="NCHW",
        )  # fmt: skip
        plan = _Plan(problem.canonical)
        assert plan.plane is not staged and plan.wrw_tiles is staged, (channels, size)
        check_solver(DepthwiseDirectSolver(), problem, seed=size, tolerance=TOLERANCES["float32"])


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
def test_nchw_short_rows_for_the_filter_are_staged(direction: str) -> None:
    """A 7x7 NCHW layer of 64 channels on a 10-wide image runs staged (the channels-last
    tiles), a 3x3 one on the planes; both against the float64 reference."""
    from miocore_direct.depthwise import _Plan

    for fw, staged in ((7, True), (3, False)):
        problem = ConvProblem.from_sizes(
            direction, n=2, c=64, k=64, in_spatial=(10, 10), filter_spatial=(fw, fw),
            pads=(fw // 2, fw // 2), groups=64, dtype="float32", layout="NCHW",
        )  # fmt: skip
        assert _Plan(problem.canonical).plane is not staged, fw
        check_solver(DepthwiseDirectSolver(), problem, seed=fw, tolerance=TOLERANCES["float32"])

"""direct.grouped's explicit-vector path (groups as wide in as out of 2, 4, 8 and 16 channels)
against miocore's float64 reference (``miocore.reference``, explicit loops over groups) on
random non-zero data: every direction, NCHW and NHWC, channel counts that fill the vectors
(the kernels write the caller's NHWC tensor) and that need padding channels, strides,
padding, dilation and rows long enough for the full pixel tiles.

One forward and one backward-weights kernel per width are compiled (sizes are runtime
arguments), so the many geometries here cost no extra compiles.
"""

from __future__ import annotations

import pytest
from miocore_direct import GroupedDirectSolver, grouped_vector
from miocore_direct.grouped import _plan, shift_applies
from miocore_direct.grouped_vector import VectorPlan, vector_applies

from miocore import ConvProblem
from miocore.testing import check_solver, cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")
# float32 accumulation everywhere (as test_direct_grouped_shift.py); float16/bfloat16 results
# are rounded once at the end, so they take miocore.testing's tolerances.
TOL_F32 = 3e-6

GEOMETRIES = {  # (in_spatial, filter, pads, strides, dilations)
    "3x3": ((7, 9), (3, 3), (1, 1), (1, 1), (1, 1)),
    "3x3s2": ((9, 8), (3, 3), (1, 1), (2, 2), (1, 1)),
    "odd": ((8, 10), (2, 3), (0, 2), (1, 2), (2, 1)),
    "1x5": ((6, 11), (1, 5), (0, 1), (2, 1), (1, 2)),
    "long": ((4, 31), (3, 3), (1, 1), (1, 1), (1, 1)),  # 31 columns: full 7- and 14-pixel tiles
    "bigpad": ((5, 6), (3, 3), (3, 2), (1, 1), (1, 2)),  # pads past the filter's reach
    "s3": ((8, 10), (2, 3), (1, 0), (3, 3), (1, 2)),  # backward-data phases without taps
    "tiny": ((2, 5), (1, 1), (0, 0), (3, 2), (1, 1)),  # fewer rows than the stride
    "one": ((1, 1), (3, 3), (1, 1), (2, 2), (1, 1)),  # one backward-data phase, one tap
    # width 16, rows of 14 pixels or more: the sliding-window kernels (grouped_slide), whose
    # last tile of a row overlaps the one before (31 columns at stride 1, "long", above; 20
    # at stride 2: the forward (3, 2, 1) kernel, backward-data phases of 2 and 1 column taps)
    "wide_s2": ((3, 40), (3, 3), (1, 1), (2, 2), (1, 1)),
    # NCHW at width 16: the self-staging kernels (grouped_fused), rows of 31 and 40 pixels
    # above (overlapping 16-pixel blocks), narrower ones here (a run of 16 pixels past each
    # row; the tensor's last row pixel by pixel), and an output plane under 16 pixels
    "narrow": ((5, 14), (3, 3), (1, 1), (1, 1), (1, 1)),
    "row": ((1, 15), (3, 3), (1, 1), (1, 1), (1, 1)),
}


def _problem(direction: str, layout: str, dtype: str, width: int, groups: int, geo: str):
    (h, w), filt, pads, strides, dils = GEOMETRIES[geo]
    return ConvProblem.from_sizes(
        direction,
        n=2,
        c=groups * width,
        k=groups * width,
        in_spatial=(h, w),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        dtype=dtype,
        layout=layout,
    )


def _check(p: ConvProblem, seed: int, tolerance: float | None = None) -> None:
    assert isinstance(_plan(p), VectorPlan)
    check_solver(GroupedDirectSolver(), p, seed=seed, tolerance=tolerance)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("groups", [3, 4])  # padding channels or not (16-lane vectors)
@pytest.mark.parametrize("geo", sorted(GEOMETRIES))
def test_vector_path_float32(
    direction: str, layout: str, width: int, groups: int, geo: str
) -> None:
    p = _problem(direction, layout, "float32", width, groups, geo)
    _check(p, seed=width + groups, tolerance=TOL_F32)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_vector_path_half_dtypes(direction: str, layout: str, dtype: str) -> None:
    _check(_problem(direction, layout, dtype, 4, 3, "3x3s2"), seed=3)
    _check(_problem(direction, layout, dtype, 16, 2, "odd"), seed=4)
    # 32 wide: the staged-input kernels (the self-staging ones take packed float32 only)
    _check(_problem(direction, layout, dtype, 32, 2, "3x3"), seed=5)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_width_two(direction: str) -> None:
    _check(_problem(direction, "NHWC", "float32", 2, 5, "long"), seed=2, tolerance=TOL_F32)


@pytest.mark.parametrize(("width", "geo"), [(4, "3x3s2"), (16, "3x3s2"), (16, "long")])
def test_backward_weights_in_row_chunks(
    width: int, geo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunks of one output row each: every chunk after the first adds to the sums (the
    plain kernel, and the sliding-window one at "long")."""
    monkeypatch.setattr(grouped_vector, "CHUNK_BYTES", 1)
    monkeypatch.setattr(grouped_vector, "SLIDE_CHUNK_BYTES", 1)
    p = _problem("backward_weights", "NHWC", "float32", width, 4, geo)
    assert _plan(p).chunk_rows == 1
    _check(p, seed=7, tolerance=TOL_F32)


@pytest.mark.parametrize(
    ("cg", "kg", "takes"),
    [(4, 4, True), (16, 16, True), (2, 2, True), (3, 3, False), (4, 8, False)],
)
def test_which_widths_take_the_vector_path(cg: int, kg: int, takes: bool) -> None:
    p = ConvProblem.from_sizes(
        "forward", n=1, c=4 * cg, k=4 * kg, in_spatial=(5, 5), filter_spatial=(3, 3), groups=4
    )
    assert vector_applies(p) is takes
    assert isinstance(_plan(p), VectorPlan) is takes
    if not takes and cg == kg:
        assert shift_applies(p)  # width 3 keeps the shifted-diagonal kernels


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compiles_for_follows_the_vector_kernels_cache(
    direction: str, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compiles_for is True while the vector path's generated kernel is neither loaded nor in
    numba's disk cache (an empty cache folder), False once its cache index is there."""
    import sys

    from miocore.backends.cpu_generated import generated_folder as _folder
    from miocore.backends.cpu_generated import module_name as _module_name

    ctx, solver = cpu_context(), GroupedDirectSolver()
    p = _problem(direction, "NHWC", "float32", 8, 3, "3x3")
    (name,) = [_module_name(*spec) for spec in VectorPlan(p).generated()]
    _check(p, seed=1, tolerance=TOL_F32)  # loads it in this process
    assert name in sys.modules and not solver.compiles_for(ctx, p)
    monkeypatch.setenv("MIOCORE_KERNEL_CACHE_PATH", str(tmp_path / "kernels"))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delitem(sys.modules, name)
    assert solver.compiles_for(ctx, p)
    cache = _folder() / "__pycache__"
    cache.mkdir(parents=True)
    (cache / f"{name}.kernel-9.py311.nbi").touch()
    assert not solver.compiles_for(ctx, p)


@pytest.mark.parametrize(
    ("chans", "height", "width", "offsets"),
    [
        (32, 3, 37, (1, 2, 0)),  # rows of whole blocks and an overlapping last block
        (16, 5, 16, (0, 0, 0)),
        (16, 4, 9, (1, 1, 0)),  # narrow rows: the image as one run
        (16, 2, 5, (0, 1, 0)),  # under one block: pixel by pixel
        (12, 3, 20, (1, 1, 0)),  # channels not in whole blocks: numpy's copy
    ],
)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_blocked_staging_matches_numpy(
    chans: int, height: int, width: int, offsets: tuple[int, int, int], layout: str
) -> None:
    """The blocked copies (whole channel blocks) and the numpy copy they stand in for stage
    the same padded buffer, over a buffer full of NaN; the way back to NCHW restores the
    tensor."""
    import numpy as np
    from miocore_direct import grouped_stage
    from miocore_direct.grouped_arrange import pad
    from miocore_direct.grouped_transpose import nhwc_into_nchw

    rng = np.random.default_rng(chans + width)
    x = rng.uniform(0.5, 1.5, (2, chans, height, width)).astype(np.float32)
    if layout == "NHWC":  # the same logical tensor, channels-last in memory
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    shape = (2, height + 2 * offsets[0] + 1, width + 2 * offsets[1], chans + 16)
    got, expected = np.full(shape, np.nan, np.float32), np.full(shape, np.nan, np.float32)
    pad(x, got, offsets, (1, 1))
    grouped_stage.pad(x, expected, offsets)
    np.testing.assert_array_equal(got, expected)
    if chans % 16 == 0 and layout == "NCHW":
        back = np.full_like(x, np.nan)
        top, left, _ = offsets
        nhwc_into_nchw(np.ascontiguousarray(got[:, top : top + height, left : left + width]), back)
        np.testing.assert_array_equal(back, x)


def test_strided_backward_data_runs_in_phases() -> None:
    """No zero-inserted dy: one pass per stride phase, each with only its own taps."""
    plan = VectorPlan(_problem("backward_data", "NHWC", "float32", 8, 2, "3x3s2"))
    assert [(len(ph.rows), len(ph.cols)) for ph in plan.phases] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert plan.shapes[1][1:3] == (5, 5)  # dy (5x4) and a zero column after it
    plan = VectorPlan(_problem("backward_data", "NHWC", "float32", 4, 3, "s3"))
    assert any(not ph.rows for ph in plan.phases)


def test_cached_kernels_follow_the_intrinsics_revision() -> None:
    """numba's disk cache keys a kernel on its own module: the generated kernels name the
    intrinsics' revision in their source, and the transposes' module records it (a bump of
    one without the other would leave stale machine code in the cache)."""
    from miocore_direct import grouped_simd, grouped_transpose, simd

    assert grouped_transpose.SIMD_REVISION == simd.REVISION
    _, text = grouped_simd.forward_spec(8)
    assert f"simd revision {simd.REVISION}" in text


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_sliding_kernel_narrow_rows(direction: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows narrower than the sliding-window tile (which the plan gives the plain kernel)
    take the sliding kernel's one-pixel loop when it is chosen anyway."""
    from miocore_direct import grouped_slide

    monkeypatch.setattr(grouped_slide, "TILE", 1)
    p = _problem(direction, "NCHW", "float32", 16, 2, "3x3")
    plan = _plan(p)
    assert (plan.phases[0].shape if plan.phases else plan.shape) == (3, 1, 1)
    _check(p, seed=5, tolerance=TOL_F32)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups", [3, 4])  # a group over two 16-lane blocks, padding or not
@pytest.mark.parametrize("geo", sorted(GEOMETRIES))
def test_width_32(direction: str, layout: str, groups: int, geo: str) -> None:
    """Groups of 32 (ResNeXt-50's 1024-channel layers) on the vector kernels: forward and
    backward data (the transposed filter, per stride phase) on the sliding-window tiles of
    both 16-lane blocks of a group (:mod:`miocore_direct.grouped_wide`; self-staging on packed
    float32 tensors, rows of 7 pixels or more in overlapping tiles, narrower ones pixel by
    pixel, 4 groups a task), the plain
    kernel for other column taps; backward weights one 16-channel slice of a group a job."""
    p = _problem(direction, layout, "float32", 32, groups, geo)
    assert vector_applies(p)
    _check(p, seed=groups, tolerance=TOL_F32)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups", [5, 8])  # a last task of one group; two whole tasks
def test_width_32_tasks(direction: str, layout: str, groups: int) -> None:
    """The self-staging 32-wide kernels' tasks of up to 4 groups, a 7-pixel row in one tile
    (ResNeXt's 7x7 layers; backward weights: 9 columns, one tile and two single pixels),
    stride 1 and 2."""
    for geo in ("3x3", "3x3s2"):
        p = _problem(direction, layout, "float32", 32, groups, geo)
        plan = _plan(p)
        assert isinstance(plan, VectorPlan)
        if direction != "backward_data" or geo == "3x3":
            assert plan.fused is not None and plan.fused.wide
        _check(p, seed=groups, tolerance=TOL_F32)


@pytest.mark.parametrize("width", [16, 32])
def test_strided_backward_data_phase_offsets(width: int) -> None:
    """NHWC backward data at stride 2 without padding: a phase's sliding-window pass starts
    reading dy past its first row (a flat offset in floats; the width-16 kernel once took it
    for pixels)."""
    p = ConvProblem.from_sizes(
        "backward_data",
        n=2,
        c=2 * width,
        k=2 * width,
        in_spatial=(5, 33),
        filter_spatial=(3, 3),
        strides=(2, 2),
        groups=2,
        layout="NHWC",
    )
    plan = _plan(p)
    assert any(ph.shape and ph.place[0] for ph in plan.phases)
    _check(p, seed=width, tolerance=TOL_F32)


def test_width_32_layers_take_the_sliding_kernels() -> None:
    """ResNeXt-50's 1024-channel layers: forward, backward weights and stride-1 backward data
    self-staged, the stride-2 backward data's phases on the 32-wide sliding tiles."""
    from miocore_direct.grouped_wide import weight_steps

    assert weight_steps(3, 3, True) == (9216, 256, -96, -32, 288, 16)  # KYXC, 32 wide
    for layout in ("NCHW", "NHWC"):
        for size, stride in (((7, 7), 1), ((14, 14), 2)):
            for direction in DIRECTIONS:
                p = ConvProblem.from_sizes(
                    direction,
                    n=1,
                    c=1024,
                    k=1024,
                    in_spatial=size,
                    filter_spatial=(3, 3),
                    pads=(1, 1),
                    strides=(stride, stride),
                    groups=32,
                    layout=layout,
                )
                plan = VectorPlan(p)
                if direction != "backward_data" or stride == 1:
                    assert plan.fused is not None and plan.fused.wide
                    # backward data reads KYXC weights in place, as the flipped filter
                    direct = direction == "backward_data" and layout == "NHWC"
                    assert plan.fused.direct_w is direct
                else:
                    assert all(ph.shape for ph in plan.phases)


@pytest.mark.parametrize("geo", ["3x3s2", "wide_s2", "s3", "one"])
def test_width_8_nchw_strided_backward_data_in_one_kernel(geo: str) -> None:
    """NCHW strided backward data of 8-wide groups (two a 16-channel block) runs every phase
    in the self-staging phase kernel: 7-pixel tiles of lane-shuffled loads where a phase's
    row is long enough ("wide_s2": 20 columns), one pixel at a time otherwise."""
    p = _problem("backward_data", "NCHW", "float32", 8, 4, geo)
    assert VectorPlan(p).table is not None
    _check(p, seed=8, tolerance=TOL_F32)


@pytest.mark.parametrize("geo", ["3x3", "3x3s2", "wide_s2", "narrow"])
def test_width_8_nchw_backward_weights_self_staged(geo: str) -> None:
    """NCHW backward weights of 8-wide groups at 3x3, stride 1 or 2, stage each 16-channel
    block of x and dy themselves (no padded copies of the tensors)."""
    p = _problem("backward_weights", "NCHW", "float32", 8, 4, geo)
    plan = VectorPlan(p)
    assert plan.fused is not None and plan.fused.width == 8
    _check(p, seed=9, tolerance=TOL_F32)


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("width", [4, 8, 16])
@pytest.mark.parametrize("geo", ["3x3", "3x3s2", "odd"])
def test_one_image_at_a_time(
    direction: str, layout: str, width: int, geo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Passes whose staged input outgrows the caches stage and run one image at a time
    (here every staged pass: the threshold at zero), the same results."""
    monkeypatch.setattr(grouped_vector, "PER_IMAGE_BYTES", 0)
    p = _problem(direction, layout, "float32", width, 3, geo)
    plan = VectorPlan(p)
    assert plan.per_image is (not plan.fused and plan.table is None)
    _check(p, seed=width, tolerance=TOL_F32)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_width_16_backward_weights_tasks(layout: str) -> None:
    """The self-staging width-16 backward weights: NHWC tasks of up to 8 groups (10 groups:
    a task of 8 and one of 2), NCHW a group a task."""
    from miocore_direct.grouped_fused import WRW_CHUNK

    p = _problem("backward_weights", layout, "float32", 16, WRW_CHUNK + 2, "wide_s2")
    assert VectorPlan(p).fused is not None
    _check(p, seed=10, tolerance=TOL_F32)

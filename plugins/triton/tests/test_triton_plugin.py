"""The Triton solvers' planning on the CPU (nothing is compiled or run): registration through
the entry point, the reasons they decline, their configuration spaces and defaults, workspace
and cost estimates."""

from __future__ import annotations

import math

import pytest
from miocore_triton import (
    SOLVERS,
    TritonBackwardData,
    TritonBackwardWeights,
    TritonConvSolver,
    TritonForward,
)
from miocore_triton.geometry import partial_bytes
from triton_helpers import gpu_ctx

import miocore
from miocore import PerfConfig


def _p(
    direction: str = "forward", dtype: str = "float16", layout: str = "NHWC", **kw
) -> miocore.ConvProblem:
    sizes = {"n": 32, "c": 64, "k": 64, "in_spatial": (56, 56), "filter_spatial": (3, 3)}
    sizes["pads"] = (1, 1)
    sizes.update(kw)
    return miocore.ConvProblem.from_sizes(direction, dtype=dtype, layout=layout, **sizes)


def test_the_entry_point_registers_six_gpu_solvers_and_a_built_folder() -> None:
    from miocore.solver.registry import default_registry

    names = {s.name for s in miocore.solvers()}
    assert {"triton.igemm_fwd", "triton.igemm_bwd", "triton.igemm_wrw"} <= names
    assert {"triton.depth_fwd", "triton.depth_bwd", "triton.depth_wrw"} <= names
    registry = default_registry()
    records = [rec for info, rec in registry.kernel_sources if rec.name == "triton"]
    assert records and records[0].builder == "miocore_triton.builder:BUILDER"
    for reg in registry.solvers:
        if reg.name.startswith("triton."):
            assert set(reg.backends) == {"cuda", "hip"}


@pytest.mark.parametrize(
    ("ctx", "problem", "reason"),
    [
        (gpu_ctx(), _p("backward_data"), "computes forward"),
        (gpu_ctx(), _p(dtype="float32"), "math mode is 'exact'"),
        (gpu_ctx("tf32", backend="hip", arch="gfx942"), _p(dtype="float32"), "NVIDIA"),
        (gpu_ctx(), _p(groups=2), "2 groups"),
        (gpu_ctx(arch="sm75"), _p(), "sm_80"),
        (
            gpu_ctx(),
            miocore.ConvProblem.from_sizes(
                "forward", n=2, c=8, k=8, in_spatial=(6, 6, 6), filter_spatial=(3, 3, 3),
                dtype="float16", groups=2,
            ),
            "2 groups",
        ),
    ],
)  # fmt: skip
def test_declines_say_why(ctx, problem, reason) -> None:
    answer = TritonForward().is_applicable(ctx, problem)
    assert not answer and reason in answer.reason, answer.reason


@pytest.mark.parametrize("layout", ["NDHWC", "NCDHW"])
def test_3d_problems_apply_in_every_direction(layout: str) -> None:
    from miocore_triton import TritonBackwardData, TritonBackwardWeights

    for solver in (TritonForward(), TritonBackwardData(), TritonBackwardWeights()):
        p = miocore.ConvProblem.from_sizes(
            solver.direction.value, n=2, c=8, k=8, in_spatial=(6, 6, 6),
            filter_spatial=(3, 3, 3), pads=(1, 1, 1), dtype="float16", layout=layout,
        )  # fmt: skip
        answer = solver.is_applicable(gpu_ctx(), p)
        assert answer, answer.reason


def test_tf32_backward_data_reads_a_transposed_filter() -> None:
    ctx = gpu_ctx("tf32")
    p = _p("backward_data", dtype="float32", c=24, k=40)
    solver = TritonBackwardData()
    sol = solver.get_solution(ctx, p)
    assert [k.kernel_name for k in sol.kernels] == ["conv_wtrans", "conv_bwd"]
    assert sol.workspace_size == 24 * 40 * 9 * 4
    assert "WK=1" in sol.kernels[1].options and "WC=360" in sol.kernels[1].options
    assert solver.workspace_size(gpu_ctx(), _p("backward_data")) == 0


def test_tf32_mode_applies_to_fp32_and_says_tf32() -> None:
    ctx = gpu_ctx("tf32")
    p = _p(dtype="float32")
    solver = TritonForward()
    assert solver.is_applicable(ctx, p)
    assert solver.notes_for(ctx, p) == {"tf32"}
    assert solver.notes_for(ctx, _p()) == frozenset()
    assert all(c["bn"] >= 32 for c in solver.perf_config_space(ctx, _p(dtype="float32", k=8)))


def test_spaces_fit_the_problem_and_defaults_are_in_them() -> None:
    ctx = gpu_ctx()
    for solver in (s for s in SOLVERS if not s.depth):
        for p in (
            _p(solver.direction.value),
            _p(solver.direction.value, c=3, k=5, filter_spatial=(7, 7), pads=(3, 3)),
            _p(solver.direction.value, n=1, in_spatial=(7, 7), c=512, k=2048, strides=(2, 2)),
        ):
            space = solver.perf_config_space(ctx, p)
            assert space, (solver.name, p.key)
            default = solver.default_perf_config(ctx, p)
            assert default in space and solver.is_valid_perf_config(ctx, p, default)
            for cfg in space:
                assert cfg["bk"] >= 16 and cfg["bn"] >= 16
                # channels-last, nothing staged: the split's fp32 partials alone
                assert solver.workspace_size(ctx, p, cfg) == partial_bytes(p, cfg["split"])
                sol = solver.get_solution(ctx, p, cfg)
                assert sol.workspace_size == solver.workspace_size(ctx, p, cfg)
            stale = PerfConfig(bm=96, bn=64, bk=64, warps=4, stages=3, split=1)
            assert not solver.is_valid_perf_config(ctx, p, stale)
            assert not solver.is_valid_perf_config(ctx, p, PerfConfig(bm=64))
            assert 0 < solver.wti(ctx, p) <= 1 and math.isfinite(solver.wti(ctx, p))


def test_backward_weights_splits_where_the_tiles_leave_sms_idle() -> None:
    ctx = gpu_ctx()
    solver = TritonBackwardWeights()
    few_tiles = _p("backward_weights", filter_spatial=(1, 1), pads=(0, 0))  # one 64x64 tile
    many_tiles = _p("backward_weights", n=2, c=512, k=512, in_spatial=(7, 7))
    assert solver.default_perf_config(ctx, few_tiles)["split"] >= 16
    assert solver.default_perf_config(ctx, many_tiles)["split"] == 1
    assert solver.workspace_size(ctx, few_tiles) > 0


def test_strided_backward_data_runs_per_phase() -> None:
    ctx = gpu_ctx()
    p = _p("backward_data", strides=(2, 2))
    sol = TritonBackwardData().get_solution(ctx, p)
    (kernel,) = sol.kernels
    assert kernel.grid[1] == 4 and "PHASED=True" in kernel.options
    dilated = _p("backward_data", strides=(2, 2), dilations=(2, 2), pads=(2, 2))
    (kernel,) = TritonBackwardData().get_solution(ctx, dilated).kernels
    assert kernel.grid[1] == 1 and "PHASED=False" in kernel.options


def test_one_binary_serves_every_batch_size() -> None:
    """The batch is the kernels' one run-time size: a configuration compiles to the same
    binary at any batch (the default may pick a larger tile for a launch big enough to fill
    it: see ``default_perf_config``)."""
    ctx = gpu_ctx()
    solver = TritonForward()
    cfg = solver.default_perf_config(ctx, _p(n=2))
    small = solver.get_solution(ctx, _p(n=2), cfg).kernels[0]
    large = solver.get_solution(ctx, _p(n=64), cfg).kernels[0]
    assert small.options == large.options and small.grid != large.grid
    assert solver.default_perf_config(ctx, _p(n=3)) == cfg


def test_the_default_takes_a_larger_tile_only_where_the_launch_fills_it() -> None:
    ctx = gpu_ctx()
    for solver in (TritonForward(), TritonBackwardData()):
        small = _p(solver.direction.value, n=2, c=128, k=128, in_spatial=(14, 14))
        large = _p(solver.direction.value, n=64, c=128, k=128, in_spatial=(56, 56))
        first = solver.perf_config_space(ctx, large)[0]
        tile = ("bm", "bn", "bk", "warps", "stages")
        small_first = solver.perf_config_space(ctx, small)[0]
        small_default = solver.default_perf_config(ctx, small)
        assert all(small_default[k] == small_first[k] for k in tile)
        assert small_default["split"] > 1  # 8 programs on 132 SMs: its reduction split
        picked = solver.default_perf_config(ctx, large)
        assert picked["bm"] * picked["bn"] > first["bm"] * first["bn"], picked
    wrw = TritonBackwardWeights()
    narrow = _p("backward_weights", c=24, k=40)
    wide = _p("backward_weights", c=256, k=256, in_spatial=(28, 28))
    assert wrw.default_perf_config(ctx, narrow)["bm"] == 64
    assert (
        wrw.default_perf_config(ctx, wide)["bm"] * wrw.default_perf_config(ctx, wide)["bn"]
        > 64 * 64
    )


def test_inputs_that_are_not_channels_last_are_staged_first() -> None:
    from miocore_triton.launches import plan

    ctx = gpu_ctx()
    nchw = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=24, k=40, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NCHW",
    )  # fmt: skip
    solver = TritonForward()
    unsplit = solver.perf_config_space(ctx, nchw)[0]
    steps, size = plan(ctx, nchw, unsplit)
    assert [s.kernel.kernel_name for s in steps] == [
        "repack", "repack", "conv_fwd"
    ]  # fmt: skip
    assert steps[0].pointers == ("x", 0) and steps[1].pointers[0] == "w"
    x_bytes = 2 * 24 * 9 * 9 * 2
    assert steps[1].pointers[1] == -(-x_bytes // 256) * 256
    assert steps[2].pointers[:2] == (0, steps[1].pointers[1]) and steps[2].pointers[2] == "y"
    assert size == solver.workspace_size(ctx, nchw, unsplit) > x_bytes
    # the GEMM reads the copies as channels-last
    assert "XC=1" in steps[2].kernel.options and "WC=1" in steps[2].kernel.options
    # channels-last problems copy nothing
    assert plan(ctx, _p(), solver.default_perf_config(ctx, _p()))[1] == 0


def test_stems_plan_their_depth_image() -> None:
    """``triton.depth_*`` on ResNet's stem (7x7, stride 2, 3 channels): the depth image is 4x4
    over 16 channels; the inputs' depth copies first in the workspace, the output's depth form
    copied back last; the configurations, default and cost are the image's; the other
    directions are declined. VGG's first layer (stride 1) folds its 9 taps, but for backward
    data, where they overlap."""
    from miocore_triton.depth import depth_sizes, depth_view
    from miocore_triton.launches import plan

    ctx = gpu_ctx()
    for solver in (s for s in SOLVERS if s.depth):
        d = solver.direction.value
        stem = _p(d, c=3, k=64, in_spatial=(224, 224), filter_spatial=(7, 7), pads=(3, 3),
                  strides=(2, 2))  # fmt: skip
        assert solver.is_applicable(ctx, stem)
        assert depth_sizes(stem) == {
            "C2": 16, "D2": 1, "H2": 115, "W2": 115, "T2": 1, "R2": 4, "S2": 4,
            "FD": 1, "FH": 2, "FW": 2, "MD": 1, "MH": 1, "MW": 1,
        }  # fmt: skip
        image = depth_view(stem)
        assert image.x.lengths == (32, 16, 115, 115) and image.w.lengths == (64, 16, 4, 4)
        assert image.conv.strides == (1, 1) and image.conv.pads == (0, 0) and image.y == stem.y
        space = solver.perf_config_space(ctx, stem)
        assert space and solver.default_perf_config(ctx, stem) in space
        steps, size = plan(ctx, stem, space[0], depth=True)
        names = [st.kernel.kernel_name for st in steps]
        x_bytes = -(-32 * 115 * 115 * 16 * 2 // 256) * 256
        w_bytes = -(-64 * 4 * 4 * 16 * 2 // 256) * 256
        if d == "forward":
            assert names[:2] == ["space_to_depth", "filter_depth"]
            assert steps[0].pointers == ("x", 0) and steps[1].pointers == ("w", x_bytes)
        elif d == "backward_data":
            assert names[0] == "filter_depth" and names[-1] == "depth_to_space"
            assert steps[-1].pointers == (0, "x")  # dx's depth form, copied back
        else:
            assert names[0] == "space_to_depth" and names[-1] == "filter_depth"
            assert "BACK=True" in steps[-1].kernel.options
            assert steps[-1].pointers == ("w", x_bytes)  # dw's depth form, copied back
        assert size >= x_bytes + w_bytes
        assert solver.get_solution(ctx, stem, space[0]).workspace_size == size
        # the image's GEMM and copies against the layer's own ideal time: below the image's
        assert 0 < solver.wti(ctx, stem) < TritonConvSolver.wti(solver, ctx, image) <= 1
        first = _p(d, c=3)  # VGG's first layer: 3x3, stride 1, its taps folded
        if d == "backward_data":
            assert "overlapping taps" in solver.is_applicable(ctx, first).reason
        else:
            assert solver.is_applicable(ctx, first)
            assert depth_sizes(first) == {
                "C2": 32, "D2": 1, "H2": 56, "W2": 56, "T2": 1, "R2": 1, "S2": 1,
                "FD": 1, "FH": 3, "FW": 3, "MD": 1, "MH": 1, "MW": 1,
            }  # fmt: skip
        other = next(x for x in ("forward", "backward_data") if x != d)
        assert "computes" in solver.is_applicable(ctx, _p(other, c=3, strides=(2, 2))).reason


def test_tf32_backward_weights_reads_channels_first_copies_of_channels_last_inputs() -> None:
    """TF32 backward weights on NHWC tensors: x and dy copied to packed channels-first order,
    then the GEMM reads the copies in place (dy's image slices, x through its strides), the
    copies in the workspace and in the cost; fp16, NCHW and one-channel tensors copy
    nothing."""
    from miocore_triton.launches import copied, plan

    ctx = gpu_ctx("tf32")
    solver = TritonBackwardWeights()
    p = _p("backward_weights", "float32", n=4, c=24, k=40, in_spatial=(9, 9))
    cfg = solver.perf_config_space(ctx, p)[0]
    steps, size = plan(ctx, p, cfg)
    assert [s.kernel.kernel_name for s in steps] == ["repack", "repack", "conv_wrw"]
    assert all("CHANNELS_FIRST=True" in s.kernel.options for s in steps[:2])
    x_bytes = -(-4 * 24 * 81 * 4 // 256) * 256
    assert steps[0].pointers == ("x", 0) and steps[1].pointers == ("y", x_bytes)
    assert steps[2].pointers[:3] == (0, "w", x_bytes)
    main = steps[2].kernel.options
    assert "IMAGE_SLICES=True" in main and "XC=81" in main and "YC=81" in main
    assert size == solver.workspace_size(ctx, p, cfg) >= x_bytes + 4 * 40 * 81 * 4
    assert copied(p) == ("x", "y")  # what the cost estimate counts
    assert copied(_p("backward_weights", n=4, c=24, k=40, in_spatial=(9, 9))) == ()  # fp16
    nchw = _p("backward_weights", "float32", n=4, c=24, k=40, in_spatial=(9, 9), layout="NCHW")
    assert copied(nchw) == () and plan(ctx, nchw, cfg)[0][0].kernel.kernel_name == "conv_wrw"
    assert copied(_p("backward_weights", "float32", c=1, k=8)) == ()


def test_a_1x1_nchw_layer_is_read_in_place_in_image_tiles() -> None:
    from miocore_triton.launches import plan

    ctx = gpu_ctx()
    # channels every reduction slice divides (geometry.full_channel_blocks)
    for direction in ("forward", "backward_data"):
        p = miocore.ConvProblem.from_sizes(
            direction, n=2, c=32, k=64, in_spatial=(9, 9), filter_spatial=(1, 1),
            dtype="float16", layout="NCHW",
        )  # fmt: skip
        solver = TritonForward() if direction == "forward" else TritonBackwardData()
        steps, size = plan(ctx, p, solver.default_perf_config(ctx, p))
        (main,) = [s.kernel for s in steps]  # nothing staged: a KCRS 1x1 filter is [K][C]
        assert "DIRECT_PIX=True" in main.options and "IMAGE_TILES=True" in main.options
        assert size == 0
        # each image's 81 pixels in tiles of its own
        cfg = solver.default_perf_config(ctx, p)
        assert main.grid[0] == 2 * -(-81 // cfg["bm"]) * -(
            -(64 if direction == "forward" else 32) // cfg["bn"]
        )
    tf32 = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=24, k=40, in_spatial=(9, 9), filter_spatial=(1, 1),
        dtype="float32", layout="NCHW",
    )  # fmt: skip
    steps, _ = plan(
        gpu_ctx("tf32"), tf32, TritonForward().default_perf_config(gpu_ctx("tf32"), tf32)
    )
    assert "DIRECT_PIX=False" in steps[-1].kernel.options  # TF32 needs channels innermost


def test_strided_1x1_backward_data_into_nchw_spreads_in_one_launch() -> None:
    """ResNet's stride-2 shortcut, NCHW: one GEMM over dy's pixels, read in place, each image's
    in tiles of its own; the spread is only for the layers its epilogue serves."""
    from miocore_triton.geometry import spreads
    from miocore_triton.launches import plan

    ctx = gpu_ctx()

    def down(dtype: str = "float16", layout: str = "NCHW", **kw) -> miocore.ConvProblem:
        sizes = {"n": 4, "c": 256, "k": 512, "in_spatial": (56, 56), "filter_spatial": (1, 1)}
        sizes.update({"strides": (2, 2), "pads": (0, 0), **kw})
        return miocore.ConvProblem.from_sizes("backward_data", dtype=dtype, layout=layout, **sizes)

    p = down()
    assert spreads(p)
    cfg = TritonBackwardData().default_perf_config(ctx, p)
    steps, size = plan(ctx, p, cfg)
    (main,) = [s.kernel for s in steps]
    assert main.kernel_name == "conv_bwd_spread" and size == 0
    assert main.grid == (4 * -(-28 * 28 // cfg["bm"]) * -(-256 // cfg["bn"]),)
    assert steps[0].rows == 4 * 28 * 28
    assert not spreads(down(layout="NHWC"))  # a channels-last dx is written in whole pixels
    assert not spreads(down(dtype="float32"))  # TF32 needs the reduction innermost
    assert not spreads(down(k=40))  # a masked channel slice (full_channel_blocks)
    assert not spreads(down(pads=(1, 1)))
    assert not spreads(down(strides=(2, 3)))  # the epilogue interleaves in powers of two
    assert spreads(down(strides=(3, 4)))


def test_image_row_tiles_only_where_no_channel_load_is_masked() -> None:
    """The GPU found image-row tiles wrong with masked channel loads (test_triton_gpu.py):
    channels-first layers whose reduction channels some tile's slice does not divide take
    row tiles across images, and 1x1 ones are not read in place."""
    from miocore_triton.geometry import direct_pixels, full_channel_blocks, image_tiles

    def layer(c: int, k: int, f: int = 3, direction: str = "forward") -> miocore.ConvProblem:
        return miocore.ConvProblem.from_sizes(
            direction, n=2, c=c, k=k, in_spatial=(48, 480), filter_spatial=(f, f),
            pads=(f // 2, f // 2), dtype="float16", layout="NCHW",
        )  # fmt: skip

    for c, full in ((1, False), (3, False), (24, False), (96, False), (16, True), (32, True),
                    (64, True), (192, True)):  # fmt: skip
        assert full_channel_blocks(layer(c, 16)) is full, c
        assert image_tiles(layer(c, 16)) is full, c
        assert direct_pixels(layer(c, 16, f=1)) is full, c
    # backward data reduces over K
    assert not image_tiles(layer(16, 3, direction="backward_data"))
    assert image_tiles(layer(3, 64, direction="backward_data"))


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
def test_few_channels_cost_the_implicit_gemm_its_narrow_tiles(direction: str) -> None:
    """A 3-channel stem fills 3/16 of the GEMM's reduction slices (forward) or output columns
    (backward data): its WTI ranks the depth-image solver first, as the H200 measured
    (ResNet-50's stem: 0.070 ms against 0.391 forward, 0.134 against 0.442 backward data),
    while 16 channels and more cost nothing extra."""
    from miocore_triton.depth import depth_declines

    ctx = gpu_ctx()
    plain = next(s for s in SOLVERS if s.direction.value == direction and not s.depth)
    depth = next(s for s in SOLVERS if s.direction.value == direction and s.depth)
    stem = _p(direction, c=3, in_spatial=(224, 224), filter_spatial=(7, 7), pads=(3, 3),
              strides=(2, 2)).canonical  # fmt: skip
    assert not depth_declines(stem)
    assert depth.wti(ctx, stem) > plain.wti(ctx, stem)
    # compute-bound, 3 channels (forward: a tap's reduction; backward data: the output columns)
    # cost as much as 16: a tile's 16-wide side is computed whole
    sizes = {"k": 1024, "n": 64, "in_spatial": (28, 28), "filter_spatial": (7, 7), "pads": (3, 3)}
    narrow = _p(direction, **{"c": 3, **sizes}).canonical
    wide = _p(direction, **{**sizes, "c": 16}).canonical
    ideal = ctx.ideal_ms
    ratio = (ideal(narrow) / plain.wti(ctx, narrow)) / (ideal(wide) / plain.wti(ctx, wide))
    assert 0.8 < ratio < 1.01  # by flops alone it would be 3/16

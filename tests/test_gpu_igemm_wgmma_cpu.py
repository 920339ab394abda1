"""CPU checks of ``igemm.gpu_wgmma``: where it applies, its pixel boxes and configs, and the
geometry struct it hands the kernel. No device is needed (the kernel itself is compiled by the
``cuda-compile`` environment and run by ``tests/test_gpu_igemm_wgmma.py``)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import pytest

import miocore
from miocore.testing import cpu_context

wgmma = pytest.importorskip("miocore_igemm.gpu_wgmma")
plan = pytest.importorskip("miocore_igemm.gpu_wgmma_plan")
layout = pytest.importorskip("miocore_igemm.gpu_wgmma_layout")
operands = pytest.importorskip("miocore_igemm.gpu_wgmma_operands")


def _ctx(
    arch: str = "sm90", backend: str = "cuda", sms: int = 132, math_mode: str = "exact"
) -> miocore.ExecutionContext:
    device = dataclasses.replace(
        cpu_context().device, backend=backend, compute_units=sms, arch=arch
    )
    return miocore.ExecutionContext(device=device, math_mode=math_mode)


def _problem(**kw) -> miocore.ConvProblem:
    args = dict(
        n=2, c=64, k=64, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NHWC",
    )  # fmt: skip
    direction = kw.pop("direction", "forward")
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, **args)


def _problem3d(**kw) -> miocore.ConvProblem:
    args = dict(
        n=2, c=64, k=64, in_spatial=(5, 6, 7), filter_spatial=(3, 3, 3), pads=(1, 1, 1),
        dtype="float16", layout="NDHWC",
    )  # fmt: skip
    direction = kw.pop("direction", "forward")
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, **args)


SOLVER = wgmma.GpuWgmmaSolver()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"arch": "sm80"}, "sm_90"),
        ({"arch": "sm100"}, "sm_90"),
        ({"backend": "hip", "arch": "gfx942"}, "sm_90"),
        ({"dtype": "float32"}, "bfloat16 and float16"),
        ({"direction": "backward_weights"}, "forward and backward data"),
        ({"direction": "backward_data", "strides": (2, 2)}, "stride 1 only"),
        ({"direction": "backward_data", "k": 12}, "12 channels of dy"),
        ({"c": 12}, "12 channels of x"),
        ({"k": 63}, "63 channels of y"),
        ({"groups": 2}, "2 groups"),
        ({"strides": (9, 1)}, "stride"),
    ],
)
def test_declines_with_the_reason(change: dict, reason: str) -> None:
    ctx_args = {k: change.pop(k) for k in ("arch", "backend") if k in change}
    answer = SOLVER.is_applicable(_ctx(**ctx_args), _problem(**change))
    assert not answer
    assert reason in answer.reason


@pytest.mark.parametrize("arch", ["sm90", "sm_90"])
def test_applies_on_sm90_channels_last(arch: str) -> None:
    for dtype in ("float16", "bfloat16"):
        assert SOLVER.is_applicable(_ctx(arch), _problem(dtype=dtype))
    # strided, dilated, a 1x1 filter, channels not a multiple of the 64-channel slice
    assert SOLVER.is_applicable(_ctx(), _problem(c=40, strides=(2, 2), dilations=(2, 1)))
    assert SOLVER.is_applicable(_ctx(), _problem(filter_spatial=(1, 1), pads=(0, 0)))
    # backward data at stride 1, dilated, with a filter of any layout (it is flipped first)
    bwd = _problem(direction="backward_data", dilations=(2, 1), layout="NHWC")
    assert SOLVER.is_applicable(_ctx(), bwd)


def test_backward_data_is_the_forward_convolution_of_dy_with_the_flipped_filter() -> None:
    p = _problem(
        direction="backward_data", n=3, c=24, k=40, in_spatial=(9, 11), filter_spatial=(3, 5),
        pads=(0, 1), dilations=(2, 1),
    ).canonical  # fmt: skip
    v = plan.gemm_view(p)
    assert (v.c, v.k) == (40, 24) and (v.oh, v.ow) == (9, 11) and (v.ih, v.iw) == p.out_spatial
    assert (v.sh, v.sw) == (1, 1) and (v.ph, v.pw) == (2 * 2 - 0, 1 * 4 - 1) and v.flip
    # the equivalent forward convolution gives back dx's size
    assert v.ih + 2 * v.ph - v.dh * (v.r - 1) == v.oh and v.iw + 2 * v.pw - v.dw * (v.s - 1) == v.ow
    ctx = _ctx()
    # a channels-last filter is read as it is: boxes of 64 c x 64 k, wgmma's transpose-B form
    cfg = {**SOLVER.default_perf_config(ctx, p), "cluster": 1}
    sol = SOLVER.get_solution(ctx, p, cfg)
    assert [k.kernel_name for k in sol.kernels] == [wgmma.KERNEL]
    assert "-DMIO_B_MN=1" in sol.kernels[0].options
    assert sol.workspace_size == SOLVER.workspace_size(ctx, p, cfg) == 0
    # clusters share K-major slices, and 12 channels are no 16-byte filter rows: flipped first
    odd = _problem(
        direction="backward_data", n=3, c=12, k=40, in_spatial=(9, 11), filter_spatial=(3, 5),
        pads=(0, 1), dilations=(2, 1),
    ).canonical  # fmt: skip
    for problem, config in ((p, {**cfg, "cluster": 2}), (odd, None)):
        sol = SOLVER.get_solution(ctx, problem, config)
        assert [k.kernel_name for k in sol.kernels] == [wgmma.FLIP_KERNEL, wgmma.KERNEL]
        assert "-DMIO_B_MN=0" in sol.kernels[-1].options
        flipped = 40 * problem.c * 3 * 5 * 2
        assert sol.workspace_size == SOLVER.workspace_size(ctx, problem, config)
        assert sol.workspace_size == -(-flipped // 256) * 256
    assert SOLVER.workspace_size(ctx, _problem().canonical) == 0


def test_split_k_where_the_tiles_leave_sms_idle() -> None:
    ctx = _ctx()
    small = _problem(n=32, c=512, k=512, in_spatial=(7, 7)).canonical  # ResNet-50's l4.3x3
    cfg = SOLVER.default_perf_config(ctx, small)
    assert cfg["split"] > 1
    sol = SOLVER.get_solution(ctx, small, cfg)
    assert [k.kernel_name for k in sol.kernels] == [wgmma.KERNEL, wgmma.REDUCE_KERNEL]
    assert sol.workspace_size == cfg["split"] * 32 * 7 * 7 * 512 * 4
    units = plan._tiles(plan.gemm_view(small), (cfg["tw"], cfg["th"], 1, cfg["tn"]))
    assert units * (512 // cfg["bn"]) * cfg["split"] <= 132
    big = _problem(n=32, c=256, k=256, in_spatial=(56, 56)).canonical
    assert SOLVER.default_perf_config(ctx, big)["split"] == 1
    assert {c["split"] for c in SOLVER.perf_config_space(ctx, big)} == {1}


@pytest.mark.parametrize(
    ("n", "hw"), [(32, 56), (32, 28), (32, 14), (32, 7), (16, 224), (3, 13), (1, 1)]
)
def test_pixel_boxes_cover_the_output_in_few_tiles(n: int, hw: int) -> None:
    p = _problem(n=n, in_spatial=(hw, hw)).canonical
    v = plan.gemm_view(p)
    boxes = plan.pixel_boxes(v)
    assert boxes
    oh, ow = p.out_spatial
    lower = math.ceil(n * oh * ow / plan.ROWS)
    for tw, th, td, tn in boxes:
        assert td == 1  # 2-D: no depth
        assert 1 <= tw * th * tn <= plan.ROWS
        assert tw <= ow and th <= oh and tn <= n
        assert plan._tiles(v, (tw, th, td, tn)) >= lower
    best = plan._tiles(v, boxes[0])
    assert [plan._tiles(v, b) for b in boxes] == sorted(plan._tiles(v, b) for b in boxes)
    # the rectangles a layer of ResNet-50 or VGG-16 needs waste at most an eighth of a tile's rows
    if hw in (56, 28, 224):
        assert best * plan.ROWS <= lower * plan.ROWS * 8 / 7


def test_configs_are_valid_and_the_default_is_among_them() -> None:
    ctx = _ctx()
    for p in (_problem(k=512, n=32, in_spatial=(28, 28)), _problem(k=64), _problem(k=200)):
        canon = p.canonical
        space = SOLVER.perf_config_space(ctx, canon)
        assert space
        assert all(SOLVER.is_valid_perf_config(ctx, canon, c) for c in space)
        assert SOLVER.default_perf_config(ctx, canon) in space
        assert max(c["bn"] for c in space) <= max(64, 1 << (canon.k - 1).bit_length())
    bad = dict(SOLVER.default_perf_config(ctx, _problem().canonical))
    for key, value in (("bn", 96), ("stages", 7), ("tw", 0), ("tw", 200), ("cluster", 4)):
        assert not SOLVER.is_valid_perf_config(ctx, _problem().canonical, {**bad, key: value})


def test_ping_pong_tiles_take_turns_in_persistent_blocks() -> None:
    ctx = _ctx()
    p = _problem(k=512, c=128, n=32, in_spatial=(28, 28)).canonical
    space = SOLVER.perf_config_space(ctx, p)
    turns = [c for c in space if c["pingpong"]]
    assert turns and all(c["persist"] == 1 for c in turns)
    assert {(c["bm"], c["bn"]) for c in turns} == {
        (bm, bn) for bm, bn, pingpong in plan.STAGES if pingpong
    }
    cfg = turns[0]
    assert not SOLVER.is_valid_perf_config(ctx, p, {**cfg, "persist": 0})
    assert not SOLVER.is_valid_perf_config(ctx, p, {**cfg, "pingpong": 2})
    (kernel,) = SOLVER.get_solution(ctx, p, cfg).kernels
    assert "-DMIO_PINGPONG=1" in kernel.options
    cooperative = SOLVER.default_perf_config(ctx, p)
    recorded = {k: v for k, v in cooperative.items() if k != "pingpong"}  # an older record
    assert SOLVER.is_valid_perf_config(ctx, p, recorded)
    (kernel,) = SOLVER.get_solution(ctx, p, recorded).kernels
    assert "-DMIO_PINGPONG=0" in kernel.options


def test_a_normal_find_also_measures_the_next_best_tiles() -> None:
    ctx = _ctx()
    p = _problem(n=16, c=512, k=512, in_spatial=(28, 28)).canonical  # VGG-16's conv4_2
    default = SOLVER.default_perf_config(ctx, p)
    others = SOLVER.find_configs(ctx, p)
    assert len(others) == wgmma._ALTERNATIVES
    space = SOLVER.perf_config_space(ctx, p)
    tiles = {(c["bm"], c["bn"], c["pingpong"]) for c in [default, *others]}
    assert len(tiles) == 1 + len(others)  # one configuration per tile
    assert all(c in space for c in others)
    assert (64, 256, 1) in tiles  # the measured fastest there (H100, fp16)


def test_split_k_keeps_a_slice_per_part() -> None:
    ctx = _ctx()
    p = _problem(c=64, filter_spatial=(1, 1), pads=(0, 0)).canonical  # one slice in all
    cfg = SOLVER.default_perf_config(ctx, p)
    assert SOLVER.is_valid_perf_config(ctx, p, cfg)
    assert not SOLVER.is_valid_perf_config(ctx, p, {**cfg, "split": 2})


def test_narrow_layers_take_narrower_tiles_or_split_k_to_fill_the_device() -> None:
    ctx = _ctx()
    small = _problem(n=8, c=512, k=512, in_spatial=(7, 7)).canonical  # 4 boxes of pixels
    large = _problem(n=32, c=256, k=256, in_spatial=(56, 56)).canonical
    few = SOLVER.default_perf_config(ctx, small)
    many = SOLVER.default_perf_config(ctx, large)
    assert few["bn"] < 256 and few["split"] > 1 and many["split"] == 1
    v = plan.gemm_view(small)
    units = plan._tiles(v, (few["tw"], few["th"], 1, few["tn"])) * math.ceil(512 / few["bn"])
    assert units * few["split"] >= 66  # at least half the SMs busy


def _struct_format(body: str) -> str:
    """A C struct body's ints then long longs as a ``struct`` format (ints first: no padding)."""
    ints = longs = 0
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if not decl:
            continue
        kind, names = decl.split(" ", 1) if not decl.startswith("long long") else ("ll", decl[10:])
        count = len(names.rstrip(";").split(","))
        if kind == "int":
            assert not longs, "ints after the 64-bit fields would change the padding"
            ints += count
        else:
            assert kind == "ll", decl
            longs += count
    return f"<{ints}i{longs if longs != 1 else ''}q"


@pytest.mark.parametrize(
    ("name", "flat", "depth"),
    [("MioWgmmaGeom", "_GEOMETRY", "_GEOMETRY_3D"), ("MioFlipGeom", "_FLIP", "_FLIP_3D")],
)
def test_geometry_struct_matches_the_kernel(name: str, flat: str, depth: str) -> None:
    source = (wgmma.KERNEL_DIR / "igemm_wgmma.cu").read_text()
    body = re.search(rf"struct {name} \{{(.*?)\}};", source, re.S).group(1)
    plain, three, rest = re.match(r"(.*?)#if MIO_3D\n(.*?)#endif\n(.*)", body, re.S).groups()
    assert not rest.strip()  # the depth fields come last: the 2-D layout is unchanged
    assert getattr(wgmma, flat).format == _struct_format(plain)
    assert getattr(wgmma, depth).format == _struct_format(three)
    # the 2-D part ends on an 8-byte boundary: the depth fields start where the host puts them
    assert getattr(wgmma, flat).size % 8 == 0


def test_three_d_problems_take_a_depth_in_the_box_and_the_taps() -> None:
    ctx = _ctx()
    for direction in ("forward", "backward_data"):
        p = _problem3d(direction=direction, n=2, c=64, k=128, in_spatial=(8, 8, 8)).canonical
        assert SOLVER.is_applicable(ctx, p), SOLVER.is_applicable(ctx, p).reason
        v = plan.gemm_view(p)
        assert v.three and v.taps == 27 and v.slices == 27 * (v.c // 64)
        space = SOLVER.perf_config_space(ctx, p)
        assert space and all("td" in c for c in space)
        default = SOLVER.default_perf_config(ctx, p)
        assert default in space and SOLVER.is_valid_perf_config(ctx, p, default)
        box = (default["tw"], default["th"], default["td"], default["tn"])
        assert math.prod(box) <= default["bm"] and default["td"] > 1  # 8x8 planes: boxes deep
        sol = SOLVER.get_solution(ctx, p, default)
        main = sol.kernels[-1] if default["split"] == 1 else sol.kernels[-2]
        assert main.kernel_name == wgmma.KERNEL and "-DMIO_3D=1" in main.options
        if direction == "backward_data":
            assert "-DMIO_B_MN=1" in main.options  # a packed KTRSC filter is read as it is
        # without a depth, a 3-D config is not a 2-D problem's, and the reverse
        flat = _problem(direction=direction).canonical
        assert not SOLVER.is_valid_perf_config(ctx, flat, default)
        assert not SOLVER.is_valid_perf_config(ctx, p, SOLVER.default_perf_config(ctx, flat))
    # the 2-D kernels are built as before: no MIO_3D
    (kernel,) = SOLVER.get_solution(ctx, _problem().canonical).kernels
    assert not any(o.startswith("-DMIO_3D") for o in kernel.options)
    # strided backward data in any dimension is declined, as in 2-D
    strided = _problem3d(direction="backward_data", strides=(2, 1, 1)).canonical
    assert "stride 1 only" in SOLVER.is_applicable(ctx, strided).reason


def test_three_d_channels_first_tensors_are_copied_through_folded_planes() -> None:
    ctx = _ctx()
    p = _problem3d(layout="NCDHW", in_spatial=(4, 6, 10)).canonical
    assert SOLVER.is_applicable(ctx, p)
    assert operands.staged(p) == ("x", "w", "y")
    sol = SOLVER.get_solution(ctx, p)
    names = [k.kernel_name for k in sol.kernels]
    assert names.count(layout.KERNEL) == 3
    copy = layout.stage(p.x, "x", True, 0, "-DMIO_DTYPE_FP16")
    n, c, pixels, w, to_nhwc, sn, sc, sh, sw = layout._GEOMETRY.unpack(copy.geometry)
    # depth and rows folded: 4 x 6 rows of 10, the row stride the tensor's
    assert (n, c, pixels, w, sh, sw) == (2, 64, 4 * 6 * 10, 10, 10, 1) and to_nhwc
    assert (sn, sc) == (64 * 240, 240)
    flipped = 64 * 64 * 27 * 2
    bwd = _problem3d(direction="backward_data", layout="NDHWC", dtype="float32").canonical
    tf32 = wgmma.GpuWgmmaTf32Solver()
    tctx = _ctx(math_mode="tf32")
    assert tf32.is_applicable(tctx, bwd)
    sol = tf32.get_solution(tctx, bwd)
    assert sol.kernels[0].kernel_name == wgmma.FLIP_KERNEL
    assert sol.kernels[0].grid[2] == 27  # one z block per tap
    assert operands.flipped_filter_bytes(bwd) == flipped * 2


def test_solution_kernel_and_launch_shape() -> None:
    ctx = _ctx()
    p = _problem(n=32, c=256, k=256, in_spatial=(56, 56)).canonical
    cfg = SOLVER.default_perf_config(ctx, p)
    sol = SOLVER.get_solution(ctx, p, cfg)
    (kernel,) = sol.kernels
    assert kernel.block == (wgmma.THREADS,)
    assert "--gpu-architecture=sm_90a" in kernel.options
    assert f"-DMIO_BN={cfg['bn']}" in kernel.options
    box = (cfg["tw"], cfg["th"], 1, cfg["tn"])
    tiles = plan._tiles(plan.gemm_view(p), box) * math.ceil(256 / cfg["bn"])
    assert tiles > 132 and cfg["persist"] == 1
    assert kernel.grid == (132,)  # persistent: one block per SM walks the tiles
    assert f"-DMIO_CLUSTER={cfg['cluster']}" in kernel.options
    for cluster in (1, 2):
        one_each = {**cfg, "persist": 0, "cluster": cluster, "pingpong": 0}
        one_each = SOLVER.get_solution(ctx, p, one_each)
        assert one_each.kernels[0].grid == (tiles,)  # an even number of tiles: no idle block
    odd = _problem(n=1, c=64, k=64, in_spatial=(8, 24)).canonical  # three boxes of 8 x 8
    cfg = {**SOLVER.default_perf_config(ctx, odd), "tw": 8, "th": 8, "tn": 1, "persist": 0}
    cfg["pingpong"] = 0
    for cluster, blocks in ((1, 3), (2, 4)):  # a cluster's second block of the last pair idles
        grid = SOLVER.get_solution(ctx, odd, {**cfg, "cluster": cluster}).kernels[0].grid
        assert grid == (blocks,)
    assert sol.workspace_size == 0
    assert SOLVER.is_dynamic  # sizes are arguments: the default find measures it


def test_every_tile_fits_registers_and_shared_memory() -> None:
    for (bm, bn, pingpong), depths in plan.STAGES.items():
        rows = bm if pingpong else bm // 2  # a ping-pong tile is one consumer's whole
        assert rows * bn // 128 <= 128  # fp32 accumulators per consumer thread
        assert rows % 64 == 0  # m64 sub-tiles
        for stages in depths:
            assert stages * (bm + bn) * plan.BK * 2 + 1024 <= 227 * 1024


def test_estimates_only_what_it_computes() -> None:
    ctx = _ctx()
    assert SOLVER.wti(ctx, _problem().canonical) > 0
    assert SOLVER.wti(ctx, _problem(direction="backward_data").canonical) > 0
    assert SOLVER.wti(ctx, _problem(direction="backward_weights").canonical) == -1.0
    assert SOLVER.wti(ctx, _problem3d().canonical) > 0  # 3-D: the same kernel, MIO_3D


TF32 = wgmma.GpuWgmmaTf32Solver()


def test_tf32_applies_to_fp32_in_the_tf32_math_mode_only() -> None:
    fp32 = _problem(dtype="float32", c=36, k=20).canonical  # 144-byte rows: TMA's 16 bytes
    assert TF32.is_applicable(_ctx(math_mode="tf32"), fp32)
    exact = TF32.is_applicable(_ctx(), fp32)
    assert not exact and "math mode is 'exact'" in exact.reason
    half = TF32.is_applicable(_ctx(math_mode="tf32"), _problem().canonical)
    assert not half and "float16: this solver computes float32" in half.reason
    odd = TF32.is_applicable(_ctx(math_mode="tf32"), _problem(dtype="float32", c=6).canonical)
    assert not odd and "a multiple of 4" in odd.reason  # 24-byte rows
    assert not SOLVER.is_applicable(_ctx(math_mode="tf32"), fp32)  # fp16/bf16 only
    assert "tf32" in TF32.numerical_notes


def test_tf32_slices_are_32_channels_of_128_bytes() -> None:
    ctx = _ctx(math_mode="tf32")
    p = _problem(dtype="float32", n=8, c=96, k=128, in_spatial=(14, 14)).canonical
    v = plan.gemm_view(p)
    assert v.bk == 32 and v.slices == 9 * 3
    cfg = TF32.default_perf_config(ctx, p)
    kernel = TF32.get_solution(ctx, p, cfg).kernels[0]
    assert kernel.kernel_name == wgmma.KERNEL
    assert "-DMIO_DTYPE_TF32" in kernel.options and "-DMIO_B_MN=0" in kernel.options
    half = plan.gemm_view(_problem(n=8, c=96, k=128, in_spatial=(14, 14)).canonical)
    assert half.bk == 64 and half.slices == 9 * 2
    # backward data always through the flipped filter: TF32 operands are K-major only
    bwd = _problem(dtype="float32", direction="backward_data", c=32, k=64).canonical
    cfg = {**TF32.default_perf_config(ctx, bwd), "split": 1}
    names = [k.kernel_name for k in TF32.get_solution(ctx, bwd, cfg).kernels]
    assert names == [wgmma.FLIP_KERNEL, wgmma.KERNEL]
    assert TF32.workspace_size(ctx, bwd, cfg) == operands.flip_room(bwd) > 0


def test_tf32_estimates_half_the_fp16_rate() -> None:
    ctx = _ctx(math_mode="tf32")
    big = {"n": 32, "c": 256, "k": 256, "in_spatial": (28, 28)}
    fp32 = _problem(dtype="float32", **big).canonical
    fp16 = _problem(**big).canonical
    ideal32, ideal16 = ctx.ideal_ms(fp32), _ctx().ideal_ms(fp16)
    ms32 = ideal32 / TF32.wti(ctx, fp32)
    ms16 = ideal16 / SOLVER.wti(_ctx(), fp16)
    assert 1.5 < ms32 / ms16 < 2.5  # compute-bound: about twice the time


@pytest.mark.parametrize("direction", ["forward", "backward_data"])
def test_channels_first_tensors_go_through_packed_copies(direction: str) -> None:
    ctx = _ctx()
    p = _problem(direction=direction, n=4, c=72, k=40, layout="NCHW").canonical
    assert SOLVER.is_applicable(ctx, p)
    names = operands.staged(p)
    read, written = ("y", "x") if direction == "backward_data" else ("x", "y")
    # forward also copies its filter (channels not innermost); backward data flips it
    assert names == ((read, "w", written) if direction == "forward" else (read, written))
    cfg = SOLVER.default_perf_config(ctx, p)
    sol = SOLVER.get_solution(ctx, p, cfg)
    copies = [k for k in sol.kernels if k.kernel_name == layout.KERNEL]
    assert len(copies) == len(names)
    assert all(k.source == layout.SOURCE and k.block == (32, 8) for k in copies)
    # each copy is a whole packed tensor in the workspace, 256-byte aligned, in order
    staged, part_at, size = operands.workspace(p, cfg["cluster"], cfg["split"])
    assert [s.name for s in staged] == list(names)
    for s in staged:
        t = getattr(p, s.name)
        assert s.nbytes == t.element_count * 2 and s.offset % 256 == 0
        assert s.to_nhwc == (s.name != written)
    assert all(a.offset + a.nbytes <= b.offset for a, b in itertools.pairwise(staged))
    assert part_at >= staged[-1].offset + staged[-1].nbytes
    assert sol.workspace_size == size == SOLVER.workspace_size(ctx, p, cfg)
    # the kernels see packed channels-last tensors: the same geometry as an NHWC problem
    nhwc = _problem(direction=direction, n=4, c=72, k=40, layout="NHWC").canonical
    assert wgmma.gemm_view(layout.with_packed(p, names))._replace(flip=False) == (
        wgmma.gemm_view(nhwc)._replace(flip=False)
    )
    # and the estimate pays for the copies
    assert SOLVER.wti(ctx, p) < SOLVER.wti(ctx, nhwc)


def test_a_filter_whose_taps_are_not_one_run_is_copied_for_forward() -> None:
    base = _problem(n=2, c=64, k=64)
    w = miocore.TensorDescriptor("float16", base.w.lengths, strides=(600, 1, 200, 64))
    p = miocore.ConvProblem(base.direction, x=base.x, w=w, y=base.y, conv=base.conv).canonical
    assert operands.staged(p) == ("w",)
    assert SOLVER.is_applicable(_ctx(), p)
    assert operands.staged(base.canonical) == ()


def test_channels_last_tensors_with_strides_tma_cannot_take_are_copied_too() -> None:
    base = _problem(n=2, c=72, k=40)
    h, w = base.x.lengths[2:]
    # channels innermost, but each pixel 76 channels apart: 152 bytes, no multiple of 16
    x = miocore.TensorDescriptor("float16", base.x.lengths, strides=(h * w * 76, 1, w * 76, 76))
    oh, ow = base.y.lengths[2:]
    y = miocore.TensorDescriptor("float16", base.y.lengths, strides=(oh * ow * 41, 1, ow * 41, 41))
    p = miocore.ConvProblem(base.direction, x=x, w=base.w, y=base.y, conv=base.conv).canonical
    assert operands.staged(p) == ("x",)
    odd = miocore.ConvProblem(base.direction, x=base.x, w=base.w, y=y, conv=base.conv).canonical
    assert operands.staged(odd) == ("y",)  # odd strides: no paired stores as it lies
    for problem in (p, odd):
        assert SOLVER.is_applicable(_ctx(), problem)
        assert SOLVER.workspace_size(_ctx(), problem) > 0

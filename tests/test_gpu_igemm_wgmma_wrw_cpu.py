"""CPU checks of ``igemm.gpu_wgmma_wrw``: where it applies, its pixel boxes, configurations,
workspace and the geometry it hands the kernel. No device is needed (the kernel is compiled by
the ``cuda-compile`` environment and run by ``tests/test_gpu_igemm_wgmma_wrw.py``)."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

import miocore
from miocore.testing import cpu_context

wrw = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw")
wrw_plan = pytest.importorskip("miocore_igemm.gpu_wgmma_wrw_plan")
layout = pytest.importorskip("miocore_igemm.gpu_wgmma_layout")

SOLVER = wrw.GpuWgmmaWrwSolver()


def _ctx(arch: str = "sm90", backend: str = "cuda", sms: int = 132) -> miocore.ExecutionContext:
    device = dataclasses.replace(
        cpu_context().device, backend=backend, compute_units=sms, arch=arch
    )
    return miocore.ExecutionContext(device=device)


def _problem(**kw) -> miocore.ConvProblem:
    args = dict(
        n=2, c=64, k=64, in_spatial=(9, 11), filter_spatial=(3, 3), pads=(1, 1),
        dtype="float16", layout="NHWC",
    )  # fmt: skip
    direction = kw.pop("direction", "backward_weights")
    args.update(kw)
    return miocore.ConvProblem.from_sizes(direction, **args)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"arch": "sm80"}, "sm_90"),
        ({"backend": "hip", "arch": "gfx942"}, "sm_90"),
        ({"dtype": "float32"}, "bfloat16 and float16"),
        ({"direction": "forward"}, "computes backward weights"),
        ({"direction": "backward_data"}, "computes backward weights"),
        ({"c": 12}, "12 channels of x"),
        ({"k": 20}, "20 channels of dy"),
        ({"groups": 2}, "2 groups"),
        ({"strides": (9, 1)}, "stride"),
    ],
)  # fmt: skip
def test_declines_with_the_reason(change: dict, reason: str) -> None:
    ctx_args = {k: change.pop(k) for k in ("arch", "backend") if k in change}
    answer = SOLVER.is_applicable(_ctx(**ctx_args), _problem(**change))
    assert not answer
    assert reason in answer.reason


def test_applies_with_a_filter_of_any_layout() -> None:
    for dtype in ("float16", "bfloat16"):
        assert SOLVER.is_applicable(_ctx("sm_90"), _problem(dtype=dtype).canonical)
    assert SOLVER.is_applicable(_ctx(), _problem(c=40, strides=(2, 2), dilations=(2, 1)))
    base = _problem(c=72, k=136)
    w = miocore.TensorDescriptor("float16", base.w.lengths, layout="NCHW")
    mixed = miocore.ConvProblem(base.direction, x=base.x, w=w, y=base.y, conv=base.conv)
    assert SOLVER.is_applicable(_ctx(), mixed.canonical)


@pytest.mark.parametrize(("n", "hw"), [(32, 56), (32, 7), (32, 14), (16, 224), (3, 13), (1, 1)])
def test_pixel_boxes_hold_64_pixels_and_cover_the_output(n: int, hw: int) -> None:
    p = _problem(n=n, in_spatial=(hw, hw)).canonical
    boxes = wrw.pixel_boxes(p)
    assert boxes
    oh, ow = p.out_spatial
    lower = math.ceil(n * oh * ow / wrw.PIXELS)
    counts = [wrw._boxes(p, b) for b in boxes]
    assert counts == sorted(counts) and counts[0] >= lower
    for tw, th, td, tn in boxes:
        assert td == 1 and tw * th * tn == wrw.PIXELS  # 2-D: no depth
    if hw in (56, 224):  # powers of two divide the layer: no box wasted
        assert counts[0] == lower
    if (n, hw) == (32, 7):  # 7 x 7 images: rows of 8 columns, at most an eighth empty
        assert counts[0] * wrw.PIXELS <= lower * wrw.PIXELS * 8 / 7 + wrw.PIXELS


def test_configs_are_valid_and_the_default_is_among_them() -> None:
    ctx = _ctx()
    for p in (
        _problem(n=32, c=64, k=64, in_spatial=(56, 56)),
        _problem(n=32, c=512, k=512, in_spatial=(7, 7)),
        _problem(n=16, c=256, k=64, in_spatial=(40, 40), strides=(2, 2)),
        _problem(c=136, k=72),
    ):
        canon = p.canonical
        space = SOLVER.perf_config_space(ctx, canon)
        assert space and all(SOLVER.is_valid_perf_config(ctx, canon, c) for c in space)
        assert SOLVER.default_perf_config(ctx, canon) in space
        assert all(c in space for c in SOLVER.find_configs(ctx, canon))
        assert max(c["bm"] for c in space) <= max(64, 1 << (canon.k - 1).bit_length())
    canon = _problem().canonical
    good = dict(SOLVER.default_perf_config(ctx, canon))
    for key, value in (("bn", 96), ("stages", 7), ("tw", 3), ("tn", 0), ("split", 5)):
        assert not SOLVER.is_valid_perf_config(ctx, canon, {**good, key: value})
    assert not SOLVER.is_valid_perf_config(ctx, canon, {**good, "split": 64})  # 2 boxes here


def test_64_channel_layers_take_the_64_x_64_tile_and_split_the_pixels() -> None:
    ctx = _ctx()
    p = _problem(n=32, c=64, k=64, in_spatial=(56, 56)).canonical  # ResNet-50's l1.3x3
    space = SOLVER.perf_config_space(ctx, p)
    assert {(c["bm"], c["bn"]) for c in space if "span" not in c} == {(64, 64)}
    cfg = SOLVER.default_perf_config(ctx, p)
    assert cfg["split"] > 1  # 9 tiles for 132 SMs
    sol = SOLVER.get_solution(ctx, p, cfg)
    assert [k.kernel_name for k in sol.kernels] == [wrw.KERNEL, wrw.REDUCE_KERNEL]
    # each consumer of a 64 x 64 tile sums every other stage into its own slab
    assert sol.workspace_size == 2 * cfg["split"] * 64 * 9 * 64 * 4
    assert sol.workspace_size == SOLVER.workspace_size(ctx, p, cfg)
    assert "-DMIO_BM=64" in sol.kernels[0].options and "-DMIO_BN=64" in sol.kernels[0].options
    fields = wrw_plan._GEOMETRY.unpack(wrw_plan.pack_geometry(p, cfg))
    assert fields[19:22] == (cfg["split"], 0, 2 * cfg["split"])  # split, direct, slabs
    assert wrw.STAGES[64, 64] % 2 == 0  # a slot keeps its consumer


def test_one_part_on_a_channels_last_filter_stores_straight_into_it() -> None:
    ctx = _ctx()
    p = _problem(n=32, c=512, k=512, in_spatial=(7, 7)).canonical  # ResNet-50's l4.3x3
    cfg = {**SOLVER.default_perf_config(ctx, p), "bm": 128, "bn": 128, "stages": 6, "split": 1}
    sol = SOLVER.get_solution(ctx, p, cfg)
    assert [k.kernel_name for k in sol.kernels] == [wrw.KERNEL]
    assert sol.workspace_size == 0
    grid = sol.kernels[0].grid[0]
    assert grid == min(132, 4 * 4 * 9)  # persistent blocks over k x c tiles x taps
    # the same in a channels-first filter goes through the reduce's strided stores
    w = miocore.TensorDescriptor("float16", p.w.lengths, layout="NCHW")
    nchw = miocore.ConvProblem(p.direction, x=p.x, w=w, y=p.y, conv=p.conv).canonical
    sol = SOLVER.get_solution(ctx, nchw, cfg)
    assert [k.kernel_name for k in sol.kernels] == [wrw.KERNEL, wrw.REDUCE_KERNEL]
    assert sol.workspace_size == 512 * 9 * 512 * 4
    fields = wrw_plan._GEOMETRY.unpack(wrw_plan.pack_geometry(nchw, cfg))
    assert fields[22:26] == (512 * 9, 3, 1, 9)  # the filter's k, r, s and c strides


def test_geometry_matches_the_kernel_struct() -> None:
    ctx = _ctx()
    p = _problem(n=3, c=72, k=136, in_spatial=(17, 11), filter_spatial=(5, 3), pads=(2, 0),
                 strides=(2, 3), dilations=(1, 2)).canonical  # fmt: skip
    cfg = SOLVER.default_perf_config(ctx, p)
    fields = wrw_plan._GEOMETRY.unpack(wrw_plan.pack_geometry(p, cfg))
    assert wrw_plan._GEOMETRY.size == 22 * 4 + 5 * 8  # 22 ints, then 8-byte aligned int64s
    oh, ow = p.out_spatial
    assert fields[:13] == (3, oh, ow, 136, 72, 5, 3, 2, 3, 2, 0, 1, 2)
    tw, th, tn = fields[13:16]
    assert (tw, th, tn) == (cfg["tw"], cfg["th"], cfg["tn"])
    assert fields[16:19] == (-(-ow // tw), -(-oh // th), wrw._boxes(p, (tw, th, 1, tn)))
    assert fields[26] == 136 * 15 * 72  # one slab: k x taps x c


def test_wti_ranks_it_only_for_backward_weights() -> None:
    ctx = _ctx()
    assert 0 < SOLVER.wti(ctx, _problem(n=32, c=256, k=256, in_spatial=(28, 28)).canonical) <= 1
    assert SOLVER.wti(ctx, _problem(direction="forward").canonical) == -1.0


def test_channels_first_activations_go_through_packed_copies() -> None:
    ctx = _ctx()
    p = _problem(n=4, c=72, k=40, layout="NCHW").canonical
    assert SOLVER.is_applicable(ctx, p)
    assert wrw.staged(p) == ("x", "y")  # the filter is written through its strides
    cfg = SOLVER.default_perf_config(ctx, p)
    sol = SOLVER.get_solution(ctx, p, cfg)
    names = [k.kernel_name for k in sol.kernels]
    assert names[:2] == [layout.KERNEL, layout.KERNEL] and names[2] == wrw.KERNEL
    staged, part_at, size = wrw._workspace(p, cfg, 0)
    assert [s.name for s in staged] == ["x", "y"] and all(s.to_nhwc for s in staged)
    assert staged[1].offset >= staged[0].offset + staged[0].nbytes
    assert part_at >= staged[1].offset + staged[1].nbytes and part_at % 256 == 0
    assert sol.workspace_size == size == SOLVER.workspace_size(ctx, p, cfg)
    assert size >= part_at + wrw._partial_bytes(p, (cfg["bm"], cfg["bn"]), cfg["split"])
    nhwc = _problem(n=4, c=72, k=40, layout="NHWC").canonical
    assert wrw.staged(nhwc) == ()
    assert SOLVER.wti(ctx, p) < SOLVER.wti(ctx, nhwc)


def test_three_d_takes_a_depth_in_the_box_and_the_taps() -> None:
    ctx = _ctx()
    p = miocore.ConvProblem.from_sizes(
        "backward_weights", n=2, c=64, k=128, in_spatial=(8, 12, 16), filter_spatial=(3, 3, 3),
        pads=(1, 1, 1), strides=(1, 2, 1), dtype="float16", layout="NDHWC",
    ).canonical  # fmt: skip
    assert SOLVER.is_applicable(ctx, p)
    space = SOLVER.perf_config_space(ctx, p)
    assert space and all("td" in c and SOLVER.is_valid_perf_config(ctx, p, c) for c in space)
    for tw, th, td, tn in wrw.pixel_boxes(p):
        assert tw * th * td * tn == wrw.PIXELS
    cfg = SOLVER.default_perf_config(ctx, p)
    assert cfg in space
    flat = _problem().canonical
    assert not SOLVER.is_valid_perf_config(ctx, flat, cfg)  # a depth where there is none
    assert not SOLVER.is_valid_perf_config(ctx, p, SOLVER.default_perf_config(ctx, flat))
    sol = SOLVER.get_solution(ctx, p, cfg)
    assert "-DMIO_3D=1" in sol.kernels[0].options
    assert sol.kernels[0].grid[0] <= 132
    packed = wrw_plan.pack_geometry(p, cfg)
    assert len(packed) == wrw_plan._GEOMETRY.size + wrw_plan._GEOMETRY_3D.size
    fields = wrw_plan._GEOMETRY.unpack(packed[: wrw_plan._GEOMETRY.size])
    depth = wrw_plan._GEOMETRY_3D.unpack(packed[wrw_plan._GEOMETRY.size :])
    od, oh, ow = p.out_spatial
    assert fields[:7] == (2, oh, ow, 128, 64, 3, 3)
    assert fields[18] == wrw._boxes(p, (cfg["tw"], cfg["th"], cfg["td"], cfg["tn"]))
    assert fields[26] == 128 * 27 * 64  # one slab: k x taps x c
    ws = p.w.strides  # (k, c, t, r, s)
    assert depth == (od, 3, 1, 1, 1, cfg["td"], -(-od // cfg["td"]), 0, ws[2])
    assert fields[22:26] == (ws[0], ws[3], ws[4], ws[1])
    # the 2-D kernels are built as before
    (kernel, *_) = SOLVER.get_solution(ctx, flat).kernels
    assert not any(o.startswith("-DMIO_3D") for o in kernel.options)


def test_wrw_geometry_struct_matches_the_kernel() -> None:
    from miocore_igemm.gpu_common import KERNEL_DIR

    source = (KERNEL_DIR / "igemm_wgmma_wrw.cu").read_text()
    body = re.search(r"struct MioWrwGeom \{(.*?)\};", source, re.S).group(1)
    plain, three, rest = re.match(r"(.*?)#if MIO_3D\n(.*?)#endif\n(.*)", body, re.S).groups()
    assert not rest.strip()  # the depth fields come last: the 2-D layout is unchanged
    assert wrw_plan._GEOMETRY.size == _struct_bytes(plain) and wrw_plan._GEOMETRY.size % 8 == 0
    assert wrw_plan._GEOMETRY_3D.size == _struct_bytes(three)


def _struct_bytes(body: str) -> int:
    """Bytes of a C struct body of ints, then long longs (no padding between)."""
    size = 0
    for line in body.splitlines():
        decl = line.split("//")[0].strip()
        if decl:
            names = len(decl.rstrip(";").split(","))
            size += names * (8 if decl.startswith("long long") else 4)
    return size


def test_tiles_over_several_taps_on_layers_of_64_channels_or_fewer() -> None:
    # 2, 3 or 4 taps of every channel a tile (bn 128 / 192 / 256), after the per-tap tiles in
    # the space; ranked by the cost model at 0.8 of a per-tap tile's speed (H200: they won on
    # the 3-D U-Net's 27-tap layers, lost on VGG-16's 9-tap ones in split-K parts, won on
    # both in stream-K shares)
    ctx = _ctx()
    p = _problem(n=32, c=64, k=128, in_spatial=(56, 56)).canonical  # 9 taps
    space = SOLVER.perf_config_space(ctx, p)
    spans = [c for c in space if "span" in c and "sk" not in c and "fix" not in c]
    # the fix-up twins (fix) and the stream-K shares (sk) follow them all
    split_k = [c for c in space if "sk" not in c and "fix" not in c]
    assert spans and split_k[-len(spans) :] == spans
    assert {(c["bm"], c["bn"], c["span"]) for c in spans} == {
        (64, 128, 2), (128, 128, 2), (64, 192, 3), (128, 192, 3), (64, 256, 4), (128, 256, 4)
    }  # fmt: skip
    assert all(SOLVER.is_valid_perf_config(ctx, p, c) for c in spans)
    assert "span" not in SOLVER.default_perf_config(ctx, p)  # 9 taps: per tap by default
    assert {c.get("span", 1) for c in SOLVER.find_configs(ctx, p)} == {2, 3}  # ...spans found
    # 3 taps (9 in three groups, nothing repeated) are ranked since a GPU timed them
    assert any(c.get("span") == 3 for c in wrw_plan.ranked(ctx, p))
    per_tap = next(c for c in space if "span" not in c)
    wide = {**per_tap, "bn": 192, "stages": wrw_plan.STAGES[per_tap["bm"], 192]}
    assert not SOLVER.is_valid_perf_config(ctx, p, miocore.PerfConfig(**wide))
    assert SOLVER.is_valid_perf_config(ctx, p, miocore.PerfConfig(**wide, span=3))
    cube = _problem(n=2, c=64, k=64, in_spatial=(32, 32, 32), filter_spatial=(3, 3, 3),
                    pads=(1, 1, 1), layout="NDHWC").canonical  # fmt: skip
    assert SOLVER.default_perf_config(ctx, cube)["span"] == 3  # 27 taps in 9 groups of 3
    assert any("span" not in c for c in SOLVER.find_configs(ctx, cube))  # per tap found
    # the kernel's units: k tiles x tap groups (9 taps: 5 pairs, 3 fours, the last short)
    for bm, bn, span, groups in ((64, 128, 2, 5), (128, 256, 4, 3), (128, 192, 3, 3)):
        cfg = next(c for c in spans if (c["bm"], c["bn"]) == (bm, bn) and c["split"] == 4)
        sol = SOLVER.get_solution(ctx, p, cfg)
        main = sol.kernels[0]
        assert f"-DMIO_SPAN={span}" in main.options and f"-DMIO_BN={bn}" in main.options
        assert main.grid == (min(132, 128 // bm * groups * 4),)
        assert sol.workspace_size == 4 * 128 * 9 * 64 * 4  # one fp32 slab a part
    # 64 x 192: each consumer takes the whole tile on alternate stages, a slab each
    halves = next(c for c in spans if (c["bm"], c["bn"]) == (64, 192) and c["split"] == 4)
    assert halves["stages"] % 2 == 0
    assert SOLVER.get_solution(ctx, p, halves).workspace_size == 2 * 4 * 128 * 9 * 64 * 4
    good = dict(spans[0])
    for bad in ({**good, "span": 3}, {**good, "bn": 256}, {**good, "span": "two"}):
        assert not SOLVER.is_valid_perf_config(ctx, p, bad), bad
    wide = _problem(n=8, c=96, k=64, in_spatial=(14, 14)).canonical  # two boxes a tap
    assert not any("span" in c for c in SOLVER.perf_config_space(ctx, wide))
    assert not SOLVER.is_valid_perf_config(ctx, wide, good)
    one_tap = _problem(c=64, k=64, filter_spatial=(1, 1), pads=(0, 0)).canonical
    assert not any("span" in c for c in SOLVER.perf_config_space(ctx, one_tap))

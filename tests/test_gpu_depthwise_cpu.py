"""CPU checks of ``direct.gpu_depthwise``: the kernel's parameter struct, applicability and its
reasons, configs, workspace sizes, the launch geometry. No device is needed."""

from __future__ import annotations

import re

import numpy as np
import pytest
from gpu_depthwise_fixtures import cuda_context, depthwise_problem, macros, nhwc_default

import miocore

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs = configs_module = pytest.importorskip("miocore_direct.gpu_depthwise_configs")
defaults = pytest.importorskip("miocore_direct.gpu_depthwise_defaults")


_ctx, _problem, _nhwc_default, _options = cuda_context, depthwise_problem, nhwc_default, macros


def test_param_struct_matches_the_kernel() -> None:
    source = (geo.KERNEL_DIR / "depthwise_common.h").read_text()
    body = re.search(r"struct MioDwParams \{(.*?)\};", source, re.S).group(1)
    decls = [line.split("//")[0].strip() for line in body.splitlines()]
    decls = [d for d in decls if d]
    assert decls[:3] == ["MioTensor5 a;", "MioTensor5 b;", "MioTensor5 w;"]
    fields = []
    for decl in decls[3:]:
        assert decl.startswith("mio_index ") and decl.endswith(";"), decl
        fields += [f.strip() for f in decl[len("mio_index ") : -1].split(",")]
    assert tuple(fields) == geo.PARAM_FIELDS


def test_pack_params_order_and_completeness() -> None:
    packed = geo.pack_params({f: i for i, f in enumerate(geo.PARAM_FIELDS)})
    values = np.frombuffer(packed, np.int64)
    assert list(values) == list(range(len(geo.PARAM_FIELDS)))
    with pytest.raises(ValueError):
        geo.pack_params({"items": 1})


def test_applicability_and_reasons() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    for direction in ("forward", "backward_data", "backward_weights"):
        for layout in ("NCHW", "NHWC"):
            assert s.is_applicable(ctx, _problem(direction, layout=layout).canonical)
    assert s.is_applicable(ctx, _problem(k=96).canonical)  # channel multiplier 3
    assert s.is_applicable(
        ctx,
        _problem(
            in_spatial=(5, 6, 7), filter_spatial=(3, 3, 3), pads=(1, 1, 1), layout="NDHWC"
        ).canonical,
    )
    assert s.is_applicable(ctx, _problem(filter_spatial=(11, 11), pads=(5, 5)).canonical)
    grouped = s.is_applicable(ctx, _problem(groups=8).canonical)
    assert not grouped and "not depthwise" in grouped.reason
    dense = s.is_applicable(ctx, _problem(groups=1).canonical)
    assert not dense and "groups == C" in dense.reason
    huge = _problem(in_spatial=(14, 4100), filter_spatial=(3, 41), dilations=(1, 100), pads=(1, 0))
    answer = s.is_applicable(ctx, huge.canonical)
    # the NCHW tile does not fit in shared memory at this dilation
    assert not answer and "shared memory" in answer.reason


def test_configs_fit_and_default_is_in_the_space() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    for direction in ("forward", "backward_data", "backward_weights"):
        for layout in ("NCHW", "NHWC"):
            for dtype in ("float32", "float16", "bfloat16"):
                for kw in ({}, {"strides": (2, 2)}, {"k": 64}, {"c": 6, "k": 6, "groups": 6}):
                    p = _problem(direction, layout=layout, dtype=dtype, **kw).canonical
                    space = s.perf_config_space(ctx, p)
                    assert space, (direction, layout, dtype, kw)
                    default = s.default_perf_config(ctx, p)
                    assert default in space
                    assert all(s.is_valid_perf_config(ctx, p, c) for c in space)
                    sol = s.get_solution(ctx, p, default)
                    for k in sol.kernels:
                        assert all(0 < g <= 2**31 - 1 for g in k.grid)
                        assert all(g <= 65535 for g in k.grid[1:])
                        assert np.prod(k.block) <= 256
    assert not s.is_valid_perf_config(ctx, _problem().canonical, miocore.PerfConfig(vec=4))


def test_nchw_planes_per_block_only_where_one_tile_covers_the_plane() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    small = _problem(layout="NCHW", dtype="float16", in_spatial=(14, 14), c=40, k=40, groups=40)
    space = s.perf_config_space(ctx, small.canonical)
    several = [c for c in space if "pp" in c]
    assert {c["pp"] for c in several} == set(geo.NCHW_PLANES)
    assert all(c["py"] * c["pp"] <= geo.MAX_NCHW_OUTPUTS for c in several)
    assert all(configs.nchw_tiles(small.canonical, c)[2] == 1 for c in several)
    # 3x3 on 14x14: 4 planes of 16x16 tiles, 2 rows a thread (dw_nchw's fitted rule)
    assert defaults.default_nchw_fitted(small.canonical) == miocore.PerfConfig(
        tw=16, by=8, py=2, pp=4
    )
    for cfg in several:
        assert s.is_valid_perf_config(ctx, small.canonical, cfg)
        (kernel,) = s.get_solution(ctx, small.canonical, cfg).kernels
        assert f"-DMIO_PP={cfg['pp']}" in kernel.options
        assert kernel.grid[0] == 2 * -(-40 // cfg["pp"])  # images x groups of pp channels
    one = s.get_solution(ctx, small.canonical, space[0]).kernels[0]
    assert not any(o.startswith("-DMIO_PP") for o in one.options)  # built as before
    bad = miocore.PerfConfig(**{**dict(several[0]), "pp": 3})
    assert not s.is_valid_perf_config(ctx, small.canonical, bad)
    large = _problem(layout="NCHW", in_spatial=(112, 112)).canonical
    assert not any("pp" in c for c in s.perf_config_space(ctx, large))


def test_nchw_default_by_written_plane_and_filter() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()

    def default(direction: str = "forward", **kw) -> miocore.PerfConfig:
        p = _problem(direction, layout="NCHW", dtype="float16", **kw).canonical
        cfg = defaults.default_nchw_fitted(p)  # dw_nchw's tile (the default where rows don't run)
        assert cfg in s.perf_config_space(ctx, p) or "pp" in cfg
        return cfg

    cfg = miocore.PerfConfig
    assert default(in_spatial=(7, 7)) == cfg(tw=8, by=8, py=1, pp=8)
    assert default(in_spatial=(7, 7), filter_spatial=(5, 5), pads=(2, 2)) == cfg(
        tw=8, by=4, py=2, pp=4
    )
    assert default(in_spatial=(14, 14), filter_spatial=(5, 5), pads=(2, 2)) == cfg(
        tw=16, by=4, py=4
    )
    assert default(in_spatial=(56, 56)) == cfg(tw=32, by=8, py=4)
    assert default(in_spatial=(112, 112)) == cfg(tw=32, by=4, py=4)
    # the written plane decides: stride 2 forward writes 7x7, backward data writes 14x14
    assert default(in_spatial=(14, 14), strides=(2, 2))["tw"] == 8
    assert default("backward_data", in_spatial=(14, 14), strides=(2, 2))["tw"] == 16
    # a plane of one row: the fitted tile does not cover it; the default still fits
    flat = default(in_spatial=(1, 300), filter_spatial=(1, 3), pads=(0, 1))
    assert flat["by"] * flat["py"] <= 2
    # the strided backward data gathers: dw_nchw is the solver's default there
    p = _problem("backward_data", layout="NCHW", dtype="float16", strides=(2, 2)).canonical
    assert "tw" in s.default_perf_config(ctx, p)


def test_nchw_default_runs_rows_from_registers() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()

    def default(direction: str = "forward", n: int = 64, **kw) -> miocore.PerfConfig:
        kw = {"c": 256, "k": 256, "groups": 256, **kw}
        p = _problem(direction, n=n, layout="NCHW", dtype="float16", **kw).canonical
        cfg = s.default_perf_config(ctx, p)
        assert cfg in s.perf_config_space(ctx, p)
        return cfg

    cfg = miocore.PerfConfig
    k5 = {"filter_spatial": (5, 5), "pads": (2, 2)}
    assert default(in_spatial=(7, 7)) == cfg(ox=8, oy=1)  # a whole row a thread
    assert default(in_spatial=(14, 14)) == cfg(ox=4, oy=2)
    assert default("backward_data", in_spatial=(14, 14), **k5) == cfg(ox=4, oy=4)
    assert default(in_spatial=(28, 28)) == cfg(ox=4, oy=4)
    assert default(in_spatial=(112, 112)) == cfg(ox=8, oy=4)
    # stride 2: the written plane's width decides, and half the rows a thread
    assert default(in_spatial=(112, 112), strides=(2, 2)) == cfg(ox=4, oy=2)
    assert default(in_spatial=(28, 28), strides=(2, 2)) == cfg(ox=4, oy=1)
    assert default(in_spatial=(14, 14), strides=(2, 2), **k5) == cfg(ox=8, oy=1)
    # a batch of one on a small layer: fewer outputs a thread keep the SMs busy
    small = default(n=1, in_spatial=(56, 56))
    assert small == cfg(ox=8, oy=2)  # 50,176 runs; 8x4 would be 25,088
    assert default(n=1, in_spatial=(14, 14)) == cfg(ox=4, oy=1)  # as few as there are
    # a plane of one row: one row a thread
    assert default(in_spatial=(1, 300), filter_spatial=(1, 3), pads=(0, 1)) == cfg(ox=8, oy=1)
    # where the rows kernel does not fit (11x11 filters), dw_nchw's fitted tile
    assert "tw" in default(in_spatial=(28, 28), filter_spatial=(11, 11), pads=(5, 5))


@pytest.mark.parametrize(("dtype", "chunk"), [("float16", 4), ("bfloat16", 4), ("float32", 2)])
def test_nchw_stages_rows_in_eight_byte_chunks(
    dtype: str, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = dw.GpuDepthwiseSolver()
    p = _problem(layout="NCHW", dtype=dtype).canonical
    tile = next(c for c in s.perf_config_space(_ctx(), p) if "tw" in c)  # dw_nchw's
    (kernel,) = s.get_solution(_ctx(), p, tile).kernels
    assert kernel.kernel_name == "dw_nchw" and f"-DMIO_NV={chunk}" in kernel.options
    monkeypatch.setattr(geo, "NCHW_CHUNK_BYTES", 0)  # element by element, as before
    (kernel,) = s.get_solution(_ctx(), p, tile).kernels
    assert not any(o.startswith("-DMIO_NV") for o in kernel.options)


def test_nchw_rows_from_registers_where_they_apply() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()

    def rows(direction: str = "forward", **kw) -> list[miocore.PerfConfig]:
        p = _problem(direction, **{"layout": "NCHW", "dtype": "float16", **kw}).canonical
        return [c for c in s.perf_config_space(ctx, p) if "ox" in c]

    every = [miocore.PerfConfig(ox=x, oy=y) for x in geo.ROWS_OX for y in geo.ROWS_OY]
    assert rows() == every
    assert rows(strides=(2, 2)) == every  # forward at stride 2
    assert rows("backward_data") == every  # stride 1: the flipped filter
    assert rows("backward_data", strides=(2, 2)) == []  # the gather stays in dw_nchw
    assert rows(layout="NHWC") == []
    assert (
        rows(layout="NCDHW", in_spatial=(4, 6, 5), filter_spatial=(3, 3, 3), pads=(1, 1, 1)) == []
    )
    # the window and the filter live in registers: 11x11 filters and wide dilations do not fit
    assert rows(filter_spatial=(11, 11), pads=(5, 5)) == []
    assert rows(in_spatial=(14, 60), dilations=(1, 25), pads=(1, 25)) == []
    assert rows(filter_spatial=(7, 7), pads=(3, 3), strides=(2, 2)) == every
    p = _problem(layout="NCHW", dtype="float16", in_spatial=(14, 20), pads=(1, 3)).canonical
    cfg = miocore.PerfConfig(ox=8, oy=2)
    assert s.is_valid_perf_config(ctx, p, cfg)
    assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(ox=6, oy=2))
    assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(ox=8))
    (kernel,) = s.get_solution(ctx, p, cfg).kernels
    assert (kernel.kernel_name, kernel.source) == ("dw_nchw_rows", geo.ROWS_SOURCE)
    # padding 3 along W: the window starts 3 elements before a 4-element chunk boundary
    for opt in ("-DMIO_OX=8", "-DMIO_OY=2", "-DMIO_NV=4", "-DMIO_PWM=3"):
        assert opt in kernel.options
    runs, groups, items = configs.rows_items(p, cfg)
    assert (runs, groups, items) == (3, 7, 2 * 32 * 3 * 7)  # 20 columns in runs of 8, 14 rows
    assert kernel.grid == (-(-items // geo.ROWS_THREADS),)
    assert kernel.block == (geo.ROWS_THREADS,)


def test_vector_width_rules() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    # a 7x7 plane: dw_nhwc (14-28 wide 16-bit planes default to staged tiles)
    nhwc16 = _problem(layout="NHWC", dtype="float16", in_spatial=(7, 7)).canonical
    assert s.default_perf_config(ctx, nhwc16)["vec"] == 4  # 8-byte loads: fewer registers
    assert 8 in {c["vec"] for c in s.perf_config_space(ctx, nhwc16)}  # 16-byte loads
    nhwc32 = _problem(layout="NHWC").canonical
    assert s.default_perf_config(ctx, nhwc32)["vec"] == 4
    odd = _problem(layout="NHWC", c=6, k=6, groups=6, dtype="float16").canonical
    assert s.default_perf_config(ctx, odd)["vec"] == 2  # 6 channels: 4-byte pairs
    mult = _problem(layout="NHWC", k=64, dtype="float16").canonical
    assert {c["vec"] for c in s.perf_config_space(ctx, mult)} == {1}
    # vec > 1 ships a scalar twin for misaligned buffers
    sol = s.get_solution(ctx, nhwc16)
    assert [k.kernel_name for k in sol.kernels] == ["dw_nhwc", "dw_nhwc"]
    assert "-DMIO_VEC=1" in sol.kernels[1].options


def test_backward_data_stride_one_runs_flipped_forward_and_strided_gathers() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    one = s.get_solution(ctx, _problem("backward_data").canonical)
    assert "-DMIO_FLIP=1" in one.kernels[0].options
    assert "-DMIO_GATHER=0" in one.kernels[0].options
    two = s.get_solution(ctx, _problem("backward_data", strides=(2, 2)).canonical)
    assert "-DMIO_FLIP=0" in two.kernels[0].options
    assert "-DMIO_GATHER=1" in two.kernels[0].options


def test_workspace_is_the_split_partials() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    big = _problem("backward_weights", n=64, in_spatial=(56, 56), layout="NHWC").canonical
    sol = s.get_solution(ctx, big)
    split = sol.kernels[0].grid[0]
    assert split > 1
    assert sol.workspace_size == s.workspace_size(ctx, big) == split * big.w.element_count * 4
    assert sol.kernels[-1].kernel_name == "dw_wrw_reduce"
    tiny = _problem("backward_weights", n=1, in_spatial=(4, 4)).canonical
    assert s.workspace_size(ctx, tiny) == 0
    assert [k.kernel_name for k in s.get_solution(ctx, tiny).kernels] == ["dw_wrw"]
    assert s.workspace_size(ctx, _problem().canonical) == 0


def test_wti_ranks_above_naive_and_below_one() -> None:
    s = dw.GpuDepthwiseSolver()
    ctx = _ctx()
    for direction in ("forward", "backward_data", "backward_weights"):
        w = s.wti(ctx, _problem(direction, n=64, in_spatial=(56, 56)).canonical)
        assert 0.1 < w <= 1.0


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_large_filters_stage_their_taps_in_shared_memory(dtype: str) -> None:
    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    # ConvNeXt-T's first 7x7 layer: 49 taps x 4 channels do not fit the register budget.
    p = _problem(n=4, c=96, k=96, in_spatial=(56, 56), filter_spatial=(7, 7), pads=(3, 3),
                 groups=96, dtype=dtype, layout="NHWC").canonical  # fmt: skip
    cfg = s.default_perf_config(ctx, p)
    sol = s.get_solution(ctx, p, cfg)
    vec, scalar = (_options(k) for k in sol.kernels)
    assert (vec["MIO_WREG"], vec["MIO_WSH"]) == ("0", "1")
    assert int(vec["MIO_CT"]) == cfg["ct"] == sol.kernels[0].block[0] == 8
    taps, width = 49, int(vec["MIO_CT"]) * int(vec["MIO_VEC"])
    assert 4 * taps * width <= geo.SHARED_LIMIT
    # the scalar twin (unaligned buffers) keeps its 49 taps in registers
    assert (scalar["MIO_WREG"], scalar["MIO_WSH"]) == ("1", "0")
    # 3x3 taps stay in registers; a filter too large for shared memory reads global memory
    assert geo.filter_storage(9, 4, 24) == (1, 0)
    assert geo.filter_storage(343, 4, 32) == (0, 0)


@pytest.mark.parametrize("f", (3, 5, 7))
def test_backward_weights_default_takes_tiles(f: int) -> None:
    # Every 2-D channels-innermost plain depthwise layer takes dw_wrw_tile by default, the 3x3
    # ones on 112x112 planes too (since revision 3); 32 channels a block but for 7x7 filters
    # on small planes, 3x3 in row groups.
    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    for hw in (112, 56, 14):
        p = _problem("backward_weights", n=4, c=96, k=96, in_spatial=(hw, hw),
                     filter_spatial=(f, f), pads=(f // 2, f // 2), groups=96, dtype="float16",
                     layout="NHWC").canonical  # fmt: skip
        cfg = s.default_perf_config(ctx, p)
        assert cfg in s.perf_config_space(ctx, p)
        kernel = s.get_solution(ctx, p, cfg).kernels[0]
        assert kernel.kernel_name == "dw_wrw_tile"
        assert (cfg["vec"], cfg["tp"], cfg["tq"]) == (8, 4, 16)
        assert cfg["cb"] == (16 if f == 7 and hw <= 28 else 32)
        assert cfg.get("pg") == (4 if f == 3 else None)  # 3x3: every tap in a thread


@pytest.mark.parametrize("split", (2, 7, 130, 400))
def test_backward_weights_reduce_splits_every_element_over_lanes(split: int) -> None:
    # dw_wrw_reduce: 32 filter elements a block (one 128-byte row of partials per load), up to
    # 32 split lanes of about four partials each, every element covered by the grid.
    wcount = 96 * 9
    k = geo.reduce_kernel(["-DMIO_DTYPE_FP16"], wcount, split)
    assert k.kernel_name == "dw_wrw_reduce"
    lanes = k.block[1]
    assert k.block[0] == 32 and 1 <= lanes <= 32
    assert -(-split // lanes) <= max(4, -(-split // 32))  # partials per lane
    assert k.grid[0] * 32 >= wcount


def test_backward_weights_tiles_only_where_they_apply() -> None:
    # dw_wrw_tile takes 2-D channels-innermost plain depthwise layers; its staged tiles fit the
    # static shared memory and its block (channels x filter rows) a launch.
    s, ctx = dw.GpuDepthwiseSolver(), _ctx()

    def tiles(**kw: object) -> list[miocore.PerfConfig]:
        p = _problem("backward_weights", **kw).canonical
        return [c for c in s.perf_config_space(ctx, p) if "cb" in c]

    for f, st in ((3, 1), (5, 2), (7, 1)):
        kw = {"c": 96, "k": 96, "groups": 96, "in_spatial": (56, 56), "filter_spatial": (f, f)}
        p = _problem("backward_weights", layout="NHWC", dtype="float16", strides=(st, st),
                     pads=(f // 2, f // 2), **kw).canonical  # fmt: skip
        configs = [c for c in s.perf_config_space(ctx, p) if "cb" in c]
        assert configs
        for cfg in configs:
            assert s.is_valid_perf_config(ctx, p, cfg)
            assert geo.wrw_tile_shared_bytes(p, cfg) <= geo.SHARED_LIMIT
            kernel = s.get_solution(ctx, p, cfg).kernels[0]
            rows = cfg.get("pg") or f  # row groups, or a thread per filter row
            assert kernel.kernel_name == "dw_wrw_tile" and kernel.block == (cfg["cb"], rows)
            assert int(_options(kernel)["MIO_WRW_TILE"]) == 1
    assert not tiles(layout="NCHW", c=8, k=8, groups=8)  # channels outer
    assert not tiles(layout="NHWC", c=8, k=16, groups=8)  # a channel multiplier
    assert not tiles(layout="NDHWC", c=8, k=8, groups=8, in_spatial=(6, 6, 6),
                     filter_spatial=(3, 3, 3), pads=(1, 1, 1))  # fmt: skip
    forward = _problem("forward", layout="NHWC", c=8, k=8, groups=8).canonical
    assert not any("cb" in c for c in s.perf_config_space(ctx, forward))


def _strip(cfg: miocore.PerfConfig) -> tuple[int, int, int, int]:
    return cfg["vec"], cfg["pix"], cfg["py"], cfg["ct"]


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_forward_and_backward_data_defaults_of_16_bit_layers(dtype: str) -> None:
    # 16-bit 2-D 3x3/5x5 layers take the rule fitted on the full sweep (8 channel vectors per
    # block; 5x5 on 16-byte vectors in 4 x 1 strips, 2 x 1 at stride 2, the gather one pixel;
    # 3x3 on 8-byte vectors in 4 x 2 strips, 1 x 2 at stride 2); the 3x3 gather and stride-1
    # 3x3 planes of 56 and more keep the general rule (all channels of a small layer in one
    # block row). That is dw_nhwc's rule; where a staged tile's rule takes the layer (the
    # gather, 8 images: the tile alone, 0.44-0.46x dw_nhwc's time at that batch) it stays the
    # rule of devices and layers the tiles do not reach.
    def default(direction: str, f: int, stride: int, hw: int) -> miocore.PerfConfig:
        return _nhwc_default(direction, f, stride, hw, dtype, plain=True)

    assert "toh" in _nhwc_default("backward_data", 5, 2, 56, dtype)

    for direction in ("forward", "backward_data"):
        assert _strip(default(direction, 5, 1, 28)) == (8, 4, 1, 8)
        assert _strip(default(direction, 3, 1, 7)) == (4, 4, 2, 8)  # 14-28: staged tiles
        assert default(direction, 3, 1, 56)["ct"] != 8  # stride-1 3x3 planes of 56: general
    assert default("forward", 5, 2, 56)["pix"] == 2
    assert _strip(default("forward", 3, 2, 56)) == (4, 1, 2, 8)
    assert _strip(default("backward_data", 5, 2, 56)) == (8, 1, 1, 8)  # the gather
    assert default("backward_data", 3, 2, 56)["ct"] != 8  # the 3x3 gather: the general rule


def test_bf16_gather_on_large_planes_takes_16_byte_vectors() -> None:
    # bf16 3x3 strided backward data writing planes of 56 and more, where the staged tiles'
    # runs have too few blocks (8 images): 16-byte vectors, all 96 channels in one block row,
    # 4 blocks an SM (timed faster on every such layer); fp16 and smaller planes keep 8-byte
    # vectors; 112-wide planes have blocks enough for the staged tiles' runs
    # (dw_nhwc's rule: at 8 images the staged tile alone now takes these layers)
    assert _nhwc_default("backward_data", 3, 2, 56, "bfloat16", plain=True) == miocore.PerfConfig(
        vec=8, pix=1, py=1, ct=12, mb=4
    )
    assert _nhwc_default("backward_data", 3, 2, 28, "bfloat16", plain=True)["vec"] == 4
    assert _nhwc_default("backward_data", 3, 2, 56, "float16", plain=True)["vec"] == 4
    assert "toh" in _nhwc_default("backward_data", 3, 2, 112, "bfloat16")
    assert _nhwc_default("forward", 3, 2, 112, "bfloat16").get("vec") == 4


def test_forward_and_backward_data_defaults_of_fp32_layers() -> None:
    # fp32 2-D 3x3/5x5 layers: their own fitted rule (3x3 on 16-byte vectors in 4 x 2 strips,
    # 4 x 1 at stride 2; 5x5 on 8-byte vectors in 4 x 4 strips, 16 channel vectors a block;
    # the gather one pixel on 16-byte vectors, 8 channel vectors), whatever the plane size.
    def default(direction: str, f: int, stride: int, hw: int) -> miocore.PerfConfig:
        return _nhwc_default(direction, f, stride, hw, "float32")

    for direction in ("forward", "backward_data"):
        for hw in (14, 56, 112):
            assert _strip(default(direction, 3, 1, hw)) == (4, 4, 2, 8)
            assert _strip(default(direction, 5, 1, hw)) == (2, 4, 4, 16)
    assert _strip(default("forward", 3, 2, 56)) == (4, 4, 1, 8)
    assert _strip(default("forward", 5, 2, 56)) == (2, 4, 4, 16)
    for f in (3, 5):
        assert _strip(default("backward_data", f, 2, 56)) == (4, 1, 1, 8)
    # other filters keep the general rule
    assert default("forward", 7, 1, 28)["ct"] != 16


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_register_cap_where_it_was_measured(dtype: str) -> None:
    # 16-bit 3x3: the gather takes 4 blocks per SM, stride 1 on planes of 56+ takes 3; smaller
    # planes, strided forward, 5x5 filters and fp32 stay uncapped (dw_nhwc's rule).
    def mb(direction: str, f: int, stride: int, hw: int, dt: str = dtype) -> int:
        return _nhwc_default(direction, f, stride, hw, dt, plain=True).get("mb", 0)

    assert mb("backward_data", 3, 2, 56) == 4
    assert mb("backward_data", 3, 2, 14) == 4
    for direction in ("forward", "backward_data"):
        assert mb(direction, 3, 1, 112) == 3
        assert mb(direction, 3, 1, 56) == 3
        assert mb(direction, 3, 1, 7) == 0
        assert mb(direction, 5, 1, 112) == 0
        assert mb(direction, 3, 1, 112, "float32") == 0
    assert mb("forward", 3, 2, 28) == 0  # too few tiles for the staged runs
    assert mb("backward_data", 5, 2, 56) == 0


def test_register_cap_reaches_the_kernel_and_is_validated() -> None:
    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    p = _problem(n=8, c=96, k=96, groups=96, in_spatial=(56, 56), dtype="float16",
                 layout="NHWC").canonical  # fmt: skip
    base = miocore.PerfConfig(vec=4, pix=2, py=4, ct=24)
    capped = miocore.PerfConfig(**base, mb=4)
    assert s.is_valid_perf_config(ctx, p, capped)
    assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**base, mb=5))
    assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**base, mb="many"))
    for kernel in s.get_solution(ctx, p, capped).kernels:
        assert "-DMIO_MINB=4" in kernel.options
    assert not any("MIO_MINB" in o for k in s.get_solution(ctx, p, base).kernels for o in k.options)


def test_configs_with_fractions_are_not_valid() -> None:
    # a fraction is no tile size: int() would round 2.5 to 2 and take a config never asked for
    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    p = _problem("backward_weights", layout="NHWC", dtype="float16", c=96, k=96, groups=96,
                 in_spatial=(56, 56)).canonical  # fmt: skip
    tile = miocore.PerfConfig(vec=8, cb=32, tp=4, tq=16, pg=4)
    assert s.is_valid_perf_config(ctx, p, tile)
    assert s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**{**tile, "tp": 4.0}))
    for key, value in (("tp", 2.5), ("cb", 32.5), ("pg", 1.5)):
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**{**tile, key: value}))

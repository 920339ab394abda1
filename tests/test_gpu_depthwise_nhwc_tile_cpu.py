"""CPU checks of ``direct.gpu_depthwise``'s staged NHWC tiles (``dw_nhwc_tile``): where they
apply, their configs and validation, the launch geometry, the default where the GPU timed them
faster, and runs of several tiles a block. No device is needed (the kernel itself runs on the
host in ``test_gpu_depthwise_host.py`` and on the GPU in ``test_gpu_depthwise.py``)."""

from __future__ import annotations

import pytest
from gpu_depthwise_fixtures import cuda_context, depthwise_problem

import miocore

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs_module = pytest.importorskip("miocore_direct.gpu_depthwise_configs")

_ctx, _problem = cuda_context, depthwise_problem


def test_nhwc_staged_tiles_where_they_apply() -> None:
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    def tiles(direction: str = "forward", layout: str = "NHWC", **kw) -> list:
        args = dict(n=2, c=32, k=32, groups=32, in_spatial=(28, 28), dtype="float16")
        args.update(kw)
        return nhwc_tile_configs(_problem(direction, layout=layout, **args).canonical)

    assert tiles() and tiles("backward_data") and tiles(dtype="float32")
    assert not tiles(layout="NCHW")
    # the gather (strided backward data): strips of one phase, pix x stride dividing tow
    gather = tiles("backward_data", strides=(2, 2))
    assert gather and all(c["tow"] % (2 * c["pix"]) == 0 for c in gather)
    assert not tiles(c=20, k=20, groups=20)  # 20 fp16 channels: not whole 16-byte chunks
    assert tiles(c=20, k=20, groups=20, dtype="float32")  # 20 fp32 channels are
    assert not tiles(k=64)  # a channel multiplier
    assert not tiles(in_spatial=(8, 8, 8), filter_spatial=(3, 3, 3), pads=(1, 1, 1), layout="NDHWC")
    # 5x5: 2 channels a thread keep its 25 taps in registers; 7x7: 1 channel a thread, 49
    # taps; 9x9 (81 taps) are too many
    five = tiles(filter_spatial=(5, 5), pads=(2, 2))
    assert five and all(c["vec"] == 2 for c in five)
    assert all(c["vec"] == 4 for c in tiles())
    seven = tiles(filter_spatial=(7, 7), pads=(3, 3))
    assert seven and all(c["vec"] == 1 for c in seven)
    assert not tiles(filter_spatial=(9, 9), pads=(4, 4))
    # every tile fits the static shared memory: a dilated stride-2 layer keeps smaller tiles
    big = tiles(dilations=(3, 3), pads=(3, 3), strides=(2, 2), in_spatial=(112, 112))
    assert big and all(_staged_bytes(c, 2, 7, 2) <= geo.SHARED_LIMIT for c in big)
    assert (16, 16) not in {(c["toh"], c["tow"]) for c in big if c["ch"] == 64}


def _staged_bytes(cfg, esize: int, reach: int, stride: int) -> int:
    rows = (cfg["toh"] - 1) * stride + reach
    return rows * ((cfg["tow"] - 1) * stride + reach) * cfg["ch"] * esize


def test_nhwc_staged_tile_solution_and_validation() -> None:
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    p = _problem(n=4, c=40, k=40, groups=40, in_spatial=(30, 20), dtype="bfloat16",
                 layout="NHWC").canonical  # fmt: skip
    configs = nhwc_tile_configs(p)
    space = s.perf_config_space(ctx, p)
    # in the tuning space after dw_nhwc's configs; not this 20-wide bf16 plane's default
    assert configs and space[-len(configs) :] == configs
    assert all(configs_module.fits(p, c) for c in space)
    assert "toh" not in s.default_perf_config(ctx, p)
    cfg = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=16, pix=2, mb=3)
    assert cfg in configs and s.is_valid_perf_config(ctx, p, cfg)
    main, twin = s.get_solution(ctx, p, cfg).kernels
    assert main.kernel_name == "dw_nhwc_tile" and twin.kernel_name == "dw_nhwc"
    for flag in ("-DMIO_CH=32", "-DMIO_TOH=8", "-DMIO_TOW=16", "-DMIO_PIX=2", "-DMIO_MINB=3"):
        assert flag in main.options
    assert "-DMIO_VEC=1" in twin.options  # one element a load: any alignment
    # 4 images x 4 tile rows x 2 tile columns; 40 channels in blocks of 32, channel blocks first
    assert main.grid == (4 * 4 * 2 * 2, 1) and main.block == (8, 32)
    for bad in (
        {**cfg, "mb": 5},
        {**cfg, "ch": 12},  # not whole chunks
        {**cfg, "pix": 3},  # does not divide tow
        {**cfg, "extra": 1},
        {k: v for k, v in cfg.items() if k != "pix"},
    ):
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**bad)), bad


def _sm90() -> miocore.ExecutionContext:
    """A CUDA sm_90 context (the tensor memory accelerator's; no device is opened)."""
    import dataclasses

    device = dataclasses.replace(_ctx().device, arch="sm_90")
    return miocore.ExecutionContext(device=device)


def _tile_default(
    dtype: str,
    direction: str = "forward",
    n: int = 64,
    c: int = 96,
    hw: int = 56,
    f: int = 3,
    stride: int = 1,
    ctx: miocore.ExecutionContext | None = None,
    **kw,
) -> miocore.PerfConfig:
    """``direct.gpu_depthwise``'s default for an NHWC depthwise layer (checked to be in its
    space) on ``ctx`` (a CUDA device without TMA by default)."""
    s, ctx = dw.GpuDepthwiseSolver(), ctx or _ctx()
    args = {"pads": (f // 2, f // 2), **kw}
    p = _problem(direction, n=n, c=c, k=c, groups=c, in_spatial=(hw, hw), filter_spatial=(f, f),
                 strides=(stride, stride), dtype=dtype, layout="NHWC", **args)  # fmt: skip
    p = p.canonical
    cfg = s.default_perf_config(ctx, p)
    assert cfg in s.perf_config_space(ctx, p)
    return cfg


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_nhwc_staged_tile_default_where_the_gpu_timed_it_faster(dtype: str) -> None:
    # 16-bit 3x3 and 5x5 layers on written planes of 14 and more, timed on MobileNetV2's and
    # EfficientNet-B0's layers at batch 64: runs of at most 256 channel-tiles, as long as the
    # grid keeps 300 blocks
    def default(direction: str = "forward", **kw) -> miocore.PerfConfig:
        return _tile_default(dtype, direction, **kw)

    def tile(ch: int, toh: int, tow: int, pix: int, vec: int = 4, **kw) -> miocore.PerfConfig:
        capped = {"mb": 3} if vec == 4 else {}  # 5x5 (2 channels a thread): uncapped
        return miocore.PerfConfig(vec=vec, ch=ch, toh=toh, tow=tow, pix=pix, **capped, **kw)

    for direction in ("forward", "backward_data"):
        # planes of 112: 16 x 16 tiles of 32 channels, 64 x 49 of them in runs of 8
        assert default(direction, c=32, hw=112) == tile(32, 16, 16, 4, nt=8)
        # planes of 56 whose channels 48 divides and 64 does not: 48-channel blocks, strips of
        # 2 x 2
        assert default(direction, c=144, hw=56) == tile(48, 8, 16, 2, nt=4, py=2)
        assert default(direction, c=128, hw=56) == tile(64, 8, 16, 4, nt=4)
        assert default(direction, c=192, hw=28) == tile(64, 8, 16, 4, nt=4)  # 384 blocks
        assert default(direction, c=384, hw=14) == tile(64, 8, 16, 4, nt=2)  # 4: 192 blocks
        # too few tiles for runs: a single tile on planes up to 28, dw_nhwc above
        assert default(direction, n=8, hw=28) == tile(64, 8, 16, 4)
        assert "toh" not in default(direction, n=8, hw=56)
        # 5x5: 8 x 16 tiles of 32 channels, 2 a thread, uncapped (in runs only)
        assert default(direction, hw=28, f=5) == tile(32, 8, 16, 4, vec=2, nt=4)
        assert "toh" not in default(direction, n=8, hw=28, f=5)
        # planes of 7, dilation and fp32 keep dw_nhwc
        assert "toh" not in default(direction, c=960, hw=7)
        assert "toh" not in default(direction, hw=28, dilations=(2, 2), pads=(2, 2))
        assert "toh" not in _tile_default("float32", direction, hw=28)
    # strided forward: 8 x 8 outputs of 32 channels, 2 a thread (5x5: 4), in runs of 2 at least
    assert default(hw=112, stride=2) == tile(32, 8, 8, 2, nt=8)  # 64 x 49 x 3 tiles
    assert default(c=192, hw=28, stride=2) == tile(32, 8, 8, 2, nt=4)  # 64 x 4 x 6 tiles
    assert default(c=144, hw=56, f=5, stride=2) == tile(32, 8, 8, 4, vec=2, nt=8)
    assert "toh" not in default(n=8, hw=28, stride=2)  # 96 tiles: no run keeps 300 blocks
    assert "toh" not in default(c=576, hw=14, stride=2)  # a written plane of 7
    # the gather: 16 x 16 tiles of dx, 4 a thread; 32 channels on planes of 112, 48 on 56
    # where 48 divides the channels and 64 does not, else 64
    gather = "backward_data"
    assert default(gather, hw=112, stride=2) == tile(32, 16, 16, 4, nt=8)
    assert default(gather, c=144, hw=56, stride=2) == tile(48, 16, 16, 4, nt=4)
    assert default(gather, c=240, hw=28, stride=2) == tile(64, 16, 16, 4, nt=2)
    assert default(gather, c=144, hw=56, f=5, stride=2) == tile(48, 16, 16, 4, vec=2, nt=4)
    # no run keeps 300 blocks: the shortest where it keeps 264 (64 x 9 x 2 a run: 288)
    assert default(gather, c=576, hw=14, stride=2) == tile(64, 16, 16, 4, nt=2)
    # fewer: the tile alone where it keeps a block an SM (batch 32: 0.50x dw_nhwc's time on
    # dw240k3s2@28; batches 8 and 16: 0.41-0.57x on MobileNetV2's and EfficientNet-B0's)
    assert default(gather, c=384, hw=14, stride=2) == tile(64, 16, 16, 4)  # 64 x 6: 384
    assert "toh" not in default(gather, n=8, hw=28, stride=2)  # 8 x 4 x 2 = 64: under 132


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_nhwc_staged_tile_default_through_tma_on_sm90(dtype: str) -> None:
    # on sm_90 the defaults' tiles are staged by the tensor memory accelerator (the fortieth
    # session's sweep: 0.82x the non-TMA defaults' time; launched channel blocks first, the
    # forty-second's: strided forward on written planes of 56 and more and the 48-channel
    # strips too); written planes of 7 take 8 x 8 tiles in runs of 4 (0.75-0.82x dw_nhwc's
    # time); 5x5 stride 1 in strips of 2 rows
    def default(direction: str = "forward", **kw) -> miocore.PerfConfig:
        return _tile_default(dtype, direction, ctx=_sm90(), **kw)

    def tile(ch: int, toh: int, tow: int, pix: int, vec: int = 4, **kw) -> miocore.PerfConfig:
        capped = {"mb": 3} if vec == 4 else {}
        return miocore.PerfConfig(vec=vec, ch=ch, toh=toh, tow=tow, pix=pix, **capped, **kw)

    for direction in ("forward", "backward_data"):
        assert default(direction, c=32, hw=112) == tile(32, 16, 16, 4, nt=8, tma=1)
        assert default(direction, c=192, hw=28) == tile(64, 8, 16, 4, nt=4, tma=1)
        assert default(direction, c=144, hw=56) == tile(48, 8, 16, 2, nt=4, py=2, tma=1)
        assert default(direction, hw=28, f=5) == tile(32, 8, 16, 4, vec=2, nt=4, py=2, tma=1)
        assert default(direction, c=960, hw=7) == tile(64, 8, 8, 4, nt=4, tma=1)
        # 5x5 on 7: runs of 4 where their blocks fill one wave of 2 an SM (240 of 960
        # channels), else dw_nhwc (288 of 1152 channels: a second wave); 16 channels on 112
        assert default(direction, c=960, hw=7, f=5) == tile(64, 8, 8, 4, vec=2, nt=4, py=2, tma=1)
        assert "toh" not in default(direction, c=1152, hw=7, f=5)
        assert default(direction, c=16, hw=112) == tile(16, 16, 16, 2, nt=8, py=2, tma=1)
        assert "toh" not in default(direction, n=8, c=960, hw=7)  # 30 blocks: dw_nhwc
        # batch 32 (H200, forty-fifth session): 3x3 on 7 alone where runs of 4 keep under
        # 240 blocks (1152 channels: 144 blocks, 1.23x the single tile's 576), 5x5 on 7 in
        # runs of 4 down to 120 blocks, 5x5 runs as long as they keep 240 blocks
        assert default(direction, n=32, c=1152, hw=7) == tile(64, 8, 8, 4, tma=1)
        assert default(direction, c=1152, hw=7) == tile(64, 8, 8, 4, nt=4, tma=1)  # 288
        assert default(direction, n=32, c=960, hw=7, f=5) == tile(
            64, 8, 8, 4, vec=2, nt=4, py=2, tma=1
        )  # fmt: skip
        assert default(direction, n=32, c=240, hw=28, f=5) == tile(
            32, 8, 16, 4, vec=2, nt=8, py=2, tma=1
        )  # fmt: skip
        # 7x7 stride 1: one 8 x 16 tile a block (8 x 8 on planes of 7), strips of 2 x 4
        seven = {"vec": 1, "py": 2, "tma": 1}
        for c, hw, tow in ((96, 56, 16), (384, 14, 16), (768, 7, 8), (24, 28, 16)):
            ch = 32 if c <= 32 else 64
            want = miocore.PerfConfig(**seven, ch=ch, toh=8, tow=tow, pix=4)
            assert default(direction, c=c, hw=hw, f=7) == want, (c, hw)
        assert "toh" not in default(direction, c=96, hw=56, f=7, dilations=(2, 2), pads=(6, 6))
        assert "toh" not in default(direction, n=2, c=768, hw=7, f=7)  # 24 blocks: dw_nhwc
    assert "toh" not in default(c=96, hw=56, f=7, stride=2)  # 7x7 strided: untimed
    assert "toh" not in _tile_default(dtype, c=96, hw=56, f=7)  # without TMA: dw_nhwc
    assert "toh" not in _tile_default("float32", c=96, hw=56, f=7, ctx=_sm90())
    assert default(hw=112, stride=2) == tile(32, 8, 8, 2, nt=8, tma=1)  # written 56
    assert default(c=192, hw=28, stride=2) == tile(32, 8, 8, 2, nt=4, tma=1)
    assert default(c=576, hw=14, stride=2) == tile(32, 8, 8, 2, nt=4, tma=1)  # written 7
    assert default(c=672, hw=14, f=5, stride=2) == tile(32, 8, 8, 2, vec=2, nt=4, py=2, tma=1)
    assert default("backward_data", hw=112, stride=2) == tile(32, 16, 16, 4, nt=8, tma=1)
    # the same layers without the accelerator keep the tiles of cp.async
    assert "tma" not in _tile_default(dtype, c=32, hw=112)
    assert "toh" not in _tile_default(dtype, c=960, hw=7)


def test_nhwc_staged_tile_runs_of_several_tiles() -> None:
    # nt: a block runs that many tiles in turn from two staging buffers; the grid's x counts
    # runs (the last one short), shared memory doubles, and nt is validated
    from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, nhwc_tile_shared_bytes

    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    p = _problem(n=3, c=40, k=40, groups=40, in_spatial=(30, 20), dtype="float16",
                 layout="NHWC").canonical  # fmt: skip
    one = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=16, pix=2)
    for nt in NHWC_TILE_RUNS:
        run = miocore.PerfConfig(**one, nt=nt)
        assert s.is_valid_perf_config(ctx, p, run)
        assert nhwc_tile_shared_bytes(p, run) == 2 * nhwc_tile_shared_bytes(p, one)
        main = s.get_solution(ctx, p, run).kernels[0]
        assert f"-DMIO_TILES={nt}" in main.options
        assert main.grid == (-(-3 * 4 * 2 // nt) * 2, 1)  # 3 images x 4 x 2 tiles, in runs
    assert not any("MIO_TILES" in o for o in s.get_solution(ctx, p, one).kernels[0].options)
    for nt in (1, 3, 16, "two"):
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**one, nt=nt)), nt
    # a stride-2 fp32 tile whose two buffers exceed the static shared memory
    wide = _problem(n=2, c=64, k=64, groups=64, in_spatial=(64, 64), strides=(2, 2),
                    dtype="float32", layout="NHWC").canonical  # fmt: skip
    big = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=8, pix=4)
    assert s.is_valid_perf_config(ctx, wide, big)
    assert not s.is_valid_perf_config(ctx, wide, miocore.PerfConfig(**big, nt=2))
    # in the tuning space: the tiles capped for 3 blocks, at most 256 channel-tiles a run
    runs = [c for c in s.perf_config_space(ctx, p) if "nt" in c]
    assert runs and all(c["mb"] == 3 and c["nt"] * c["ch"] <= 256 for c in runs)
    assert {(c["ch"], c["nt"]) for c in runs} == {(32, 2), (32, 4), (32, 8), (64, 2), (64, 4)}


def test_nhwc_staged_tile_strips_of_several_rows() -> None:
    # py: a thread's strip is py rows x pix columns (outside the gather); py divides the tile's
    # rows, reaches the kernel as MIO_PY, and strips of 2 rows are in the space with and without
    # caps and in runs
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    s, ctx = dw.GpuDepthwiseSolver(), _ctx()
    p = _problem(n=3, c=40, k=40, groups=40, in_spatial=(30, 20), dtype="float16",
                 layout="NHWC").canonical  # fmt: skip
    tall = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=16, pix=4, py=2)
    assert s.is_valid_perf_config(ctx, p, tall)
    main = s.get_solution(ctx, p, tall).kernels[0]
    assert "-DMIO_PY=2" in main.options and main.grid == (3 * 4 * 2 * 2, 1)
    one = miocore.PerfConfig(**{k: v for k, v in tall.items() if k != "py"})
    assert not any("MIO_PY" in o for o in s.get_solution(ctx, p, one).kernels[0].options)
    for py in (3, 4, 0):  # only the strip heights the space holds
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**one, py=py)), py
    two_row_tile = miocore.PerfConfig(vec=4, ch=32, toh=2, tow=32, pix=4)
    assert s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**two_row_tile, py=2))
    space = nhwc_tile_configs(p)
    tall_space = [c for c in space if "py" in c]
    assert {"mb" in c for c in tall_space} == {True, False}
    assert any("nt" in c for c in tall_space) and all(c["py"] == 2 for c in tall_space)
    # the gather's strips are one phase of the stride: one row
    gather = _problem("backward_data", n=3, c=40, k=40, groups=40, in_spatial=(30, 20),
                      strides=(2, 2), dtype="float16", layout="NHWC").canonical  # fmt: skip
    assert nhwc_tile_configs(gather) and not any("py" in c for c in nhwc_tile_configs(gather))
    assert not s.is_valid_perf_config(ctx, gather, miocore.PerfConfig(**one, py=2))


def test_nhwc_staged_tiles_through_tma_on_sm90_only() -> None:
    # tma: the tile's staging by the tensor memory accelerator, in the space and valid only on
    # CUDA sm_90 and later; the kernel built with MIO_TMA, its buffers rounded to 128 bytes,
    # and the read tensor's 4-D map (C, W, H, N) boxed to the staged tile
    import dataclasses

    from miocore_direct.gpu_depthwise_nhwc_tile import (
        nhwc_tile_shared_bytes,
        nhwc_tile_tma_box,
        nhwc_tile_tma_configs,
        tma_available,
    )

    def ctx_of(arch: str, backend: str = "cuda") -> miocore.ExecutionContext:
        device = dataclasses.replace(_ctx().device, arch=arch, backend=backend)
        return miocore.ExecutionContext(device=device)

    hopper, ampere = ctx_of("sm_90"), ctx_of("sm_80")
    assert tma_available(hopper) and tma_available(ctx_of("sm_100a"))
    assert not tma_available(ampere) and not tma_available(ctx_of("gfx942", "hip"))
    assert not tma_available(ctx_of("x86_64"))
    s = dw.GpuDepthwiseSolver()
    p = _problem(n=3, c=40, k=40, groups=40, in_spatial=(30, 20), dtype="float16",
                 layout="NHWC").canonical  # fmt: skip
    twins = nhwc_tile_tma_configs(p)
    assert twins and all(c["tma"] == 1 for c in twins)
    on_hopper, on_ampere = s.perf_config_space(hopper, p), s.perf_config_space(ampere, p)
    assert on_hopper[-len(twins) :] == twins and not any("tma" in c for c in on_ampere)
    cfg = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=16, pix=2, tma=1)
    assert s.is_valid_perf_config(hopper, p, cfg) and not s.is_valid_perf_config(ampere, p, cfg)
    assert not s.is_valid_perf_config(hopper, p, miocore.PerfConfig(**{**cfg, "tma": 2}))
    main, twin = s.get_solution(hopper, p, cfg).kernels
    assert "-DMIO_TMA=1" in main.options and not any("TMA" in o for o in twin.options)
    # 10 x 18 staged pixels x 32 fp16 channels: 11,520 bytes, a multiple of 128, + a barrier
    plain = miocore.PerfConfig(**{k: v for k, v in cfg.items() if k != "tma"})
    assert nhwc_tile_shared_bytes(p, cfg) == nhwc_tile_shared_bytes(p, plain) + 8
    # at stride 2, 17 x 17 staged pixels x 16 channels: 9,248 bytes, rounded up to 9,344
    p2 = _problem(n=3, c=40, k=40, groups=40, in_spatial=(30, 20), strides=(2, 2),
                  dtype="float16", layout="NHWC").canonical  # fmt: skip
    odd = miocore.PerfConfig(vec=4, ch=16, toh=8, tow=8, pix=2)
    assert nhwc_tile_shared_bytes(p2, odd) == 9248
    assert nhwc_tile_shared_bytes(p2, miocore.PerfConfig(**odd, tma=1)) == 9344 + 8
    dims, strides, box = nhwc_tile_tma_box(p, cfg)
    assert dims == (40, 20, 30, 3) and strides == (80, 80 * 20, 80 * 20 * 30)
    assert box == (32, 18, 10, 1)

"""CPU checks of ``direct.gpu_depthwise``'s staged NHWC tiles (``dw_nhwc_tile``): where they
apply, their configs and validation, the launch geometry, the default where the GPU timed them
faster, and runs of several tiles a block. No device is needed (the kernel itself runs on the
host in ``test_gpu_depthwise_host.py`` and on the GPU in ``test_gpu_depthwise.py``)."""

from __future__ import annotations

import pytest
from gpu_depthwise_fixtures import cuda_context, depthwise_problem, nhwc_default

import miocore

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs_module = pytest.importorskip("miocore_direct.gpu_depthwise_configs")

_ctx, _problem, _nhwc_default = cuda_context, depthwise_problem, nhwc_default


def test_nhwc_staged_tiles_where_they_apply() -> None:
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    def tiles(direction: str = "forward", layout: str = "NHWC", **kw) -> list:
        args = dict(n=2, c=32, k=32, groups=32, in_spatial=(28, 28), dtype="float16")
        args.update(kw)
        return nhwc_tile_configs(_problem(direction, layout=layout, **args).canonical)

    assert tiles() and tiles("backward_data") and tiles(dtype="float32")
    assert not tiles(layout="NCHW")
    assert not tiles("backward_data", strides=(2, 2))  # the gather stays in dw_nhwc
    assert not tiles(c=20, k=20, groups=20)  # 20 fp16 channels: not whole 16-byte chunks
    assert tiles(c=20, k=20, groups=20, dtype="float32")  # 20 fp32 channels are
    assert not tiles(k=64)  # a channel multiplier
    assert not tiles(in_spatial=(8, 8, 8), filter_spatial=(3, 3, 3), pads=(1, 1, 1), layout="NDHWC")
    assert not tiles(filter_spatial=(5, 5), pads=(2, 2))  # 25 taps: too many for registers
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
    # 4 images x 4 tile rows x 2 tile columns; 40 channels in blocks of 32
    assert main.grid == (4 * 4 * 2, 2) and main.block == (8, 32)
    for bad in (
        {**cfg, "mb": 5},
        {**cfg, "ch": 12},  # not whole chunks
        {**cfg, "pix": 3},  # does not divide tow
        {**cfg, "extra": 1},
        {k: v for k, v in cfg.items() if k != "pix"},
    ):
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**bad)), bad


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_nhwc_staged_tile_default_where_the_gpu_timed_it_faster(dtype: str) -> None:
    # 16-bit 3x3 stride-1 layers whose written plane is 14-28 wide take the staged tile of
    # 8 x 16 outputs, 64 channels, 4 a thread, 3 blocks; planes of 7, 56 and 112, stride 2,
    # dilation, 5x5 filters and fp32 keep dw_nhwc
    def default(direction: str, f: int, stride: int, hw: int, dt: str = dtype):
        return _nhwc_default(direction, f, stride, hw, dt)

    tile = miocore.PerfConfig(vec=4, ch=64, toh=8, tow=16, pix=4, mb=3)
    for direction in ("forward", "backward_data"):
        assert default(direction, 3, 1, 28) == tile
        assert default(direction, 3, 1, 14) == tile
        for hw in (7, 56, 112):
            assert "toh" not in default(direction, 3, 1, hw)
        assert "toh" not in default(direction, 5, 1, 28)
        assert "toh" not in default(direction, 3, 1, 28, "float32")
    assert "toh" not in default("forward", 3, 2, 56)  # a 28-wide written plane, strided


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
        assert main.grid == (-(-3 * 4 * 2 // nt), 2)  # 3 images x 4 x 2 tiles, in runs
    assert not any("MIO_TILES" in o for o in s.get_solution(ctx, p, one).kernels[0].options)
    for nt in (1, 3, 16, "two"):
        assert not s.is_valid_perf_config(ctx, p, miocore.PerfConfig(**one, nt=nt)), nt
    # a stride-2 fp32 tile whose two buffers exceed the static shared memory
    wide = _problem(n=2, c=64, k=64, groups=64, in_spatial=(64, 64), strides=(2, 2),
                    dtype="float32", layout="NHWC").canonical  # fmt: skip
    big = miocore.PerfConfig(vec=4, ch=32, toh=8, tow=8, pix=4)
    assert s.is_valid_perf_config(ctx, wide, big)
    assert not s.is_valid_perf_config(ctx, wide, miocore.PerfConfig(**big, nt=2))
    # not in the tuning space until a GPU has timed them
    assert not any("nt" in c for c in s.perf_config_space(ctx, p))

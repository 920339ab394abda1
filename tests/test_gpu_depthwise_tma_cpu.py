"""CPU checks of ``direct.gpu_depthwise``'s tiles staged by the tensor memory accelerator
(sm_90): backward-weights TMA tiles in the space and the default there, their splits, the
tensor maps' launch arguments and L2 promotion. No device is needed."""

from __future__ import annotations

import pytest
from gpu_depthwise_fixtures import cuda_context, depthwise_problem, macros

import miocore

dw = pytest.importorskip("miocore_direct.gpu_depthwise")
geo = pytest.importorskip("miocore_direct.gpu_depthwise_geometry")
configs = pytest.importorskip("miocore_direct.gpu_depthwise_configs")
defaults = pytest.importorskip("miocore_direct.gpu_depthwise_defaults")

_ctx, _problem, _options = cuda_context, depthwise_problem, macros


def test_backward_weights_tiles_through_tma_on_sm90_only() -> None:
    # tma on a dw_wrw_tile config: x's and dy's tiles staged by the tensor memory accelerator
    # as they lie in memory, two items in flight; in the space and valid on sm_90 only, with
    # 16-byte vectors; MIO_TMA on the main kernel, not on its twin for misaligned buffers; two
    # buffers of both tiles on 128-byte boundaries and two barriers; the maps boxed to the tiles
    import dataclasses

    def ctx_of(arch: str) -> miocore.ExecutionContext:
        return miocore.ExecutionContext(device=dataclasses.replace(_ctx().device, arch=arch))

    s, hopper, ampere = dw.GpuDepthwiseSolver(), ctx_of("sm_90"), ctx_of("sm_80")
    p = _problem("backward_weights", layout="NHWC", dtype="float16", c=40, k=40, groups=40,
                 in_spatial=(30, 20)).canonical  # fmt: skip
    twins = configs.wrw_tile_tma_configs(p)
    assert twins and all(c["tma"] == 1 for c in twins)
    assert s.perf_config_space(hopper, p)[-len(twins) :] == twins
    assert not any("tma" in c for c in s.perf_config_space(ampere, p))
    cfg = miocore.PerfConfig(vec=8, cb=32, tp=4, tq=16, pg=4, tma=1)
    assert cfg in twins and s.is_valid_perf_config(hopper, p, cfg)
    assert not s.is_valid_perf_config(ampere, p, cfg)
    for bad in ({**cfg, "tma": 2}, {**cfg, "vec": 4}):  # 8-byte vectors: no TMA
        assert not s.is_valid_perf_config(hopper, p, miocore.PerfConfig(**bad)), bad
    main, twin = s.get_solution(hopper, p, cfg).kernels[:2]
    assert _options(main)["MIO_TMA"] == "1" and "MIO_TMA" not in _options(twin)
    # x: 6 x 18 pixels, dy: 4 x 16, 32 fp16 channels: 6,912 and 4,096 bytes, twice, + barriers
    assert geo.wrw_tile_shared_bytes(p, cfg) == 2 * (6912 + 4096) + 16
    # 2 and 4 channels a thread on TMA tiles only: cb / wv channel lanes on the main kernel,
    # the twin one channel a thread
    wide = miocore.PerfConfig(**cfg, wv=4)
    assert wide in twins and s.is_valid_perf_config(hopper, p, wide)
    main, twin = s.get_solution(hopper, p, wide).kernels[:2]
    assert _options(main)["MIO_WV"] == "4" and main.block == (8, 4)
    assert "MIO_WV" not in _options(twin) and twin.block == (32, 4)
    plain = {k: v for k, v in cfg.items() if k != "tma"}
    for bad in ({**plain, "wv": 2}, {**cfg, "wv": 3}):
        assert not s.is_valid_perf_config(hopper, p, miocore.PerfConfig(**bad)), bad
    (x_dims, x_strides, x_box), (dy_dims, _, dy_box) = geo.wrw_tile_tma_boxes(p, cfg)
    assert x_dims == (40, 20, 30, 2) and x_strides == (80, 1600, 48000)  # 2 images
    assert x_box == (32, 18, 6, 1) and dy_box == (32, 16, 4, 1) and dy_dims == (40, 20, 30, 2)


def test_backward_weights_tma_tiles_split_for_more_blocks() -> None:
    # bs: the split aims at 8 blocks a compute unit instead of 4 (TMA tiles only, in the
    # space for each TMA tile): the same kernels, twice the blocks along the reduction and
    # twice the partials, where the items allow
    import dataclasses

    s = dw.GpuDepthwiseSolver()
    hopper = miocore.ExecutionContext(
        device=dataclasses.replace(_ctx(sms=132).device, arch="sm_90")
    )
    p = _problem("backward_weights", layout="NHWC", dtype="float16", c=144, k=144, groups=144,
                 n=64, in_spatial=(56, 56)).canonical  # fmt: skip
    cfg = miocore.PerfConfig(vec=8, cb=32, tp=4, tq=16, pg=4, tma=1)
    more = miocore.PerfConfig(**cfg, bs=8)
    space = s.perf_config_space(hopper, p)
    assert more in space and miocore.PerfConfig(**cfg, wv=2, bs=8) in space
    assert s.is_valid_perf_config(hopper, p, more)
    plain = {k: v for k, v in cfg.items() if k != "tma"}
    for bad in ({**cfg, "bs": 5}, {**plain, "bs": 8}):
        assert not s.is_valid_perf_config(hopper, p, miocore.PerfConfig(**bad)), bad
    base, wide = s.get_solution(hopper, p, cfg), s.get_solution(hopper, p, more)
    assert [k.kernel_name for k in base.kernels] == [k.kernel_name for k in wide.kernels]
    assert [k.options for k in base.kernels[:2]] == [k.options for k in wide.kernels[:2]]
    # 144 channels in 5 blocks of 32: 4 x 132 / 5 -> 106 splits, 8 x 132 / 5 -> 212
    assert base.kernels[0].grid[0] == 106 and wide.kernels[0].grid[0] == 212
    assert s.workspace_size(hopper, p, more) == 2 * s.workspace_size(hopper, p, cfg)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_backward_weights_default_on_sm90_stages_tiles_by_tma(dtype: str) -> None:
    # On sm_90 the backward-weights default is a TMA tile (default_tile_tma, fitted on every
    # tile config of three networks' layers): 8-vector blocks but for 16-bit stride-1 layers
    # on planes of 56 and more, strided 16-bit planes of 7 and 7x7 filters; 2 channels a
    # thread on strided planes of 56 and more, 4 for 7x7; where the fitted tile does not fit
    # (fp32 7x7 on planes of 7: 2-vector blocks of 4 channels), the plain rule's TMA twin. On
    # sm_80, the plain rule's tile. Never more lanes than the layer has channels.
    import dataclasses

    def ctx_of(arch: str) -> miocore.ExecutionContext:
        return miocore.ExecutionContext(device=dataclasses.replace(_ctx().device, arch=arch))

    s, hopper, ampere = dw.GpuDepthwiseSolver(), ctx_of("sm_90"), ctx_of("sm_80")
    v = 4 if dtype == "float32" else 8
    sixteen = v == 8
    cases = {  # (filter, stride, input plane): (cb in vectors, tp, tq, pg, wv)
        (3, 1, 112): (4, 4, 16, 4, None) if sixteen else (8, 4, 8, None, None),
        (3, 1, 28): (8, 2, 16, 2, None) if sixteen else (8, 2, 16, None, None),
        (3, 1, 7): (8, 4, 8, 2, None) if sixteen else (8, 4, 8, None, None),
        (5, 1, 7): (4, 4, 8, None, None) if sixteen else (8, 4, 8, None, None),
        (3, 2, 112): (8, 2, 8, None, 2),
        (5, 2, 28): (8, 2, 8, 2, None) if sixteen else (8, 2, 8, None, None),
        (5, 2, 14): (4, 4, 8, 4, None) if sixteen else (8, 2, 8, None, None),
        (7, 1, 28): (4, 4, 8, None, 4),
        (7, 1, 7): (2, 4, 8, None, None) if sixteen else (4, 4, 8, None, None),
    }
    for (f, stride, hw), (cb, tp, tq, pg, wv) in cases.items():
        p = _problem("backward_weights", n=4, c=96, k=96, in_spatial=(hw, hw),
                     filter_spatial=(f, f), pads=(f // 2, f // 2), strides=(stride, stride),
                     groups=96, dtype=dtype, layout="NHWC").canonical  # fmt: skip
        cfg = s.default_perf_config(hopper, p)
        assert cfg in s.perf_config_space(hopper, p), (f, stride, hw, cfg)
        want = (cb * v, tp, tq, pg, wv, 1)
        got = (cfg["cb"], cfg["tp"], cfg["tq"], cfg.get("pg"), cfg.get("wv"), cfg.get("tma"))
        assert got == want, (f, stride, hw)
        plain = s.default_perf_config(ampere, p)
        assert "tma" not in plain and plain == defaults.default_tile(p)
    # 16 channels: a block of 2 vectors (no lanes past the channels), too narrow for groups
    p = _problem("backward_weights", n=4, c=16, k=16, in_spatial=(112, 112), groups=16,
                 dtype=dtype, layout="NHWC").canonical  # fmt: skip
    cfg = s.default_perf_config(hopper, p)
    assert cfg in s.perf_config_space(hopper, p) and cfg["cb"] == 16 and cfg["tma"] == 1
    assert "pg" not in cfg if sixteen else cfg["cb"] // cfg["vec"] == 4


def test_tma_launch_arguments_are_made_once_per_address(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # The TMA tiles' invokers: per tuple of read-tensor addresses, one argument block whose
    # first slots are the tensor maps (encoded once: a network's calls reuse the allocator's
    # addresses), then the pointers and the parameters; at most TMA_MAPS_KEPT kept. The encoder
    # needs the driver library, so a stand-in records what it is asked.
    import numpy as np

    from miocore.backends import cuda_tma

    encoded: list[tuple] = []
    promotions: list[int] = []

    def fake_map(dtype, address, dims, strides, box, steps, swizzle, l2_promotion):  # type: ignore[no-untyped-def]
        encoded.append((address, tuple(dims), tuple(box), swizzle))
        promotions.append(l2_promotion)
        return address.to_bytes(8, "little") * 16  # 128 bytes naming the address

    monkeypatch.setattr(cuda_tma, "tiled_tensor_map", fake_map)
    p = _problem("backward_weights", layout="NHWC", dtype="float16", c=40, k=40, groups=40,
                 in_spatial=(30, 20)).canonical  # fmt: skip
    cfg = miocore.PerfConfig(vec=8, cb=32, tp=4, tq=16, pg=4, tma=1)
    params = bytes(range(24))
    args_for = dw.tma_launch_args(p, geo.wrw_tile_tma_boxes(p, cfg), 4, params)
    first = args_for(0x1000, 0x2000)
    assert args_for(0x1000, 0x2000) is first and len(encoded) == 2  # x's and dy's maps, once
    assert encoded[0] == (0x1000, (40, 20, 30, 2), (32, 18, 6, 1), False)
    assert encoded[1] == (0x2000, (40, 20, 30, 2), (32, 16, 4, 1), False)
    words = first._buffer
    assert int(words[0]) == 0x1000 and int(words[16]) == 0x2000  # the maps, 128 bytes each
    first.set_pointers(11, 12, 13, 14)
    assert [int(v) for v in words[32:36]] == [11, 12, 13, 14]
    assert words[36:39].view(np.uint8).tobytes() == params
    assert args_for(0x3000, 0x2000) is not first and len(encoded) == 4
    for i in range(dw.TMA_MAPS_KEPT):
        args_for(0x10000 + 16 * i, 0x2000)
    assert args_for(0x1000, 0x2000) is not first  # forgotten once the cache filled
    assert set(promotions) == {64}  # 32 of 40 channels: 64-byte rows of 80-byte pixels
    monkeypatch.setattr(geo, "TMA_L2_NARROW", False)
    promotions.clear()
    dw.tma_launch_args(p, geo.wrw_tile_tma_boxes(p, cfg), 4, params)(0x1000, 0x2000)
    assert promotions == [256, 256]  # switched off: 256 bytes


def test_tma_l2_promotion_never_wider_than_a_partial_box_row(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Switched on, a box row holding some of a pixel's channels takes the widest promotion no
    # longer than itself (64 at least); a row of every channel, or one of 256 bytes, keeps 256
    monkeypatch.setattr(geo, "TMA_L2_NARROW", True)
    cases = [((96,), (32,), 2, 64), ((144,), (48,), 2, 64), ((192,), (64,), 2, 128),
             ((96,), (96,), 2, 256), ((512,), (128,), 2, 256), ((96,), (16,), 4, 64),
             ((8,), (4,), 2, 64)]  # fmt: skip
    for dims, box, size, want in cases:
        assert geo.tma_l2_promotion(dims, box, size) == want, (dims, box, size)
    monkeypatch.setattr(geo, "TMA_L2_NARROW", False)
    assert geo.tma_l2_promotion((96,), (32,), 2) == 256

"""``direct.gpu_depthwise``'s kernels built for the host and run on the CPU.

``tests/host_kernels/miocore_gpu.h`` stands in for the portability header. ``run_dw_block.cpp``
runs a launch of one forward or backward-data kernel (``dw_nchw_rows``, ``dw_nchw``,
``dw_nhwc_tile``, ``dw_nhwc``; backward weights: ``test_gpu_depthwise_wrw_host.py``; the
shared pieces: ``gpu_depthwise_host_support.py``), on the options,
geometry and packed parameters the solver gives: each block's threads as std::threads that
meet at a host barrier, the blocks one after another. The result, on random inputs and an
output (and partials) poisoned with NaN, is checked against the float64 reference with each
dtype's tolerance, so the kernels' indexing (runs, rows, tiles, halos, padding, stride,
dilation, channel multiplier, planes per block, short channel blocks, the staged tiles' runs
through both buffers, taps in registers or shared memory, splits and their reduce, the
chunked loads' alignment and the scalar twins) is tested without a GPU. The tiles staged by the
tensor memory accelerator run too: ``miocore_tma.h`` beside the runner copies a box as the
solver's tensor map describes it and counts the mbarriers' phases. Skipped where no C++
compiler with ``_Float16`` is found.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gpu_depthwise_host_support import (
    _check,
    _ctx,
    _plan,
    _problem,
    _space,
    build,
    dw,
    geo,
    tile_module,
)

import miocore

__all__ = ["build"]  # the fixture, used by name


CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 3, 1, (9, 16), (3, 3), (1, 1), (1, 1), (1, 1)),  # whole chunks (16-bit, fp32)
    ("forward", 3, 1, (7, 14), (3, 3), (1, 1), (1, 1), (1, 1)),  # 16-bit: 4-byte chunks
    ("forward", 2, 1, (5, 10), (5, 5), (2, 1), (1, 1), (1, 1)),  # 4-byte, odd padding
    ("forward", 2, 1, (5, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # no whole chunks at all
    ("forward", 2, 2, (8, 24), (5, 5), (2, 3), (2, 2), (1, 1)),  # multiplier, odd padding
    ("forward", 2, 1, (11, 20), (3, 3), (2, 2), (1, 1), (2, 2)),  # dilation
    ("backward_data", 2, 3, (8, 12), (3, 3), (1, 1), (1, 1), (1, 1)),  # several dy planes
    ("backward_data", 2, 1, (12, 16), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7 flipped
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_rows_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nchw_rows: the widest and narrowest runs, one and four rows, on aligned and shifted
    # buffers, in a grid of a third of the solver's blocks (its grid-stride loop)
    plans = []
    for case in CASES:
        problem = _problem(case, dtype, "NCHW")
        space = [g for g in _space(problem) if "ox" in g]
        plans.append((problem, [space[0], space[-1]], (0, 1)))
    assert _check(build, tmp_path, plans, seed=11, fewer_blocks=3) == 4 * len(CASES)


@pytest.mark.parametrize(
    ("dtype", "width", "chunk"),
    [("float16", 16, 4), ("float16", 14, 2), ("bfloat16", 10, 2), ("float16", 7, 4),
     ("float32", 14, 2), ("float32", 7, 2)],
)  # fmt: skip
def test_rows_chunks_are_as_wide_as_the_rows_allow(dtype: str, width: int, chunk: int) -> None:
    problem = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=4, k=4, in_spatial=(6, width), filter_spatial=(3, 3), pads=(1, 1),
        groups=4, dtype=dtype, layout="NCHW",
    ).canonical  # fmt: skip
    assert geo.rows_chunk(problem) == chunk
    (kernel,) = (
        dw.GpuDepthwiseSolver()
        .get_solution(_ctx(), problem, miocore.PerfConfig(ox=4, oy=2))
        .kernels
    )
    assert f"-DMIO_NV={chunk}" in kernel.options and f"-DMIO_PWM={1 % chunk}" in kernel.options


TILE_CASES = [  # direction, c, spatial, filter, pads, strides, dilations
    ("forward", 24, (15, 13), (3, 3), (1, 1), (1, 1), (1, 1)),  # partial tiles, 24 of 32
    ("forward", 40, (17, 19), (3, 3), (1, 0), (2, 2), (1, 1)),  # stride 2, 40: 32 + 8
    ("forward", 16, (12, 20), (3, 3), (0, 2), (1, 1), (1, 1)),  # asymmetric padding
    ("forward", 32, (14, 14), (1, 3), (0, 1), (1, 2), (1, 1)),  # 1x3, stride (1, 2)
    ("forward", 24, (16, 18), (3, 3), (2, 2), (1, 1), (2, 2)),  # dilation 2
    ("backward_data", 40, (11, 9), (3, 3), (1, 2), (1, 1), (1, 1)),  # flipped filter
    ("backward_data", 24, (15, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 40, (17, 18), (3, 3), (1, 0), (2, 2), (2, 1)),  # gather, dilation, pads
    ("backward_data", 32, (12, 14), (1, 3), (0, 2), (1, 2), (1, 1)),  # gather along w only
    ("forward", 24, (15, 13), (5, 5), (2, 2), (1, 1), (1, 1)),  # 5x5: 2 channels a thread
    ("forward", 40, (17, 19), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("backward_data", 24, (13, 15), (5, 5), (2, 2), (1, 1), (1, 1)),  # 5x5 flipped
    ("backward_data", 40, (17, 16), (5, 5), (2, 2), (2, 2), (1, 1)),  # 5x5 gather
    ("forward", 24, (15, 13), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7: 1 channel a thread
    ("backward_data", 40, (17, 16), (7, 7), (3, 2), (2, 2), (1, 1)),  # 7x7 gather
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_tile_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc_tile: the first and last single tiles of each case (tile shapes, 32/64-channel
    # blocks, caps), and the first in runs of 2 and 8 tiles a block (3 images' tiles: the last
    # run short)
    from miocore_direct.gpu_depthwise_nhwc_tile import NHWC_TILE_RUNS, nhwc_tile_configs

    plans, runs = [], 0
    for direction, c, spatial, f, pads, strides, dils in TILE_CASES:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        singles = [c for c in nhwc_tile_configs(problem.canonical) if "nt" not in c]
        picks = [singles[0], singles[-1]]
        for nt in (NHWC_TILE_RUNS[0], NHWC_TILE_RUNS[-1]):
            run = miocore.PerfConfig(**singles[0], nt=nt)
            if dw.GpuDepthwiseSolver().is_valid_perf_config(_ctx(), problem.canonical, run):
                picks.append(run)
                runs += 1
        plans.append((problem, picks, (0,)))
    assert runs >= len(TILE_CASES)
    assert _check(build, tmp_path, plans, seed=13) == 2 * len(TILE_CASES) + runs


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_tile_kernel_through_tma_on_the_host(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc_tile staged by the tensor memory accelerator (MIO_TMA), with the TMA copy and the
    # mbarriers' phases in their host forms (tests/host_kernels/miocore_tma.h) and the map the
    # solver describes: each case's first and last TMA tiles and its first in runs of 2 and 8
    # tiles a block (two buffers, two barriers); one element off alignment, the scalar twin
    plans, runs = [], 0
    for direction, c, spatial, f, pads, strides, dils in TILE_CASES:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        twins = tile_module.nhwc_tile_tma_configs(problem.canonical)
        singles = [t for t in twins if "nt" not in t]
        picks = [singles[0], singles[-1]]
        for nt in (tile_module.NHWC_TILE_RUNS[0], tile_module.NHWC_TILE_RUNS[-1]):
            run = miocore.PerfConfig(**singles[0], nt=nt)
            if tile_module.nhwc_tile_valid(problem.canonical, run):
                picks.append(run)
                runs += 1
        for cfg in picks:  # the staged kernel itself, not the default in its place
            assert "-DMIO_TMA=1" in _plan(problem, cfg)[0][0].options, dict(cfg)
        plans.append((problem, picks, (0,)))
    plans[0] = (plans[0][0], plans[0][1], (0, 1))
    assert runs >= len(TILE_CASES)
    expected = sum(len(picks) * len(shifts) for _, picks, shifts in plans)
    assert _check(build, tmp_path, plans, seed=17) == expected


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))  # fp32's 48-channel tiles: stride 1
def test_nhwc_tile_kernel_in_blocks_of_48_channels_on_the_host(
    build, tmp_path: Path, dtype: str
) -> None:
    # 96 channels in two blocks of 48: 12 channel lanes x 21 pixel lanes, 252 threads (lanes
    # that do not divide 256), single tiles and runs (stride 1: at stride 2 no run's two
    # buffers fit), forward (stride 1 and 2) and backward data
    from miocore_direct.gpu_depthwise_nhwc_tile import nhwc_tile_configs

    plans, count = [], 0
    for direction, strides in (("forward", (1, 1)), ("forward", (2, 2)), ("backward_data", (1, 1))):
        case = (direction, 96, 1, (13, 11), (3, 3), (1, 1), strides, (1, 1))
        problem = _problem(case, dtype, "NHWC", n=3)
        exact = [c for c in nhwc_tile_configs(problem.canonical) if c["ch"] == 48]
        singles = [c for c in exact if "nt" not in c]
        runs = [c for c in exact if "nt" in c]
        assert singles and (runs or strides == (2, 2)), problem.key
        picks = [singles[0], singles[-1], *runs[:1], *runs[-1:]]
        for cfg in picks:
            kernel = dw.GpuDepthwiseSolver().launch_plan(_ctx(), problem.canonical, cfg)[0][0]
            runs = tile_module.nhwc_tile_blocks_x(problem.canonical, cfg)
            assert kernel.block == (12, 21) and kernel.grid == (2 * runs, 1)  # blocks first
        plans.append((problem, picks, (0,)))
        count += len(picks)
    assert _check(build, tmp_path, plans, seed=17) == count == 10


@pytest.mark.parametrize(
    ("dtype", "first"), [("float16", True), ("float32", True), ("float16", False)]
)
def test_nhwc_tile_kernel_launch_orders_on_the_host(
    build, tmp_path: Path, dtype: str, first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NHWC_TILE_CHANNELS_FIRST: one grid dimension, a run of tiles' channel blocks next to each
    # other (MIO_CFAST), or off: runs along x, channel blocks along y; on the 40- and
    # 96-channel cases (2-3 channel blocks), single tiles and runs, staged by hand and by TMA,
    # forward, strided forward and the gather
    monkeypatch.setattr(tile_module, "NHWC_TILE_CHANNELS_FIRST", first)
    plans, count = [], 0
    cases = [case for case in TILE_CASES if case[1] == 40][:3]
    cases.append(("forward", 96, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)))
    for direction, c, spatial, f, pads, strides, dils in cases:
        problem = _problem((direction, c, 1, spatial, f, pads, strides, dils), dtype, "NHWC", n=3)
        canon = problem.canonical
        plain = [t for t in tile_module.nhwc_tile_configs(canon) if t["ch"] < c]
        twins = [t for t in tile_module.nhwc_tile_tma_configs(canon) if t["ch"] < c]
        picks = [plain[0], *[t for t in plain if "nt" in t][:1], twins[0], twins[-1]]
        for cfg in picks:
            kernel = _plan(problem, cfg)[0][0]
            blocks = tile_module.nhwc_tile_grid(canon, cfg)[2]
            runs = tile_module.nhwc_tile_blocks_x(canon, cfg)
            assert blocks > 1 and ("-DMIO_CFAST=1" in kernel.options) == first, dict(cfg)
            assert kernel.grid == ((runs * blocks, 1) if first else (runs, blocks)), dict(cfg)
        plans.append((problem, picks, (0,)))
        count += len(picks)
    assert _check(build, tmp_path, plans, seed=19) == count


NHWC_CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 24, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),  # strips, partial groups
    ("forward", 40, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("forward", 24, 1, (12, 14), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7: taps in shared memory
    ("forward", 8, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2)),  # multiplier, dilation
    ("backward_data", 24, 1, (14, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 40, 1, (11, 9), (3, 3), (1, 2), (1, 1), (1, 1)),  # flipped filter
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nhwc_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nhwc: the default and the space's first and last configs on aligned buffers, the
    # default again on buffers one element past alignment (its scalar twin)
    plans = []
    for case in NHWC_CASES:
        problem = _problem(case, dtype, "NHWC")
        default = dw.GpuDepthwiseSolver().default_perf_config(_ctx(), problem.canonical)
        assert "ct" in default, (problem.key, dict(default))  # dw_nhwc's, not a staged tile
        space = [g for g in _space(problem) if "ct" in g]
        plans.append((problem, list(dict.fromkeys((default, space[0], space[-1]))), (0,)))
        plans.append((problem, [default], (1,)))
    assert _check(build, tmp_path, plans, seed=17) >= 3 * len(NHWC_CASES)


NCHW_CASES = [  # direction, c, mult, spatial, filter, pads, strides, dilations
    ("forward", 3, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1)),  # partial tiles
    ("forward", 2, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1)),  # 5x5 stride 2
    ("forward", 2, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2)),  # multiplier, dilation
    ("forward", 4, 1, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # small planes: several a block
    ("backward_data", 3, 1, (14, 13), (3, 3), (1, 1), (2, 2), (1, 1)),  # the gather
    ("backward_data", 2, 1, (12, 16), (7, 7), (3, 3), (1, 1), (1, 1)),  # 7x7 flipped
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_nchw_kernel_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # dw_nchw: the space's first and last tiles, and its first with several planes a block
    plans, several = [], 0
    for case in NCHW_CASES:
        problem = _problem(case, dtype, "NCHW")
        space = [g for g in _space(problem) if "tw" in g]
        picks = [space[0], space[-1], *[g for g in space if "pp" in g][:1]]
        several += any("pp" in g for g in picks)
        plans.append((problem, list(dict.fromkeys(picks)), (0,)))
    assert several  # the small planes' case has several planes a block
    assert _check(build, tmp_path, plans, seed=19) >= 2 * len(NCHW_CASES)

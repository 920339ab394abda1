"""``direct.gpu_depthwise``'s backward-weights kernels built for the host and run on the CPU.

``run_dw_wrw.cpp`` runs backward weights as the invoker does (``dw_wrw_tile`` or ``dw_wrw`` into
split partials, then ``dw_wrw_reduce``) on the options, geometry and packed parameters the solver
gives, the tiles staged by the tensor memory accelerator too (their host forms: the shared
pieces are in ``gpu_depthwise_host_support.py``). The result, on random inputs and an output and
partials poisoned with NaN, is checked against the float64 reference with each dtype's
tolerance: the staged tiles' items and both buffers, row groups, channels a thread, splits and
their reduce, the scalar twins on misaligned buffers.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from gpu_depthwise_host_support import (
    _block_options,
    _build_all,
    _byte_strides,
    _ctx,
    _memory,
    _plan,
    _problem,
    _space,
    build,
    configs,
    dw,
    geo,
)

import miocore
from miocore import reference

__all__ = ["build"]  # the fixture, used by name


def _run_wrw(
    make, tmp: Path, problem: miocore.ConvProblem, cfg, inputs, shift: int, sms: int = 132
) -> np.ndarray:
    """Backward weights of ``cfg`` on the host as the invoker runs it on a GPU of ``sms``
    compute units: the main kernel (its scalar twin where x and dy start ``shift`` elements
    past alignment), then the reduce over the splits' partials; dw in logical order."""
    p = problem.canonical
    kernels, params, split = _plan(problem, cfg, sms)
    main = _wrw_main(kernels, cfg, shift)
    reduce = kernels[-1] if split > 1 else None
    (tmp / "params").write_bytes(params)
    (tmp / "x").write_bytes(_memory(p.x, inputs["x"]).tobytes())
    (tmp / "dy").write_bytes(_memory(p.y, inputs["y"]).tobytes())
    w_bytes = p.w.element_space * p.w.dtype.itemsize
    rgrid, rblock = (reduce.grid[0], (*reduce.block, 1)[:2]) if reduce else (1, (1, 1))
    grid, block = (*main.grid, 1)[:2], (*main.block, 1)[:2]
    args = [tmp / "params", tmp / "x", tmp / "dy", w_bytes, tmp / "w", *grid, *block, shift,
            split, rgrid, *rblock]  # fmt: skip
    if "-DMIO_TMA=1" in main.options:  # the maps of x and dy, as the invoker encodes them
        maps = zip(("x_map", "dy_map"), geo.wrw_tile_tma_boxes(p, cfg), strict=True)
        for name, (dims, strides, box) in maps:
            (tmp / name).write_bytes(np.array([*dims, *strides, *box], dtype=np.int64).tobytes())
            args.append(tmp / name)
    exe = make(_block_options(main), "run_dw_wrw.cpp")
    subprocess.run([str(exe), *map(str, args)], check=True)
    memory = np.frombuffer((tmp / "w").read_bytes(), dtype=p.w.dtype.numpy)
    return np.lib.stride_tricks.as_strided(memory, p.w.lengths, _byte_strides(p.w)).copy()


WRW_CASES = [  # c, mult, spatial, filter, pads, strides, dilations, layout
    (24, 1, (13, 11), (3, 3), (1, 1), (1, 1), (1, 1), "NHWC"),  # staged tiles, row groups
    (40, 1, (17, 15), (5, 5), (2, 1), (2, 2), (1, 1), "NHWC"),  # 5x5 stride 2
    (16, 1, (12, 14), (7, 7), (3, 3), (1, 1), (1, 1), "NHWC"),  # 7x7
    (8, 2, (9, 10), (3, 3), (1, 1), (1, 1), (2, 2), "NHWC"),  # multiplier: dw_wrw
    (3, 1, (10, 9), (3, 3), (1, 1), (2, 1), (1, 1), "NCHW"),  # channels outer: dw_wrw
]


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_backward_weights_on_the_host_matches_reference(build, tmp_path: Path, dtype: str) -> None:
    # the default and the space's last config (a staged tile where they apply, dw_wrw's strips
    # elsewhere), split over partials as on a 132-SM GPU, on aligned buffers; the default again
    # on x and dy one element past alignment (the scalar twin)
    rng = np.random.default_rng(23)
    solver = dw.GpuDepthwiseSolver()
    tol = reference.tolerance(dtype)
    plans = []
    for c, mult, spatial, f, pads, strides, dils, layout in WRW_CASES:
        case = ("backward_weights", c, mult, spatial, f, pads, strides, dils)
        problem = _problem(case, dtype, layout)
        default = solver.default_perf_config(_ctx(), problem.canonical)
        picks = list(dict.fromkeys((default, _space(problem)[-1])))
        plans.append((problem, [(cfg, 0) for cfg in picks] + [(default, 1)]))
    done = _check_wrw(build, tmp_path, plans, rng, tol)
    tiles = sum(geo.is_tile(cfg) for _, cfg, _ in done)
    splits = sum(_plan(problem, cfg)[2] > 1 for problem, cfg, _ in done)
    assert len(done) >= 2 * len(WRW_CASES) and tiles and splits


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_backward_weights_tiles_through_tma_on_the_host(build, tmp_path: Path, dtype: str) -> None:
    # dw_wrw_tile staged by the tensor memory accelerator (MIO_TMA: x's and dy's tiles as they
    # lie in memory, two items in flight), with the TMA copy and the mbarriers' phases in
    # their host forms: the TMA twins of the default (3x3: row groups; also with 2 channels
    # a thread) and of the space's first and last tiles (the last: 4 channels a thread), split
    # over partials as on a one-SM GPU (4 splits: 3 or 4 items a block on the 3x3 case, both
    # buffers twice, both phases); the default one element off alignment (the twin, no map)
    rng = np.random.default_rng(31)
    tol = reference.tolerance(dtype)
    solver = dw.GpuDepthwiseSolver()
    plans = []
    for c, mult, spatial, f, pads, strides, dils, layout in WRW_CASES:
        problem = _problem(("backward_weights", c, mult, spatial, f, pads, strides, dils),
                           dtype, layout)  # fmt: skip
        twins = configs.wrw_tile_tma_configs(problem.canonical)
        if not twins:
            continue
        default = miocore.PerfConfig(
            **solver.default_perf_config(_ctx(), problem.canonical), tma=1
        )  # its two fp32 buffers exceed the static shared memory at 5x5 stride 2
        picks = [default, twins[0], twins[-1]] if default in twins else [twins[0], twins[-1]]
        pair = miocore.PerfConfig(**default, wv=2)  # row groups on 3x3, 2 channels a thread
        picks = list(dict.fromkeys([*picks, *([pair] if pair in twins else [])]))
        plans.append((problem, [(cfg, 0) for cfg in picks] + [(picks[0], 1)]))
    done = _check_wrw(build, tmp_path, plans, rng, tol, sms=1)
    checked, staged, items = len(done), 0, 0
    for problem, cfg, shift in done:
        kernels, _, split = _plan(problem, cfg, 1)
        staged += "-DMIO_TMA=1" in _wrw_main(kernels, cfg, shift).options
        items = max(items, -(-geo.wrw_tile_items(problem.canonical, cfg) // split))
    assert len(plans) == 3 and staged == checked - len(plans) and items >= 3
    wide = {cfg.get("wv", 1) for _, runs in plans for cfg, _ in runs}
    assert wide == {1, 2, 4}


def _check_wrw(make, tmp: Path, plans, rng, tol: float, sms: int = 132) -> list[tuple]:
    """Runs every (problem, [(config, shift), ...]) of ``plans`` on the host as the invoker
    would on a GPU of ``sms`` compute units (the runners built first, side by side) against
    the float64 reference on random inputs; the (problem, config, shift) runs checked."""
    options = {
        _block_options(_wrw_main(_plan(problem, cfg, sms)[0], cfg, shift))
        for problem, runs in plans
        for cfg, shift in runs
    }
    _build_all(make, options, "run_dw_wrw.cpp")
    done = []
    for problem, runs in plans:
        canon = problem.canonical
        inputs = reference.random_inputs(canon, rng)
        expected = reference.convolution(canon, x=inputs["x"], y=inputs["y"])
        for cfg, shift in runs:
            got = _run_wrw(make, tmp, problem, cfg, inputs, shift, sms)
            err = reference.relative_error(got, expected)
            assert np.isfinite(err) and err <= tol, (problem.key, dict(cfg), shift, err)
            done.append((problem, cfg, shift))
    return done


def _wrw_main(kernels: tuple, cfg, shift: int):
    """The main kernel the invoker picks: its scalar twin on misaligned x and dy."""
    mains = kernels[:2] if cfg.get("vec", 1) > 1 else kernels[:1]
    return mains[-1] if shift else mains[0]

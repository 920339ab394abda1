"""``igemm.gpu_wgmma_wrw`` (backward weights on Hopper's warpgroup tensor cores, TMA-fed,
fp16/bf16) against the float64 reference, on an sm_90 device (marked ``gpu``; skipped
elsewhere).

Corpus-derived problems: one-group 2-D rows of the corpus (filters, pads, strides, dilations
kept) as backward weights in NHWC, shrunk to 8 to 136 channels so that channel tails inside a
64-channel box, one and several tiles all run; the filter is poisoned with NaN first;
tolerance ``miocore.testing.TOLERANCES``. Then every configuration of the search space (tiles,
pixel boxes, split-K parts, tiles over several taps, stream-K shares) on shapes chosen for
their edges, and a filter in another layout than the activations (the reduce kernel's strided
stores).
"""

from __future__ import annotations

import os

import pytest
from gpu_igemm_fixtures import (
    assert_all_match,
    corpus_problems,
    run_configs,
    shape_problem,
    sm90_handle,
    spread_configs,
)

import miocore

pytestmark = pytest.mark.gpu

SOLVER = "igemm.gpu_wgmma_wrw"
PER_DTYPE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200")) // 2


def _handle() -> miocore.Handle:
    return sm90_handle(SOLVER)


@pytest.mark.parametrize("dtype", ("FP16", "BF16"))
def test_wgmma_wrw_matches_reference_on_corpus(dtype: str) -> None:
    h = _handle()
    problems = corpus_problems(h, SOLVER, dtype, "backward_weights", PER_DTYPE, seed=17)
    assert problems
    assert_all_match(h, SOLVER, problems, tf32=False)
    assert len(problems) >= min(50, PER_DTYPE)


@pytest.mark.parametrize("dtype", ("FP16", "BF16"))
def test_wgmma_wrw_channels_first_through_packed_copies(dtype: str) -> None:
    """NCHW x and dy copied to channels-last in the workspace first (the filter written
    through its strides): corpus-derived problems and the default configuration."""
    h = _handle()
    problems = corpus_problems(
        h, SOLVER, dtype, "backward_weights", PER_DTYPE // 4, seed=31, layout="NCHW"
    )
    assert problems
    assert_all_match(h, SOLVER, problems, tf32=False)


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations
    (2, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1)),
    (3, 72, 40, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2)),
    (2, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1)),
    (5, 136, 72, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1)),  # c and k tails; boxes span images
    (2, 8, 8, (3, 3), (3, 3), (1, 1), (1, 1), (1, 1)),  # one box, mostly empty
    (2, 64, 72, (10, 12), (3, 3), (3, 0), (1, 1), (1, 1)),  # pads past the taps
    (16, 256, 64, (40, 40), (3, 3), (1, 1), (2, 2), (1, 1)),  # strided, many boxes: split-K
)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_wgmma_wrw_every_config(dtype: str, shape: int) -> None:
    _check_configs(dtype, _SHAPES[shape], shape == len(_SHAPES) - 1, spread=False)


def _check_configs(dtype: str, row: tuple, split_k: bool, spread: bool) -> None:
    """The configurations of an edge-shape row's space (``spread``: a spread of them, for 3-D)
    against the float64 reference; ``split_k``: they hold three split-K part counts or more."""
    h = _handle()
    problem = shape_problem("backward_weights", row, dtype)
    solver = h.registry.get(SOLVER).solver
    applies = solver.is_applicable(h.context, problem.canonical)
    assert applies, applies.reason
    configs = list(solver.perf_config_space(h.context, problem.canonical))
    assert configs and all(("td" in c) == (len(row[3]) == 3) for c in configs)
    if spread:
        configs = spread_configs(configs, solver.default_perf_config(h.context, problem.canonical))
    if split_k:
        assert len({c["split"] for c in configs}) >= 3
    run_configs(h, SOLVER, problem, configs, (), False, lambda _p, _c: 0)


_SHAPES_3D = (
    # n, c, k, dhw, filter, pads, strides, dilations
    (2, 64, 96, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    (2, 72, 40, (6, 9, 7), (3, 1, 3), (0, 0, 1), (2, 1, 2), (2, 1, 1)),  # strides, dilation
    (1, 136, 72, (4, 4, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # c, k tails
    (4, 64, 64, (8, 16, 16), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # 64 x 64, split-K
)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("shape", range(len(_SHAPES_3D)))
def test_wgmma_wrw_3d_every_config(dtype: str, shape: int) -> None:
    """3-D problems (``MIO_3D``: a depth in the 64-pixel boxes, 5-D maps, taps over depth),
    a spread of the configurations, channels-last and (the default configuration) NCDHW."""
    _check_configs(dtype, _SHAPES_3D[shape], shape == len(_SHAPES_3D) - 1, spread=True)
    h = _handle()
    n, c, k, dhw, f, pads, strides, dils = _SHAPES_3D[shape]
    ncdhw = miocore.ConvProblem.from_sizes(
        "backward_weights", n=n, c=c, k=k, in_spatial=dhw, filter_spatial=f, pads=pads,
        strides=strides, dilations=dils, dtype=dtype, layout="NCDHW",
    )  # fmt: skip
    assert_all_match(h, SOLVER, [ncdhw])


_SPAN_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations
    (3, 40, 72, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2)),  # 15 taps, 40 of a box's 64, k tail
    (16, 64, 64, (40, 40), (3, 3), (1, 1), (2, 2), (1, 1)),  # many boxes: split-K
    (2, 64, 96, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # 27 taps, 3-D
)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
@pytest.mark.parametrize("shape", range(len(_SPAN_SHAPES)))
def test_wgmma_wrw_tiles_over_several_taps(dtype: str, shape: int) -> None:
    """Tiles whose columns span 2, 3 or 4 taps (``span``; the last group short of taps loads its
    first tap again and stores nothing of it): every tile and split once at the best box,
    and each other box once."""
    h = _handle()
    problem = shape_problem("backward_weights", _SPAN_SHAPES[shape], dtype)
    solver = h.registry.get(SOLVER).solver
    spans = [c for c in solver.perf_config_space(h.context, problem.canonical) if "span" in c]
    assert {c["span"] for c in spans} == {2, 3, 4}
    picks, seen = [], set()
    for c in spans:
        for key in ((c["bm"], c["span"], c["split"]), (c["tw"], c["th"], c.get("td", 1))):
            if key not in seen:
                seen.add(key)
                picks.append(c)
    if shape == 1:
        assert len({c["split"] for c in picks}) >= 3
    run_configs(h, SOLVER, problem, picks, (), False, lambda _p, _c: 0)


@pytest.mark.parametrize("filter_strides", ("NCHW", (72 * 9 + 1, 1, 3 * 72, 72)))
def test_wgmma_wrw_filter_in_another_layout(filter_strides: object) -> None:
    """Channels-last activations, the filter channels-first or with an odd k stride: every
    split through the reduce kernel's element-wise stores."""
    h = _handle()
    base = miocore.ConvProblem.from_sizes(
        "backward_weights", n=8, c=72, k=136, in_spatial=(20, 18), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16", layout="NHWC",
    )  # fmt: skip
    if isinstance(filter_strides, str):
        w = miocore.TensorDescriptor("float16", base.w.lengths, layout=filter_strides)
    else:
        w = miocore.TensorDescriptor("float16", base.w.lengths, strides=filter_strides)
    problem = miocore.ConvProblem(base.direction, x=base.x, w=w, y=base.y, conv=base.conv)
    solver = h.registry.get(SOLVER).solver
    assert solver.is_applicable(h.context, problem.canonical)
    configs = [c for c in solver.perf_config_space(h.context, problem.canonical) if c["bn"] == 64]
    assert {c["split"] for c in configs} >= {1, 2}
    assert all(solver.workspace_size(h.context, problem.canonical, c) > 0 for c in configs)
    run_configs(h, SOLVER, problem, configs, (), False, lambda _p, _c: 0)


def test_normal_find_measures_it() -> None:
    h = _handle()
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights", n=8, c=128, k=128, in_spatial=(28, 28), filter_spatial=(3, 3),
        pads=(1, 1), dtype="float16", layout="NHWC",
    )  # fmt: skip
    found = {s.solver: s for s in h.find_solutions(problem, find_mode="NORMAL")}
    assert SOLVER in found and found[SOLVER].time_ms > 0

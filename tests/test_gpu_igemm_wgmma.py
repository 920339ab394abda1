"""``igemm.gpu_wgmma`` (forward and stride-1 backward data on Hopper's warpgroup tensor cores,
TMA-fed) and ``igemm.gpu_wgmma_tf32`` (the same on fp32 tensors through TF32, in the ``tf32``
math mode, against the TF32 bound) against the float64 reference, on an sm_90 device (marked
``gpu``; skipped elsewhere).

Corpus-derived problems: one-group 2-D rows of the corpus (filters, pads, strides, dilations
kept) as forward and backward data, fp16 and bf16, in NHWC, shrunk to 8 to 136 channels so
that single slices, channel tails inside a 64-channel slice and several slices all run; the
written tensor is poisoned with NaN first; tolerance ``miocore.testing.TOLERANCES``. Then
every configuration of the search space (tiles, depths, pixel boxes, persistence, clusters) on
shapes chosen for their edges: boxes spanning images, K not a multiple of the tile, strides
and dilations, a 1x1 filter, pads past the taps (backward data's padding goes negative), a
small layer with a long reduction (split-K). 3-D problems the same way: every configuration
on edge shapes, and NCDHW tensors through the folded copies.
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

operands = pytest.importorskip("miocore_igemm.gpu_wgmma_operands")

SOLVER = "igemm.gpu_wgmma"
TF32 = "igemm.gpu_wgmma_tf32"
PER_DTYPE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200")) // 2


def _solver(dtype: str) -> str:
    return TF32 if dtype.lower() in ("tf32", "float32") else SOLVER


def _handle(solver: str = SOLVER) -> miocore.Handle:
    return sm90_handle(solver, TF32)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("FP16", "BF16", "TF32"))
def test_wgmma_matches_reference_on_corpus(dtype: str, direction: str) -> None:
    name = _solver(dtype)
    h = _handle(name)
    stored = "FP32" if dtype == "TF32" else dtype
    problems = corpus_problems(h, name, stored, direction, PER_DTYPE, seed=13)
    assert problems
    assert_all_match(h, name, problems, tf32=name == TF32, truncated=name == TF32)
    assert len(problems) >= min(30 if direction == "backward_data" else 50, PER_DTYPE)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("FP16", "BF16", "TF32"))
def test_wgmma_channels_first_through_packed_copies(dtype: str, direction: str) -> None:
    """NCHW tensors (PyTorch's default) copied to channels-last in the workspace and the
    result copied back: corpus-derived problems and the default configuration."""
    name = _solver(dtype)
    h = _handle(name)
    stored = "FP32" if dtype == "TF32" else dtype
    problems = corpus_problems(h, name, stored, direction, PER_DTYPE // 4, seed=29, layout="NCHW")
    assert problems and all(operands.staged(p.canonical) for p in problems)
    assert_all_match(h, name, problems, tf32=name == TF32, truncated=name == TF32)


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations
    (2, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1)),
    (3, 72, 40, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2)),
    (2, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1)),
    (5, 64, 130, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1)),  # K tails; boxes span images
    (2, 136, 64, (9, 9), (1, 1), (0, 0), (2, 2), (1, 1)),  # strided 1x1, a channel tail
    (1, 8, 8, (3, 3), (3, 3), (1, 1), (1, 1), (1, 1)),  # one box, mostly empty rows
    (2, 64, 72, (10, 12), (3, 3), (3, 0), (1, 1), (1, 1)),  # pads past the taps: negative
    (2, 192, 136, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1)),  # few tiles, 27 slices: split-K
)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_wgmma_every_config(dtype: str, shape: int, direction: str) -> None:
    _check_configs(dtype, _SHAPES[shape], direction, shape == len(_SHAPES) - 1, spread=False)


def _check_configs(dtype: str, row: tuple, direction: str, split_k: bool, spread: bool) -> None:
    """The configurations of an edge-shape row's space (``spread``: a spread of at most 48,
    for 3-D spaces of hundreds) against the float64 reference; ``split_k``: the row's space
    must hold split-K. Strided backward data is not this solver's: the row runs at stride 1."""
    name = _solver(dtype)
    h = _handle(name)
    problem = shape_problem(direction, row, dtype, unit_strides=direction == "backward_data")
    solver = h.registry.get(name).solver
    applies = solver.is_applicable(h.context, problem.canonical)
    if direction == "backward_data" and not applies:
        pytest.skip(f"not this solver's: {applies.reason}")  # dy's channels not a multiple of 8
    assert applies, applies.reason
    configs = list(solver.perf_config_space(h.context, problem.canonical))
    assert configs and all(("td" in c) == (len(row[3]) == 3) for c in configs)
    if spread:
        configs = spread_configs(configs, solver.default_perf_config(h.context, problem.canonical))
    if split_k:
        assert {c["split"] for c in configs} >= {1, 2}
    run_configs(
        h, name, problem, configs, (), name == TF32, lambda _p, _c: 0, truncated=name == TF32
    )


_SHAPES_3D = (
    # n, c, k, dhw, filter, pads, strides, dilations
    (2, 64, 96, (5, 6, 7), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),
    (2, 72, 40, (6, 9, 7), (3, 1, 3), (0, 0, 1), (2, 1, 2), (2, 1, 1)),  # strides, dilation
    (1, 64, 130, (4, 4, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # K tail, deep boxes
    (3, 128, 64, (4, 5, 3), (1, 1, 1), (0, 0, 0), (1, 1, 1), (1, 1, 1)),  # 1x1x1
    (2, 256, 136, (4, 4, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1)),  # split-K
)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES_3D)))
def test_wgmma_3d_every_config(dtype: str, shape: int, direction: str) -> None:
    """3-D problems (``MIO_3D``: a depth in the pixel box, the tensor map and the taps), a
    spread of the space's configurations against the float64 reference."""
    last = shape == len(_SHAPES_3D) - 1
    _check_configs(dtype, _SHAPES_3D[shape], direction, last, spread=True)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "float32"))
def test_wgmma_3d_channels_first_through_folded_copies(dtype: str, direction: str) -> None:
    """NCDHW tensors copied to channels-last with depth and rows folded, the default
    configuration, the 3-D U-Net's 3x3x3 shape at small sizes."""
    name = _solver(dtype)
    h = _handle(name)

    def layer(n: int, c: int, k: int, dhw: tuple[int, int, int]) -> miocore.ConvProblem:
        return miocore.ConvProblem.from_sizes(
            direction, n=n, c=c, k=k, in_spatial=dhw, filter_spatial=(3, 3, 3),
            pads=(1, 1, 1), dtype=dtype, layout="NCDHW",
        )  # fmt: skip

    problems = [layer(2, 64, 64, (8, 8, 8)), layer(1, 128, 64, (6, 10, 12))]
    assert all(operands.staged(p.canonical) for p in problems)
    assert_all_match(h, name, problems, tf32=name == TF32, truncated=name == TF32)


def test_normal_find_measures_it() -> None:
    h = _handle()
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=8,
        c=128,
        k=128,
        in_spatial=(28, 28),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NHWC",
    )
    found = {s.solver: s for s in h.find_solutions(problem, find_mode="NORMAL")}
    assert SOLVER in found and found[SOLVER].time_ms > 0

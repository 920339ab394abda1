"""Every consistent corpus problem, in every direction: im2col applies, 1x1 applies exactly to
the pointwise ones, and the workspace is bounded by the tiling rather than by the batch.
"""

from __future__ import annotations

import math

import pytest
from miocore_gemm import Gemm1x1Solver, GemmIm2colSolver
from miocore_gemm._plan import DEFAULT_TILE_BYTES

from miocore import ConvProblem, Direction
from miocore.corpus import find_corpus, iter_consistent_problems
from miocore.testing import cpu_context

F32 = 4


def _bound(p: ConvProblem) -> int:
    """Independent worst case: one tile's buffers (or one output line when a line alone
    exceeds the tile budget), two weight-sized float32 buffers, one float32 image of dx."""
    taps = math.prod(p.filter_spatial)
    line = F32 * p.out_spatial[-1] * (p.c * taps + p.k)
    weights = F32 * p.k * (p.c // p.groups) * taps
    image = F32 * p.c * math.prod(p.in_spatial)
    return max(DEFAULT_TILE_BYTES, line) + 2 * weights + image


def _layer(row: dict) -> tuple:
    """A row's layer, whatever its direction."""
    return tuple(
        tuple(v) if isinstance(v, list) else v
        for key, v in sorted(row.items())
        if key not in ("dir", "miopen_key", "miopen_best", "consistent")
    )


def _check(ctx, im2col: GemmIm2colSolver, one: Gemm1x1Solver, p: ConvProblem) -> None:
    answer = im2col.is_applicable(ctx, p)
    assert answer, f"{p.key}: {answer.reason}"
    size = im2col.workspace_size(ctx, p)
    assert 0 < size <= _bound(p), (p.key, size)
    pointwise = all(f == 1 for f in p.filter_spatial) and not any(p.conv.pads)
    assert bool(one.is_applicable(ctx, p)) == pointwise, p.key
    if pointwise:
        assert 0 <= one.workspace_size(ctx, p) <= size, p.key


@pytest.mark.skipif(
    find_corpus() is None,
    reason="the problem corpus (shared/corpus/miopen_problems.jsonl.gz) is not beside the repo",
)
def test_every_consistent_corpus_problem_is_covered() -> None:
    """Each layer in each of the three directions. The corpus already holds most layers in
    all three; only the missing (layer, direction) pairs are built here, to keep this fast."""
    ctx = cpu_context()
    im2col, one = GemmIm2colSolver(), Gemm1x1Solver()
    seen: dict[tuple, tuple[set[Direction], ConvProblem]] = {}
    count = 0
    for row, problem in iter_consistent_problems():
        _check(ctx, im2col, one, problem)
        count += 1
        directions, _ = seen.setdefault(_layer(row), (set(), problem))
        directions.add(problem.direction)
    for directions, problem in seen.values():
        for direction in set(Direction) - directions:
            p = ConvProblem(direction, x=problem.x, w=problem.w, y=problem.y, conv=problem.conv)
            _check(ctx, im2col, one, p)
            count += 1
    assert count == 3 * len(seen) and len(seen) > 70_000

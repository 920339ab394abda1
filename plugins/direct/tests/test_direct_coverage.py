"""direct.naive applies to every consistent corpus problem, in every direction, with bounded
scratch and no workspace; direct.taps says why when it does not apply."""

from __future__ import annotations

import math

import pytest
from miocore_direct import NaiveDirectSolver, TapsDirectSolver
from miocore_direct.naive import BLOCK_ELEMENTS, _Blocks

from miocore import ConvProblem
from miocore.corpus import find_corpus, iter_consistent_problems
from miocore.testing import cpu_context

pytestmark = pytest.mark.skipif(
    find_corpus() is None, reason="the problem corpus (shared/corpus/) is not available"
)


def _in_direction(p: ConvProblem, direction: str) -> ConvProblem:
    if p.direction.value == direction:
        return p
    return ConvProblem(direction, x=p.x, w=p.w, y=p.y, conv=p.conv)


def test_naive_covers_every_consistent_row_in_every_direction() -> None:
    naive, taps, ctx = NaiveDirectSolver(), TapsDirectSolver(), cpu_context()
    rows, seen = 0, set()
    for _row, problem in iter_consistent_problems():
        rows += 1
        shape = (problem.x, problem.w, problem.y, problem.conv)
        if shape in seen:  # the same layer in another direction: already checked in all three
            continue
        seen.add(shape)
        for direction in ("forward", "backward_data", "backward_weights"):
            p = (
                problem
                if problem.direction.value == direction
                else _in_direction(problem, direction)
            )
            answer = naive.is_applicable(ctx, p)
            assert answer, f"{p.key}: {answer.reason}"
            blocks = _Blocks(p)
            # Every transient block is bounded, whatever the problem size.
            assert blocks.largest <= max(BLOCK_ELEMENTS, max(p.c, p.k) // p.groups), p.key
        assert naive.workspace_size(ctx, problem) == 0
        small = max(problem.filter_spatial) <= 7 and math.prod(problem.filter_spatial) <= 81
        assert bool(taps.is_applicable(ctx, problem)) == small
    assert rows > 200_000

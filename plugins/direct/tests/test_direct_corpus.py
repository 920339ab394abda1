"""Both direct solvers against the float64 reference on corpus-derived problems.

Tolerances (relative error = max abs error / max abs reference) are miocore.testing.TOLERANCES:
float32 2e-5, float16 2e-3, bfloat16 1.6e-2. Both solvers accumulate in float32 and round once.
"""

from __future__ import annotations

import collections

import pytest
from miocore_direct import NaiveDirectSolver, TapsDirectSolver, naive

from miocore.corpus import find_corpus, row_stratum, sample_rows, shrink_row
from miocore.testing import TOLERANCES, check_solver, cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")
SAMPLE = 300

pytestmark = pytest.mark.skipif(
    find_corpus() is None, reason="the problem corpus (shared/corpus/) is not available"
)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return sample_rows(SAMPLE, seed=7)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_taps_matches_reference_on_corpus(rows: list[dict], direction: str) -> None:
    solver, ctx = TapsDirectSolver(), cpu_context()
    checked = 0
    for i, row in enumerate(rows):
        problem = shrink_row(row, direction=direction)
        answer = solver.is_applicable(ctx, problem)
        if not answer:
            assert answer.reason.startswith("filter "), answer.reason
            continue
        check_solver(solver, problem, seed=i, tolerance=TOLERANCES[problem.dtype])
        checked += 1
    assert checked >= SAMPLE * 0.9  # only big filters are out


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_naive_matches_reference_on_every_stratum(rows: list[dict], direction: str) -> None:
    """The naive solver on one row of every stratum of the sample, plus every third row."""
    solver = NaiveDirectSolver()
    picked: dict[tuple, dict] = {}
    for row in rows:
        picked.setdefault(row_stratum(row)[1:], row)
    chosen = list(picked.values()) + rows[::3]
    for i, row in enumerate(chosen):
        check_solver(solver, shrink_row(row, direction=direction), seed=i)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_naive_blocking_matches_reference(
    rows: list[dict], direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a tiny block bound the naive solver splits groups, images and every spatial axis."""
    monkeypatch.setattr(naive, "BLOCK_ELEMENTS", 64)
    solver = NaiveDirectSolver()
    axes = collections.Counter()
    for i, row in enumerate(rows[::12]):
        problem = shrink_row(row, direction=direction)
        axes[naive._Blocks(problem).axis] += 1
        check_solver(solver, problem, seed=i)
    assert len(axes) >= 2  # blocks cut along more than one spatial axis


@pytest.mark.parametrize("block", [0, 512, 2048])
def test_taps_perf_configs_agree(rows: list[dict], block: int) -> None:
    """Every row-block size gives the reference answer (the blocks split the tap loops)."""
    from miocore import PerfConfig

    solver, ctx = TapsDirectSolver(), cpu_context()
    for i, row in enumerate(rows[::10]):
        for direction in DIRECTIONS:
            problem = shrink_row(row, direction=direction, max_spatial=40)
            if solver.is_applicable(ctx, problem):
                check_solver(solver, problem, seed=i, perf_config=PerfConfig(block=block))

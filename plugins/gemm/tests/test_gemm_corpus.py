"""Both GEMM solvers, every direction, on small problems cut from real corpus rows.

Tolerances (max abs error / max abs reference, against the float64 reference): the GEMMs
accumulate in float32 and round once to the output type, so float32 is held to 2e-5, float16
to 2e-3 (about 4 units of its 2^-11 rounding) and bfloat16 to 1.6e-2 (4 units of 2^-8).
"""

from __future__ import annotations

import math

import pytest
from miocore_gemm import SOLVERS, Gemm1x1Solver, GemmIm2colSolver

from miocore import DataType, PerfConfig
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import check_solver, cpu_context

TOLERANCE = {DataType.FLOAT32: 2e-5, DataType.FLOAT16: 2e-3, DataType.BFLOAT16: 1.6e-2}
DIRECTIONS = ("forward", "backward_data", "backward_weights")

pytestmark = pytest.mark.skipif(
    find_corpus() is None,
    reason="the problem corpus (shared/corpus/miopen_problems.jsonl.gz) is not beside the repo",
)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """100 rows per recorded direction, stratified over layout, dtype, rank, groups, stride."""
    return sample_rows(100, seed=0)


def test_sample_covers_every_kind(rows: list[dict]) -> None:
    kinds = {(r["layout"], r["dtype"], len(r["x"])) for r in rows}
    # The corpus has no NDHWC rows; the property test covers that layout.
    assert {k[0] for k in kinds} == {"NCHW", "NHWC", "NCDHW"}
    assert {k[1] for k in kinds} == {"FP32", "FP16", "BF16"}
    assert any(r["groups"] > 1 and r["groups"] == r["c"] == r["k"] for r in rows)
    assert any(max(r["dil"]) > 1 for r in rows) and any(max(r["stride"]) > 1 for r in rows)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_solver_matches_reference_on_corpus_rows(rows, solver, direction) -> None:
    ctx = cpu_context()
    ran = 0
    for row in rows:
        problem = shrink_row(row, direction=direction)
        if not solver.is_applicable(ctx, problem):
            continue
        check_solver(solver, problem, seed=ran, tolerance=TOLERANCE[problem.dtype])
        ran += 1
    assert ran >= (300 if isinstance(solver, GemmIm2colSolver) else 50)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_small_tiles_match_reference(rows, direction) -> None:
    """Tiles of one, two and three output lines: sub-image tiling, row and slice splits,
    several backward-weights partial sums and float32 dx staging across tiles."""
    ctx = cpu_context()
    for i, row in enumerate(rows[::6]):
        problem = shrink_row(row, direction=direction)
        lines = 1 + i % 3
        for solver in SOLVERS:
            if solver.is_applicable(ctx, problem):
                config = PerfConfig({"tile_lines": lines})
                total_lines = problem.n * math.prod(problem.out_spatial[:-1])
                assert (solver.plan(problem, config).num_tiles > 1) == (total_lines > lines)
                check_solver(
                    solver, problem, seed=i, perf_config=config, tolerance=TOLERANCE[problem.dtype]
                )


def test_pointwise_rows_take_the_1x1_solver(rows) -> None:
    ctx = cpu_context()
    pointwise = [r for r in rows if set(r["filt"]) == {1} and not any(r["pad"])]
    assert pointwise
    for row in pointwise:
        assert Gemm1x1Solver().is_applicable(ctx, shrink_row(row))

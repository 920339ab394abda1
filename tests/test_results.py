"""Ranking with ties: within noise is a tie broken by a stable rule; beyond it, time wins."""

from __future__ import annotations

from fake_solvers import small_problem

from miocore import Algorithm
from miocore.solver.results import Solution, Timing, order_with_ties


def _solution(name: str, median: float, spread: float, workspace: int = 0) -> Solution:
    timing = Timing(median_ms=median, spread_ms=spread, min_ms=median, max_ms=median, count=9)
    return Solution(
        problem=small_problem(),
        solver=name,
        solver_id=1,
        algorithm=Algorithm.GEMM,
        time_ms=median,
        workspace_size=workspace,
        source="measured",
        is_estimate=False,
        timing=timing,
    )


def test_within_noise_is_a_tie_broken_by_workspace_then_name() -> None:
    a = _solution("b.second", 1.00, 0.05, workspace=64)
    b = _solution("a.first", 1.02, 0.05, workspace=64)
    c = _solution("c.small", 1.01, 0.05, workspace=0)
    assert [s.solver for s in order_with_ties([a, b, c])] == ["c.small", "a.first", "b.second"]
    assert [s.solver for s in order_with_ties([c, b, a])] == ["c.small", "a.first", "b.second"]


def test_one_noisy_measurement_does_not_hide_a_real_difference() -> None:
    fast_noisy = _solution("z.fast", 4.39, 0.99, workspace=100)
    slow_precise = _solution("a.slow", 5.05, 0.58, workspace=0)
    assert [s.solver for s in order_with_ties([slow_precise, fast_noisy])] == ["z.fast", "a.slow"]


def test_order_is_by_time_beyond_noise() -> None:
    items = [_solution(f"s.{i}", t, 0.01) for i, t in enumerate([3.0, 1.0, 2.0])]
    assert [s.time_ms for s in order_with_ties(items)] == [1.0, 2.0, 3.0]

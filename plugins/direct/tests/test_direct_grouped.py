"""direct.grouped: the contract suite, the corpus's grouped rows and property tests.

Tolerances are miocore.testing.TOLERANCES (float32 2e-5, float16 2e-3, bfloat16 1.6e-2).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_direct import GroupedDirectSolver

from miocore import ConvProblem, InvalidArgumentError
from miocore.corpus import find_corpus, load_rows, shrink_row
from miocore.testing import TOLERANCES, SolverContract, check_solver, cpu_context

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def _grouped(direction: str, layout: str, dtype: str, cg: int, kg: int) -> ConvProblem:
    return ConvProblem.from_sizes(
        direction,
        n=2,
        c=3 * cg,
        k=3 * kg,
        in_spatial=(8, 9),
        filter_spatial=(3, 2),
        pads=(1, 2),
        strides=(1, 2),
        dilations=(2, 1),
        groups=3,
        dtype=dtype,
        layout=layout,
    )


class TestGroupedContract(SolverContract):
    """direct.grouped on its own problems (the generic generator rarely draws narrow groups)."""

    solver = GroupedDirectSolver()
    problems = tuple(
        _grouped(d, layout, dtype, cg, kg)
        for d in DIRECTIONS
        for layout, dtype, cg, kg in (
            ("NCHW", "float32", 4, 4),
            ("NHWC", "float16", 2, 3),
            ("NHWC", "float32", 3, 1),
            ("NCHW", "bfloat16", 1, 2),
        )
    )


@pytest.mark.skipif(find_corpus() is None, reason="the problem corpus is not available")
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_matches_reference_on_corpus_grouped_rows(direction: str) -> None:
    """Every distinct 2-D grouped geometry of the corpus (filter, pads, strides, dilations,
    dtype, layout), shrunk to 4 channels per group, in each direction."""
    solver, ctx = GroupedDirectSolver(), cpu_context()
    seen: dict[tuple, dict] = {}
    for row in load_rows():
        if len(row["x"]) == 2 and 1 < row["groups"] < row["c"]:
            geometry = tuple(map(tuple, (row["filt"], row["pad"], row["stride"], row["dil"])))
            seen.setdefault((geometry, row["dtype"], row["layout"]), row)
    assert len(seen) >= 10
    for i, row in enumerate(seen.values()):
        problem = shrink_row(row, direction=direction, max_batch=2, max_spatial=10)
        assert solver.is_applicable(ctx, problem), problem
        check_solver(solver, problem, seed=i, tolerance=TOLERANCES[problem.dtype])


@st.composite
def grouped_problems(draw: st.DrawFn) -> ConvProblem:
    """Size-1 dimensions, even filters, dilations that reach into the padding."""
    filt = tuple(draw(st.integers(1, 6)) for _ in range(2))
    dils = tuple(draw(st.integers(1, 3)) for _ in range(2))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(2))
    pads = tuple(draw(st.integers(0, (f - 1) * d + 1)) for f, d in zip(filt, dils, strict=True))
    ins = []
    for f, d, p in zip(filt, dils, pads, strict=True):
        smallest = max(1, d * (f - 1) + 1 - 2 * p)
        ins.append(draw(st.integers(smallest, smallest + 5)))
    groups = draw(st.integers(2, 5))
    cg = draw(st.integers(2, 4))
    return ConvProblem.from_sizes(
        draw(st.sampled_from(DIRECTIONS)),
        n=draw(st.integers(1, 2)),
        c=groups * cg,
        k=groups * draw(st.integers(1, 4)),
        in_spatial=tuple(ins),
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        dtype=draw(st.sampled_from(["float32", "float16", "bfloat16"])),
        layout=draw(st.sampled_from(["NCHW", "NHWC"])),
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(grouped_problems(), st.integers(0, 2**16))
def test_random_grouped_problems_match_reference(problem: ConvProblem, seed: int) -> None:
    ctx, solver = cpu_context(), GroupedDirectSolver()
    assert solver.is_applicable(ctx, problem)
    check_solver(solver, problem, seed=seed, tolerance=TOLERANCES[problem.dtype])
    assert 0 < solver.wti(ctx, problem) <= 1


@pytest.mark.parametrize(
    ("c", "k", "groups", "reason"),
    [(8, 8, 8, "not between"), (8, 8, 1, "not between"), (96, 96, 2, "wider than 16")],
)
def test_declines_with_a_reason(c: int, k: int, groups: int, reason: str) -> None:
    ctx, solver = cpu_context(), GroupedDirectSolver()
    problem = ConvProblem.from_sizes(
        "forward", n=1, c=c, k=k, in_spatial=(5, 5), filter_spatial=(3, 3), groups=groups
    )
    assert reason in solver.is_applicable(ctx, problem).reason
    with pytest.raises(InvalidArgumentError, match=reason):
        solver.get_solution(ctx, problem)

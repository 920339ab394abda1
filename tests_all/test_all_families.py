"""With every family installed: corpus coverage, and find picks correct solutions."""

from __future__ import annotations

import pytest

import miocore
from miocore import corpus, reference
from miocore.solver import normalize_applicability
from miocore.testing import TOLERANCES, cpu_context

FAMILIES = {"gemm", "direct", "winograd", "implicit_gemm", "fft"}


@pytest.fixture(scope="module")
def registry() -> miocore.Registry:
    reg = miocore.default_registry()
    present = {s.algorithm.value for s in reg.solvers}
    if present != FAMILIES:
        pytest.skip(f"needs every family installed; have {sorted(present)}")
    return reg


def test_every_consistent_corpus_row_has_a_solver_in_every_direction(
    registry: miocore.Registry,
) -> None:
    if corpus.find_corpus() is None:
        pytest.skip("the problem corpus (../shared/corpus/) is absent; set MIOCORE_CORPUS")
    ctx = cpu_context()
    missing = []
    checked = 0
    for _row, base in corpus.iter_consistent_problems():
        for direction in ("forward", "backward_data", "backward_weights"):
            p = miocore.ConvProblem(direction, x=base.x, w=base.w, y=base.y, conv=base.conv)
            if not any(
                normalize_applicability(r.solver.is_applicable(ctx, p)) for r in registry.solvers
            ):
                missing.append((p.key, direction))
            checked += 1
    assert checked > 600_000
    assert missing == []


def test_find_best_is_correct_on_corpus_problems(registry: miocore.Registry) -> None:
    if corpus.find_corpus() is None:
        pytest.skip("the problem corpus (../shared/corpus/) is absent; set MIOCORE_CORPUS")
    handle = miocore.Handle("cpu", registry=registry)
    for i, row in enumerate(corpus.sample_rows(12, seed=7)):
        p = corpus.shrink_row(row)
        sols = handle.find_solutions(p, find_mode="NORMAL")
        assert sols and all(s.source == "measured" for s in sols)
        assert len({s.algorithm for s in sols}) >= 2 or p.is_depthwise, sols.report.lines()
        arrays = reference.random_inputs(p, i)
        out = p.direction.output_tensor
        handle.run_solution(sols[0], **arrays)
        expected = reference.convolution(p, **{k: v for k, v in arrays.items() if k != out})
        err = reference.relative_error(arrays[out], expected)
        assert err <= 20 * TOLERANCES[p.dtype], (sols[0].solver, p.key, err)


def test_immediate_mode_ranks_every_family(registry: miocore.Registry) -> None:
    p = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=64, k=64, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1)
    )
    sols = miocore.Handle("cpu", registry=registry).get_solutions(p)
    assert {s.algorithm.value for s in sols} == FAMILIES
    assert all(s.is_estimate and s.source in ("wti", "heuristic") for s in sols)
    times = [s.time_ms for s in sols]
    assert times == sorted(times)  # ranked by the estimate each solver's WTI gives
    assert sols[0].solver != "direct.naive"  # the universal last resort never leads

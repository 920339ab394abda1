"""fft.overlap_save on >= 300 corpus-derived problems per direction, against the reference."""

from __future__ import annotations

import functools

import pytest
from miocore_fft import FftOverlapSave
from miocore_fft.accuracy import TOLERANCES

from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import check_solver, cpu_context

PER_DIRECTION = 300
DIRECTIONS = ("forward", "backward_data", "backward_weights")
SOLVER = FftOverlapSave()


@functools.cache
def _problems() -> dict[str, tuple[list, list]]:
    """Per direction: (applicable shrunk problems, inapplicable ones), from one sample."""
    if find_corpus() is None:
        pytest.skip("the problem corpus (shared/corpus/miopen_problems.jsonl.gz) is not present")
    ctx = cpu_context()
    # strided rows are a fair share of every stratum; 900 per direction leaves > 300 stride-1
    rows = sample_rows(900, seed=1)
    out: dict[str, tuple[list, list]] = {d: ([], []) for d in DIRECTIONS}
    letters = {"F": "forward", "B": "backward_data", "W": "backward_weights"}
    for row in rows:
        direction = letters.get(row["dir"], row["dir"])
        problem = shrink_row(row)
        yes, no = out[direction]
        (yes if SOLVER.is_applicable(ctx, problem.canonical) else no).append(problem)
    return out


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fft_corpus_problems_match_reference(direction: str) -> None:
    """Every applicable sampled problem matches the float64 reference within tolerance."""
    applicable, _ = _problems()[direction]
    assert len(applicable) >= PER_DIRECTION, len(applicable)
    picked = applicable[:PER_DIRECTION]
    kinds = {
        "layouts": {p.x.layout for p in picked},
        "dtypes": {p.dtype for p in picked},
        "ranks": {p.spatial_dims for p in picked},
        "grouped": {p.groups > 1 and not p.is_depthwise for p in picked},
        "depthwise": {p.is_depthwise for p in picked},
        "dilated": {any(d > 1 for d in p.conv.dilations) for p in picked},
    }
    # the sample must exercise every kind the solver claims
    assert {"NCHW", "NHWC", "NCDHW"} <= kinds["layouts"], kinds["layouts"]
    assert len(kinds["dtypes"]) == 3 and kinds["ranks"] == {2, 3}
    assert True in kinds["grouped"] and True in kinds["depthwise"] and True in kinds["dilated"]
    for i, problem in enumerate(picked):
        check_solver(SOLVER, problem, seed=i, tolerance=TOLERANCES[problem.dtype])


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_fft_corpus_strided_rows_are_refused_with_reason(direction: str) -> None:
    """The sample's strided rows are inapplicable and the reason names the strides."""
    _, refused = _problems()[direction]
    assert refused, "the sample should hold strided rows"
    ctx = cpu_context()
    for problem in refused:
        assert any(s > 1 for s in problem.conv.strides)
        answer = SOLVER.is_applicable(ctx, problem.canonical)
        assert (
            not answer
            and "stride 1" in answer.reason
            and str(problem.conv.strides) in (answer.reason)
        )

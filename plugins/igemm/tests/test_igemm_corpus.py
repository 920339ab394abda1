"""Every igemm solver on 300 corpus-derived problems per direction, both strategies.

Problems come from ``sample_rows(300)`` (stratified: NCHW/NHWC/3-D layouts, float32/float16/
bfloat16, grouped, depthwise, strided, dilated) shrunk by ``shrink_row`` to CPU-test size.
Each runs with the default configuration and with the other strategy (column blocks, or the
tap strategy where it fits), against the float64 reference on random data.
"""

from __future__ import annotations

import functools

import pytest
from miocore_igemm import SOLVERS
from miocore_igemm.plans import Geometry
from miocore_igemm.solvers import tap_unfit_reason

from miocore import DataType, PerfConfig
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import check_solver, cpu_context

#: Relative tolerance (max abs error / max abs reference) per dtype. Sums are float32 in every
#: path; the output is rounded once to its dtype, so float16 and bfloat16 are bounded by their
#: rounding (2^-11 and 2^-8) with headroom, float32 by float32 summation over <= a few
#: hundred terms.
TOLERANCE = {DataType.FLOAT32: 2e-5, DataType.FLOAT16: 2e-3, DataType.BFLOAT16: 1.6e-2}
PER_DIRECTION = 300
LETTER = {"forward": "F", "backward_data": "B", "backward_weights": "W"}


@functools.cache
def _rows() -> list[dict]:
    return sample_rows(PER_DIRECTION, seed=7)


def _alternate(geo: Geometry, default: PerfConfig) -> PerfConfig:
    if default["strategy"] == "tap":
        return PerfConfig(strategy="block", block=256)
    if tap_unfit_reason(geo) is None:
        return PerfConfig(strategy="tap", block=geo.n)
    return PerfConfig(strategy="block", block=16384 if default["block"] != 16384 else 256)


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_corpus_problems(solver) -> None:
    if find_corpus() is None:
        pytest.skip("the problem corpus (shared/corpus/miopen_problems.jsonl.gz) is not present")
    ctx = cpu_context()
    rows = [r for r in _rows() if r["dir"] == LETTER[solver.direction.value]]
    assert len(rows) == PER_DIRECTION
    failures = []
    kinds = set()
    for i, row in enumerate(rows):
        problem = shrink_row(row)
        assert solver.is_applicable(ctx, problem), problem.key
        geo = Geometry.of(problem)
        default = solver.default_perf_config(ctx, problem)
        kinds.add((problem.x.layout, problem.dtype, geo.g > 1, geo.depthwise))
        for config in (default, _alternate(geo, default)):
            try:
                check_solver(
                    solver, problem, seed=i, perf_config=config, tolerance=TOLERANCE[problem.dtype]
                )
            except AssertionError as exc:
                failures.append(f"{problem.key} {dict(config)}: {exc}")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:20])
    # the sample really is stratified: both 2-D layouts, a 3-D layout, all dtypes, groups
    layouts = {k[0] for k in kinds}
    assert {"NCHW", "NHWC"} <= layouts and layouts & {"NCDHW", "NDHWC"}
    assert {k[1] for k in kinds} == set(DataType)
    assert any(k[2] for k in kinds)

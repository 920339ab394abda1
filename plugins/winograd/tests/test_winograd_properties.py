"""Property: winograd.rxs on the shapes that hide index bugs (miocore.testing.strategies).

Size-1 inputs, filters longer than the input, even filters and dilations that reach into the
padding, every direction, dtype, layout and grouping; the bound is the one
test_winograd_solver holds each output tile to (or the solver's own ``expected_error`` when
that is larger), and an output whose every tap sees only padding must be exactly zero.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from miocore_winograd import WinogradRxS

from miocore import ConvProblem
from miocore.testing import cpu_context
from miocore.testing.strategies import check_strictly, conv_problems

SOLVER = WinogradRxS()
CTX = cpu_context()
#: As in test_winograd_solver: fp32 grows with the output tile; fp16/bf16 are bounded by their
#: final rounding.
TOLERANCE = {
    "float32": {2: 2e-6, 4: 3e-5, 6: 1e-4},
    "float16": {2: 2e-3, 4: 2e-3, 6: 2e-3},
    "bfloat16": {2: 1.6e-2, 4: 1.6e-2, 6: 1.6e-2},
}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_winograd_edge_shapes_exact(problem: ConvProblem, seed: int) -> None:
    """Applicable means correct within the tile's bound, and exact zeros where due."""
    canon = problem.canonical
    if not SOLVER.is_applicable(CTX, canon):
        return
    tile = SOLVER.default_perf_config(CTX, canon)["tile"]
    bound = max(TOLERANCE[problem.dtype.value][tile], SOLVER.expected_error(CTX, canon) or 0.0)
    check_strictly(SOLVER, problem, seed=seed, tolerance=bound)

"""miocore's solver contract suite on the Winograd solver (winograd.rxs)."""

from __future__ import annotations

from miocore_winograd import WinogradRxS

from miocore import ConvProblem, PerfConfig
from miocore.testing import TOLERANCES, SolverContract

#: float32 error grows with the output tile (see test_winograd_transforms); float16 and
#: bfloat16 are bounded by their final rounding, as for every solver.
FP32_BY_TILE = {2: 2e-6, 4: 3e-5, 6: 1e-4}


def tolerance(problem: ConvProblem, config: PerfConfig | None) -> float:
    """The bound for ``problem`` under ``config`` (the widest tile when none is given)."""
    if problem.dtype.value != "float32":
        return TOLERANCES[problem.dtype]
    return FP32_BY_TILE[config["tile"]] if config is not None else max(FP32_BY_TILE.values())


class TestWinogradRxSContract(SolverContract):
    """winograd.rxs: RxS splits, stride phases, every direction, tile x block configs."""

    solver = WinogradRxS()
    tolerance = tolerance

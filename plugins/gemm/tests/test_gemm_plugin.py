"""Registration through the entry point, and the WTI estimate's ranking sense."""

from __future__ import annotations

from miocore_gemm import Gemm1x1Solver, GemmIm2colSolver

import miocore
from miocore import Algorithm, ConvProblem
from miocore.testing import cpu_context

CTX = cpu_context()


def test_solvers_are_registered_by_the_plugin() -> None:
    names = {s.solver.name: s for s in miocore.solvers()}
    for name in ("gemm.1x1", "gemm.im2col"):
        assert name in names
        assert names[name].solver.algorithm is Algorithm.GEMM


def test_not_applicable_says_why() -> None:
    p = ConvProblem.from_sizes("forward", n=1, c=4, k=4, in_spatial=(8, 8), filter_spatial=(3, 3))
    answer = Gemm1x1Solver().is_applicable(CTX, p)
    assert not answer and "(3, 3)" in answer.reason
    padded = ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(8, 8), filter_spatial=(1, 1), pads=(1, 0)
    )
    assert "pads" in Gemm1x1Solver().is_applicable(CTX, padded).reason


def test_wti_ranks_sensibly() -> None:
    def problem(**kw):
        sizes = dict(n=8, c=256, k=256, in_spatial=(28, 28), filter_spatial=(3, 3), pads=(1, 1))
        sizes.update(kw)
        return ConvProblem.from_sizes("forward", **sizes)

    dense = problem()
    pointwise = problem(filter_spatial=(1, 1), pads=(0, 0))
    depthwise = problem(groups=256)
    im2col, one = GemmIm2colSolver(), Gemm1x1Solver()
    for p in (dense, pointwise, depthwise):
        assert 0 < im2col.wti(CTX, p) <= 1
    # In place beats a column copy; a dense 3x3 uses BLAS far better than a depthwise one,
    # whose GEMMs have one output channel each.
    assert one.wti(CTX, pointwise) > im2col.wti(CTX, pointwise)
    assert im2col.wti(CTX, dense) > 10 * im2col.wti(CTX, depthwise)
    assert im2col.wti(CTX, dense) > 0.1

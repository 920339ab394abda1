"""miocore's solver contract suite on both GEMM solvers (opt-in pytest plugin)."""

from __future__ import annotations

from miocore_gemm import Gemm1x1Solver, GemmIm2colSolver

from miocore.testing import SolverContract

pytest_plugins = ["miocore.testing"]


class TestGemmIm2colContract(SolverContract):
    """The universal solver."""

    solver = GemmIm2colSolver()


class TestGemm1x1Contract(SolverContract):
    """The pointwise solver (declines every filter larger than 1 or any padding)."""

    solver = Gemm1x1Solver()

"""miocore's solver contract suite on the GEMM solvers (gemm.1x1, gemm.im2col)."""

from __future__ import annotations

from miocore_gemm import Gemm1x1Solver, GemmIm2colSolver

from miocore.testing import SolverContract


class TestGemm1x1Contract(SolverContract):
    """gemm.1x1: 1x1 filters, every direction."""

    solver = Gemm1x1Solver()


class TestGemmIm2colContract(SolverContract):
    """gemm.im2col: any filter, tiled im2col/col2im workspace."""

    solver = GemmIm2colSolver()

"""miocore-gemm: the GEMM fallback family (im2col/col2im + BLAS matmul) for miocore."""

from __future__ import annotations

from miocore_gemm.solvers import SOLVERS, Gemm1x1Solver, GemmIm2colSolver

__all__ = ["SOLVERS", "Gemm1x1Solver", "GemmIm2colSolver"]

"""miocore-gemm: the GEMM fallback family (im2col/col2im + BLAS matmul) for miocore.

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_gemm.solvers import SOLVERS, Gemm1x1Solver, GemmIm2colSolver

#: Public name -> the module that defines it.
_EXPORTS = {
    "SOLVERS": "miocore_gemm.solvers",
    "Gemm1x1Solver": "miocore_gemm.solvers",
    "GemmIm2colSolver": "miocore_gemm.solvers",
}

__all__ = ["SOLVERS", "Gemm1x1Solver", "GemmIm2colSolver"]


__getattr__ = lazy_exports(__name__, _EXPORTS)

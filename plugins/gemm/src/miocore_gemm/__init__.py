"""miocore-gemm: the GEMM fallback family (im2col/col2im + BLAS matmul) for miocore.

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from miocore_gemm.solvers import SOLVERS, Gemm1x1Solver, GemmIm2colSolver

#: Public name -> the module that defines it.
_EXPORTS = {
    "SOLVERS": "miocore_gemm.solvers",
    "Gemm1x1Solver": "miocore_gemm.solvers",
    "GemmIm2colSolver": "miocore_gemm.solvers",
}

__all__ = ["SOLVERS", "Gemm1x1Solver", "GemmIm2colSolver"]


def __getattr__(name: str) -> Any:
    """Import the module of a public name on first access."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this function
    return value

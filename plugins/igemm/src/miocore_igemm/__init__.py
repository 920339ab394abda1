"""miocore-igemm: implicit-GEMM convolution solvers (per-tap and column-block, NCHW and NHWC).

Solvers: ``igemm.fwd``, ``igemm.bwd`` (backward data) and ``igemm.wrw`` (backward weights).

The names below load on first access (PEP 562): importing the package, as the plugin scan
does, imports none of its solver modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_igemm.solvers import (
        SOLVERS,
        ImplicitGemmBackwardData,
        ImplicitGemmBackwardWeights,
        ImplicitGemmForward,
        ImplicitGemmSolver,
    )

#: Public name -> the module that defines it.
_EXPORTS = {
    "SOLVERS": "miocore_igemm.solvers",
    "ImplicitGemmBackwardData": "miocore_igemm.solvers",
    "ImplicitGemmBackwardWeights": "miocore_igemm.solvers",
    "ImplicitGemmForward": "miocore_igemm.solvers",
    "ImplicitGemmSolver": "miocore_igemm.solvers",
}

__all__ = [
    "SOLVERS",
    "ImplicitGemmBackwardData",
    "ImplicitGemmBackwardWeights",
    "ImplicitGemmForward",
    "ImplicitGemmSolver",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)

"""miocore-igemm: implicit-GEMM convolution solvers (per-tap and column-block, NCHW and NHWC).

Solvers: ``igemm.fwd``, ``igemm.bwd`` (backward data) and ``igemm.wrw`` (backward weights).
"""

from miocore_igemm.solvers import (
    SOLVERS,
    ImplicitGemmBackwardData,
    ImplicitGemmBackwardWeights,
    ImplicitGemmForward,
    ImplicitGemmSolver,
)

__all__ = [
    "SOLVERS",
    "ImplicitGemmBackwardData",
    "ImplicitGemmBackwardWeights",
    "ImplicitGemmForward",
    "ImplicitGemmSolver",
]

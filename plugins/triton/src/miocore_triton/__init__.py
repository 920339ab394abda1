"""miocore-triton: implicit-GEMM convolution kernels written in Triton, compiled by Triton to
cubins and hsacos and launched through miocore's own backend.

Solvers: ``triton.igemm_fwd``, ``triton.igemm_bwd`` (backward data), ``triton.igemm_wrw``
(backward weights), and ``triton.depth_fwd``, ``triton.depth_bwd``, ``triton.depth_wrw``: the same
GEMMs on a few-channel layer's depth image (network stems and first layers). The names below
load on first access (PEP 562): importing the package, as the plugin scan does, imports none of
its solver modules nor Triton."""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore import lazy_exports

if TYPE_CHECKING:
    from miocore_triton.solvers import (
        SOLVERS,
        TritonBackwardData,
        TritonBackwardWeights,
        TritonConvSolver,
        TritonForward,
    )

#: Public name -> the module that defines it.
_EXPORTS = {
    "SOLVERS": "miocore_triton.solvers",
    "TritonBackwardData": "miocore_triton.solvers",
    "TritonBackwardWeights": "miocore_triton.solvers",
    "TritonConvSolver": "miocore_triton.solvers",
    "TritonForward": "miocore_triton.solvers",
}

__all__ = [
    "SOLVERS",
    "TritonBackwardData",
    "TritonBackwardWeights",
    "TritonConvSolver",
    "TritonForward",
]


__getattr__ = lazy_exports(__name__, _EXPORTS)

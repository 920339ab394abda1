"""What GPU solvers use to describe and launch their kernels, without a vendor binding.

Solver plugins import these names (never ``cuda.bindings`` or ``hip``): the compile option that
selects an element type, the packed argument list, the ``MioTensor5`` struct of a descriptor,
and the grid size of a grid-stride kernel. Invokers receive :class:`CompiledKernel` objects
from the backend (``ConvSolution.kernels`` order) and call ``kernel.launch(args, grid=...)``;
the tensors in ``InvokeParams`` carry their device address as ``.ptr``.
"""

from __future__ import annotations

import math

from miocore.backends._gpu.compiler import DTYPE_OPTIONS
from miocore.backends._gpu.launch import (
    CompiledKernel,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)
from miocore.problem.conv import ConvProblem

GPU_BACKENDS = frozenset({"cuda", "hip"})

#: A GEMM side shorter than this leaves a GEMM kernel's tiles partly empty.
FULL_GEMM_SIDE = 64


def gemm_fill(problem: ConvProblem) -> float:
    """The share of a GEMM kernel's rate one group's GEMM can reach, from its two sides set by
    the channels (``K/groups``, and ``C/groups`` times the filter taps; the third side is the
    pixels, long in every direction): 1 for ordinary layers, far less for narrow groups. For
    the WTI of GEMM-shaped solvers, which otherwise rate a depthwise layer like a dense one.

    On the sm90 database's records the GEMM-family solvers ran depthwise layers (sides 1 and
    9; this factor 1/455) 390-7,000x below their dense median rate, grouped layers 5-45x below,
    and ``gemm.gpu_nhwc`` dense layers with both sides under 32 ~10x below (this factor ~0.1).
    """
    g = problem.groups
    kg = problem.k // g
    cgf = problem.c // g * math.prod(problem.filter_spatial)
    return min(1.0, kg / FULL_GEMM_SIDE) * min(1.0, cgf / FULL_GEMM_SIDE)


__all__ = [
    "DTYPE_OPTIONS",
    "FULL_GEMM_SIDE",
    "GPU_BACKENDS",
    "CompiledKernel",
    "KernelArgs",
    "channels_last",
    "gemm_fill",
    "grid_for",
    "tensor5_bytes",
]

"""What GPU solvers use to describe and launch their kernels, without a vendor binding.

Solver plugins import these names (never ``cuda.bindings`` or ``hip``): the compile option that
selects an element type, the packed argument list, the ``MioTensor5`` struct of a descriptor,
and the grid size of a grid-stride kernel. Invokers receive :class:`CompiledKernel` objects
from the backend (``ConvSolution.kernels`` order) and call ``kernel.launch(args, grid=...)``;
the tensors in ``InvokeParams`` carry their device address as ``.ptr``.
"""

from __future__ import annotations

from miocore.backends._gpu.compiler import DTYPE_OPTIONS
from miocore.backends._gpu.launch import (
    CompiledKernel,
    KernelArgs,
    channels_last,
    grid_for,
    tensor5_bytes,
)

GPU_BACKENDS = frozenset({"cuda", "hip"})

__all__ = [
    "DTYPE_OPTIONS",
    "GPU_BACKENDS",
    "CompiledKernel",
    "KernelArgs",
    "channels_last",
    "grid_for",
    "tensor5_bytes",
]

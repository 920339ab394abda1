"""The ``gemm`` plugin module named by the ``miocore`` entry point.

Every process that uses miocore imports this module, so it imports nothing of the solvers:
each is declared lazily (name, family, backends) and its module is imported when a find first
asks it a question (a CPU handle never imports the GPU solvers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: The GPU kernel sources (``miocore_gemm.gpu.KERNEL_DIR``), without importing it.
KERNEL_DIR = Path(__file__).parent / "kernels"

_GPU = ("cuda", "hip")

#: (factory, name, backends) of every solver, in registration order.
_SOLVERS = (
    ("miocore_gemm.solvers:Gemm1x1Solver", "gemm.1x1", ("cpu",)),
    ("miocore_gemm.solvers:GemmIm2colSolver", "gemm.im2col", ("cpu",)),
    ("miocore_gemm.gpu:GpuIm2colGemmSolver", "gemm.gpu_im2col", _GPU),
    ("miocore_gemm.gpu_nhwc:GpuChannelsLastGemmSolver", "gemm.gpu_nhwc", _GPU),
    ("miocore_gemm.gpu_nhwc:GpuChannelsLastGemmTf32Solver", "gemm.gpu_nhwc_tf32", _GPU),
    ("miocore_gemm.gpu:GpuIm2colGemmTf32Solver", "gemm.gpu_im2col_tf32", _GPU),
)


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``gemm.1x1`` and ``gemm.im2col`` (CPU), ``gemm.gpu_im2col`` (NCHW) and
    ``gemm.gpu_nhwc`` (channels-last) and their TF32 twins ``gemm.gpu_im2col_tf32`` and
    ``gemm.gpu_nhwc_tf32`` on GPUs."""
    for factory, name, backends in _SOLVERS:
        yield miocore.SolverRecord(factory=factory, name=name, algorithm="gemm", backends=backends)


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the GEMM family (``gemm/im2col.cu``, ``gemm/im2col_cl.cu``)."""
    yield miocore.KernelSourceRecord(name="gemm", path=KERNEL_DIR)

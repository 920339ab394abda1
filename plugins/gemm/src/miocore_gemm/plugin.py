"""The ``gemm`` plugin module named by the ``miocore`` entry point."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_gemm.gpu import KERNEL_DIR, GpuIm2colGemmSolver
from miocore_gemm.gpu_nhwc import GpuChannelsLastGemmSolver, GpuChannelsLastGemmTf32Solver
from miocore_gemm.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``gemm.1x1`` and ``gemm.im2col`` (CPU), ``gemm.gpu_im2col`` (NCHW) and
    ``gemm.gpu_nhwc`` (channels-last) and its TF32 twin ``gemm.gpu_nhwc_tf32`` on GPUs."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
    yield miocore.SolverRecord(solver=GpuIm2colGemmSolver())
    yield miocore.SolverRecord(solver=GpuChannelsLastGemmSolver())
    yield miocore.SolverRecord(solver=GpuChannelsLastGemmTf32Solver())


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the GEMM family (``gemm/im2col.cu``, ``gemm/im2col_cl.cu``)."""
    yield miocore.KernelSourceRecord(name="gemm", path=KERNEL_DIR)

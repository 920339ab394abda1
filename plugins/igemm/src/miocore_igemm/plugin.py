"""The ``igemm`` entry point: registers the implicit-GEMM solvers with miocore."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_igemm.gpu import GPU_SOLVERS, KERNEL_DIR
from miocore_igemm.gpu_fma import GPU_FMA_SOLVERS
from miocore_igemm.gpu_wrw import GPU_WRW_SOLVERS
from miocore_igemm.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """CPU: ``igemm.fwd``, ``igemm.bwd``, ``igemm.wrw``; GPU: ``igemm.gpu_mma`` (fp16/bf16
    tensor cores) and ``igemm.gpu_tf32`` (fp32 through TF32, only in the ``tf32`` math mode)."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
    for solver in GPU_SOLVERS:
        yield miocore.SolverRecord(solver=solver)
    for solver in GPU_FMA_SOLVERS:  # igemm.gpu_fma: exact fp32 on CUDA cores, all directions
        yield miocore.SolverRecord(solver=solver)
    for solver in GPU_WRW_SOLVERS:  # igemm.gpu_mma_wrw, igemm.gpu_tf32_wrw (backward weights)
        yield miocore.SolverRecord(solver=solver)


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the igemm family (``igemm/igemm_mma.cu``)."""
    yield miocore.KernelSourceRecord(name="igemm", path=KERNEL_DIR)

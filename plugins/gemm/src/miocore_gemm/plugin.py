"""The ``gemm`` plugin module named by the ``miocore`` entry point."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_gemm.gpu import KERNEL_DIR, GpuIm2colGemmSolver
from miocore_gemm.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``gemm.1x1`` and ``gemm.im2col``."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
    yield miocore.SolverRecord(solver=GpuIm2colGemmSolver())


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the GEMM family (``gemm/im2col.cu``)."""
    yield miocore.KernelSourceRecord(name="gemm", path=KERNEL_DIR)
